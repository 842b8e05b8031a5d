package runtime

import (
	"bytes"
	"strings"
	"testing"
)

// The end line is found wherever the writes split it; output before it is
// the call's, after it nobody's; a marker with another nonce is output.
func TestSessionStreamSplits(t *testing.T) {
	stream := "hello\x00sandpit:end:other:{}\nworld\x00sandpit:end:abc:{\"status\":\"ok\"}\nlater"
	for size := 1; size <= len(stream); size++ {
		var s sessionStream
		buf := newCappedBuffer(1 << 10)
		var live bytes.Buffer
		done := s.begin("abc", buf, func(p []byte) { live.Write(p) })
		for i := 0; i < len(stream); i += size {
			s.Write([]byte(stream[i:min(i+size, len(stream))]))
		}
		select {
		case e := <-done:
			if e.broken || string(e.payload) != `{"status":"ok"}` {
				t.Fatalf("size %d: end %+v %q", size, e, e.payload)
			}
		default:
			t.Fatalf("size %d: no end", size)
		}
		want := "hello\x00sandpit:end:other:{}\nworld"
		if got, _, _ := buf.result(); got != want || live.String() != want {
			t.Fatalf("size %d: output %q, live %q", size, got, live.String())
		}
		if s.dropped != int64(len("later")) {
			t.Fatalf("size %d: dropped %d", size, s.dropped)
		}
	}
}

// A trailing NUL that may begin the marker is held back only until it
// cannot.
func TestSessionStreamHoldsBack(t *testing.T) {
	var s sessionStream
	buf := newCappedBuffer(1 << 10)
	s.begin("n", buf, nil)
	s.Write([]byte("a\x00sand"))
	if got, _, _ := buf.result(); got != "a" {
		t.Fatalf("got %q", got)
	}
	s.Write([]byte("box"))
	if got, _, _ := buf.result(); got != "a\x00sandbox" {
		t.Fatalf("got %q", got)
	}
}

// An end line past maxEndLine breaks the protocol instead of growing.
func TestSessionStreamEndLineBound(t *testing.T) {
	var s sessionStream
	done := s.begin("n", newCappedBuffer(16), nil)
	s.Write([]byte("\x00sandpit:end:n:"))
	chunk := []byte(strings.Repeat("x", 64<<10))
	for i := 0; i < 5; i++ {
		s.Write(chunk)
	}
	select {
	case e := <-done:
		if !e.broken {
			t.Fatal("not broken")
		}
	default:
		t.Fatal("no end")
	}
}

func TestMarkerFilter(t *testing.T) {
	tests := []struct {
		name  string
		build bool
		in    string
		want  string
	}{
		{"python", false, string(started) + "out\n", "out\n"},
		{"build ok", true, string(started) + string(compileOK) + "run\n", "run\n"},
		{"build failed", true, string(started) + string(compileFailed), ""},
		{"no marker", false, "plain", "plain"},
	}
	for _, tt := range tests {
		for size := 1; size <= len(tt.in); size++ {
			var got bytes.Buffer
			f := &markerFilter{next: func(p []byte) { got.Write(p) }, build: tt.build}
			for i := 0; i < len(tt.in); i += size {
				f.write([]byte(tt.in[i:min(i+size, len(tt.in))]))
			}
			if got.String() != tt.want {
				t.Errorf("%s, writes of %d: got %q, want %q", tt.name, size, got.String(), tt.want)
			}
		}
	}
}
