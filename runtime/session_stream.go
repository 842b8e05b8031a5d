package runtime

import (
	"bytes"
	"sync"
)

// sessionStream splits one output stream of a session's sandbox into its
// calls. The REPL ends each call's output with an end line carrying the
// call's nonce (a random id the server chose for it) and a JSON payload:
//
//	\x00sandpit:end:NONCE:PAYLOAD\n
//
// Bytes between begin and the end line are the call's output (kept in its
// capped buffer, and shown live); bytes outside any call (a thread of the
// program still printing after its call ended) are counted and dropped. The
// stream is untrusted: an end line with another nonce is output like any
// other, and an end line longer than maxEndLine ends the session.
type sessionStream struct {
	mu      sync.Mutex
	marker  []byte // "\x00sandpit:end:NONCE:" of the call in progress; nil between calls
	buf     *cappedBuffer
	watch   func([]byte)
	pending []byte // a held-back tail of output that may begin the marker
	inLine  bool   // reading an end line's payload
	line    []byte
	done    chan sessionEnd
	dropped int64 // bytes written outside any call
}

// sessionEnd is how a stream's call ended: the end line's payload, or a
// broken protocol.
type sessionEnd struct {
	payload []byte
	broken  bool
}

// maxEndLine bounds an end line's payload: the REPL's JSON holds a repr of
// at most 16 Ki characters (up to 6 bytes each, escaped) and 50 names.
const maxEndLine = 256 << 10

var endPrefix = []byte("\x00sandpit:end:")

func endMarker(nonce string) []byte {
	return append(append(append([]byte(nil), endPrefix...), nonce...), ':')
}

// begin starts a call: its output goes to buf (and watch, when set) until
// its end line. The returned channel receives how it ended, once.
func (s *sessionStream) begin(nonce string, buf *cappedBuffer, watch func([]byte)) <-chan sessionEnd {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marker, s.buf, s.watch = endMarker(nonce), buf, watch
	s.pending, s.inLine, s.line = nil, false, nil
	s.done = make(chan sessionEnd, 1)
	return s.done
}

// abandon forgets the call in progress (its session is being destroyed).
func (s *sessionStream) abandon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marker, s.buf, s.watch, s.pending, s.line = nil, nil, nil, nil, nil
}

func (s *sessionStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		if s.marker == nil {
			s.dropped += int64(len(p))
			return n, nil
		}
		if s.inLine {
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				s.line = append(s.line, p...)
				if len(s.line) > maxEndLine {
					s.finish(sessionEnd{broken: true})
				}
				return n, nil
			}
			s.line = append(s.line, p[:i]...)
			p = p[i+1:]
			if len(s.line) > maxEndLine {
				s.finish(sessionEnd{broken: true})
			} else {
				s.finish(sessionEnd{payload: s.line})
			}
			continue
		}
		data := p
		if len(s.pending) > 0 {
			data = append(s.pending, p...)
			s.pending = nil
		}
		if i := bytes.Index(data, s.marker); i >= 0 {
			s.emit(data[:i])
			p = data[i+len(s.marker):]
			s.inLine, s.line = true, nil
			continue
		}
		keep := markerPrefixSuffix(data, s.marker)
		s.emit(data[:len(data)-keep])
		s.pending = append([]byte(nil), data[len(data)-keep:]...)
		return n, nil
	}
	return n, nil
}

// finish ends the call in progress with how it ended.
func (s *sessionStream) finish(e sessionEnd) {
	s.done <- e
	s.marker, s.buf, s.watch, s.inLine, s.line, s.pending = nil, nil, nil, false, nil, nil
}

func (s *sessionStream) emit(p []byte) {
	if len(p) == 0 {
		return
	}
	s.buf.Write(p)
	if s.watch != nil {
		s.watch(p)
	}
}

// markerPrefixSuffix is the length of the longest end of data that is a
// proper prefix of marker: output that may continue into the marker, held
// back until the next write says. Markers start with a NUL byte, which
// ordinary output rarely has, so this is almost always 0.
func markerPrefixSuffix(data, marker []byte) int {
	i := bytes.LastIndexByte(data, marker[0])
	for ; i >= 0; i = bytes.LastIndexByte(data[:i], marker[0]) {
		tail := data[i:]
		if len(tail) < len(marker) && bytes.HasPrefix(marker, tail) {
			return len(tail)
		}
		if len(data)-i >= len(marker) {
			break // longer tails cannot be proper prefixes
		}
	}
	return 0
}
