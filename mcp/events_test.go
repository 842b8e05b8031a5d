package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

func TestEventsRecord(t *testing.T) {
	e := NewEvents(3)
	for _, tc := range []struct {
		err  error
		kind string // "" : not an event
	}{
		{sandpit.Newf(sandpit.ErrInvalidArgument, "unknown language %q", "cobol"), EventRefused},
		{sandpit.Newf(sandpit.ErrResourceExhausted, "4 background runs"), EventLimit},
		{sandpit.Newf(sandpit.ErrConflict, "a run is using the workspace"), EventConflict},
		{sandpit.Newf(sandpit.ErrUnavailable, "containerd is down"), EventUnavailable},
		{errors.New("open /var/lib/secret: permission denied"), EventFailed},
		{sandpit.Newf(sandpit.ErrNotFound, "no run x"), ""},
		{fmt.Errorf("call: %w", context.Canceled), ""},
	} {
		before := len(e.Counts())
		e.record("run_code", tc.err)
		got := e.List()
		if tc.kind == "" {
			if len(e.Counts()) != before {
				t.Errorf("%v became an event", tc.err)
			}
			continue
		}
		if got[0].Kind != tc.kind || got[0].Tool != "run_code" {
			t.Errorf("%v: newest event %+v, want kind %s", tc.err, got[0], tc.kind)
		}
	}
	// The ring keeps the newest 3; the counts keep all.
	list := e.List()
	if len(list) != 3 || list[0].Kind != EventFailed || list[2].Kind != EventConflict {
		t.Errorf("ring: %+v", list)
	}
	if c := e.Counts(); c[EventRefused] != 1 || c[EventFailed] != 1 || len(c) != 5 {
		t.Errorf("counts: %v", c)
	}
	// An internal error's text (host paths) is not shown.
	if strings.Contains(list[0].Message, "/var/lib") {
		t.Errorf("internal error text shown: %q", list[0].Message)
	}
	// Messages are bounded.
	e.record("write_file", sandpit.Newf(sandpit.ErrInvalidArgument, "%s", strings.Repeat("é", 1000)))
	if m := e.List()[0].Message; len(m) > eventMessageBytes+len("…") {
		t.Errorf("message %d bytes", len(m))
	}
	var nilEvents *Events
	nilEvents.record("x", errors.New("y"))
	if nilEvents.List() != nil || len(nilEvents.Counts()) != 0 {
		t.Error("a nil Events kept something")
	}
}

// A refused call through a real server becomes an event.
func TestEventsFromToolCalls(t *testing.T) {
	events := NewEvents(10)
	f := newFixture(t, func(c *Config) { c.Events = events })
	f.call(t, "run_code", map[string]any{"language": "python", "code": "x", "timeout_seconds": 1e9}, nil)
	list := events.List()
	if len(list) != 1 || list[0].Kind != EventRefused || list[0].Tool != "run_code" || !strings.Contains(list[0].Message, "timeout") {
		t.Fatalf("events: %+v", list)
	}
}
