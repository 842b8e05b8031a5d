package runtime

import (
	"bytes"
	"regexp"

	"github.com/sandpit-dev/sandpit"
)

// validRunID is what a caller-chosen run id (Request.ID) may be: it names
// the run's sandbox, its directory and its workspace view.
var validRunID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// watchOutput makes fn (a Request.Output) see sb's output as it is
// written, before the program can write any. A sandbox under the waiter
// (mode != "") starts its stdout with the waiter's marker lines, which fn
// does not see; the Result's output is stripped of them as before.
func watchOutput(sb *sandbox, fn sandpit.OutputFunc, mode string) {
	if fn == nil {
		return
	}
	out := func(p []byte) { fn(sandpit.Stdout, p) }
	if mode != "" {
		f := &markerFilter{next: out, build: mode == "build"}
		out = f.write
	}
	sb.stdout.setWatch(out)
	sb.stderr.setWatch(func(p []byte) { fn(sandpit.Stderr, p) })
}

// markerFilter drops the waiter's lines from the start of a live stdout:
// "started", then for a compiled language the compiler's verdict. Bytes
// that cannot be those lines pass at once. One stream's writes come from
// one goroutine, so it needs no lock.
type markerFilter struct {
	next  func([]byte)
	build bool
	held  []byte
	stage int // 0: expecting started; 1: expecting a verdict; 2: passing through
}

func (f *markerFilter) write(p []byte) {
	if f.stage == 2 {
		f.next(p)
		return
	}
	f.held = append(f.held, p...)
	for f.stage < 2 {
		wants := [][]byte{started}
		if f.stage == 1 {
			wants = [][]byte{compileOK, compileFailed}
		}
		matched, maybe := false, false
		for _, w := range wants {
			if bytes.HasPrefix(f.held, w) {
				f.held = f.held[len(w):]
				matched = true
				break
			}
			if bytes.HasPrefix(w, f.held) {
				maybe = true
			}
		}
		switch {
		case matched && f.stage == 0 && f.build:
			f.stage = 1
		case matched:
			f.stage = 2
		case maybe:
			return // wait for the rest of the line
		default:
			f.stage = 2
		}
	}
	if len(f.held) > 0 {
		f.next(f.held)
	}
	f.held = nil
}

// watchUsage gives fn a reader of sb's cgroup counters (req.WatchUsage).
func (r *Runtime) watchUsage(sb *sandbox, fn func(func() sandpit.Usage)) {
	if fn == nil {
		return
	}
	m := sb.h.Meter()
	if m == nil {
		return // no cgroup of its own: the counters would be a parent's
	}
	m.Close()
	// Opened for each reading: a reading after the sandbox is gone finds
	// no files and reads zero.
	fn(func() sandpit.Usage {
		m := sb.h.Meter()
		if m == nil {
			return sandpit.Usage{}
		}
		defer m.Close()
		k, _ := m.Read()
		return k.Usage()
	})
}
