package engine

import (
	"bytes"
	"io"
	"os"
	"sync"
)

// Stdin is a sandbox's standard input. A cold run knows its stdin when the
// sandbox is made; a pooled sandbox gets it (after a request header) when a
// request claims it. Drained closes once everything was read.
type Stdin struct {
	mu      sync.Mutex
	r       io.Reader
	pw      *io.PipeWriter
	drained chan struct{}
	once    sync.Once
	held    *os.File // see Hold
}

// FixedStdin feeds the parts, then EOF.
func FixedStdin(parts ...[]byte) *Stdin {
	return &Stdin{r: bytes.NewReader(bytes.Join(parts, nil)), drained: make(chan struct{})}
}

// LateStdin feeds whatever is later passed to Send or written to Writer.
func LateStdin() *Stdin {
	pr, pw := io.Pipe()
	return &Stdin{r: pr, pw: pw, drained: make(chan struct{})}
}

func (f *Stdin) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		f.once.Do(func() { close(f.drained) })
	}
	return n, err
}

// Drained closes once the feed reached EOF.
func (f *Stdin) Drained() <-chan struct{} { return f.drained }

// Writer is a late stream's writer (nil for a fixed one): a session keeps
// writing frames to it.
func (f *Stdin) Writer() io.Writer {
	if f.pw == nil {
		return nil
	}
	return f.pw
}

// Send writes the parts and ends a late stream, in the background: the
// program may not read its stdin at all.
func (f *Stdin) Send(parts ...[]byte) {
	go func() {
		for _, p := range parts {
			if _, err := f.pw.Write(p); err != nil {
				return
			}
		}
		f.pw.Close()
	}()
}

// Abort ends a late stream without data (a pooled sandbox being discarded).
func (f *Stdin) Abort() {
	if f.pw != nil {
		f.pw.Close()
	}
	f.Release()
}

// Hold keeps an extra writer open on the engine's stdin pipe until
// Release: an engine whose pipe could be read to EOF before any writer
// opened it holds one from the start.
func (f *Stdin) Hold(w *os.File) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = w
}

// Release closes the held writer, once everything was written: the program
// can then see EOF.
func (f *Stdin) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held != nil {
		f.held.Close()
		f.held = nil
	}
}
