package mcp

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// TestRunRequestTimeout: timeout_seconds is checked against the ceiling as
// the number the caller sent, before it becomes a time.Duration: 1e10 s
// overflowed int64 nanoseconds to a negative duration, passed the ceiling
// check and ran with the 10 s default (review 2026-11-30, L4).
func TestRunRequestTimeout(t *testing.T) {
	cfg := Config{Runner: &scriptedRunner{}}
	cfg.defaults()
	tests := []struct {
		name    string
		seconds float64
		want    time.Duration // 0: an argument error naming want
		errHas  string
	}{
		{name: "default", seconds: 0, want: sandpit.DefaultTimeout},
		{name: "half a second", seconds: 0.5, want: 500 * time.Millisecond},
		{name: "the ceiling", seconds: 60, want: 60 * time.Second},
		{name: "just past the ceiling", seconds: 60.001, errHas: "over the ceiling"},
		{name: "overflows int64 nanoseconds", seconds: 1e10, errHas: "over the ceiling"},
		{name: "past the largest Duration", seconds: 9.3e9, errHas: "over the ceiling"},
		{name: "huge", seconds: 1e300, errHas: "over the ceiling"},
		{name: "negative", seconds: -1, errHas: "must be positive"},
		{name: "rounds to zero", seconds: 1e-12, errHas: "too short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := cfg.runRequest(RunCodeArgs{Language: "python", Code: "print(1)", TimeoutSeconds: tt.seconds})
			if tt.errHas != "" {
				if !errors.Is(err, sandpit.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v (timeout %v), want an argument error saying %q", err, req.Timeout, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if req.Timeout != tt.want {
				t.Errorf("timeout = %v, want %v", req.Timeout, tt.want)
			}
		})
	}
}
