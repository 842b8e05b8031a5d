package runtime

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// cappedBuffer keeps the first max bytes written to it and counts the rest.
// It never returns an error, so the copier keeps draining the pipe: a program
// that floods output is not blocked on a full pipe (it would never reach its
// timeout's kill otherwise) and the server's memory stays bounded.
type cappedBuffer struct {
	mu    sync.Mutex
	max   int64
	buf   []byte
	total int64
	// watch, when set, also sees every write (live output); sink, when set,
	// takes every write instead of the buffer (a session's demultiplexer).
	// Both are set before the program can write (see watchOutput).
	watch func([]byte)
	sink  interface{ Write([]byte) (int, error) }
}

func newCappedBuffer(max int64) *cappedBuffer {
	return &cappedBuffer{max: max, buf: make([]byte, 0, min(max, 4096))}
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	if sink := b.sink; sink != nil {
		b.mu.Unlock()
		sink.Write(p)
		return len(p), nil
	}
	b.total += int64(len(p))
	if room := b.max - int64(len(b.buf)); room > 0 {
		b.buf = append(b.buf, p[:min(int64(len(p)), room)]...)
	}
	watch := b.watch
	b.mu.Unlock()
	if watch != nil {
		watch(p)
	}
	return len(p), nil
}

// setWatch makes fn see every later write.
func (b *cappedBuffer) setWatch(fn func([]byte)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watch = fn
}

// divert sends every later write to w instead of the buffer.
func (b *cappedBuffer) divert(w interface{ Write([]byte) (int, error) }) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sink = w
}

// TruncationMarker ends output that was cut at the cap.
const TruncationMarker = "\n[sandpit: output truncated: %d of %d bytes shown]\n"

// result returns the kept text (valid UTF-8: a rune cut at the cap is
// dropped, invalid bytes are replaced), whether it was truncated, and the
// total written.
func (b *cappedBuffer) result() (string, bool, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := b.buf
	truncated := b.total > int64(len(kept))
	if truncated {
		// Drop a partial rune at the cut.
		for i := 0; i < utf8.UTFMax && len(kept) > 0; i++ {
			r, size := utf8.DecodeLastRune(kept)
			if r != utf8.RuneError || size > 1 {
				break
			}
			kept = kept[:len(kept)-1]
		}
	}
	s := string(kept)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if truncated {
		s += fmt.Sprintf(TruncationMarker, len(kept), b.total)
	}
	return s, truncated, b.total
}

// stripPrefix removes p from the start of the kept bytes, and from the
// count, when the output starts with it.
func (b *cappedBuffer) stripPrefix(p []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !bytes.HasPrefix(b.buf, p) {
		return false
	}
	b.buf = b.buf[len(p):]
	b.total -= int64(len(p))
	return true
}

// clamp keeps at most max bytes (a pooled sandbox's buffer has room for the
// waiter's verdict line on top of the cap).
func (b *cappedBuffer) clamp(max int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if int64(len(b.buf)) > max {
		b.buf = b.buf[:max]
	}
	b.max = max
}
