package mcp

import (
	"context"
	"errors"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit"
)

// Event is one tool call a person watching the server should know was
// refused or failed: bad input, a bound reached, a conflict, the server
// unavailable, an internal failure. Normal outcomes (a run that failed,
// an id not found) are not events.
type Event struct {
	Time    time.Time
	Kind    string // refused, limit, conflict, unavailable, failed
	Tool    string
	Message string // bounded; what the caller was told (internal failures: only that)
}

// Event kinds.
const (
	EventRefused     = "refused"     // bad input: the call never reached a sandbox
	EventLimit       = "limit"       // a bound or quota was reached
	EventConflict    = "conflict"    // the state did not allow it (a run using the workspace...)
	EventUnavailable = "unavailable" // containerd, an image or the history was unavailable
	EventFailed      = "failed"      // an internal error (the server log has it)
)

// EventKinds are the kinds, in the order a page shows them.
var EventKinds = []string{EventRefused, EventLimit, EventConflict, EventUnavailable, EventFailed}

// eventMessageBytes bounds an event's message.
const eventMessageBytes = 300

// Events keeps the newest events (a bounded ring) and counts every event
// by kind since the server started. Safe for concurrent use; a nil *Events
// keeps nothing.
type Events struct {
	mu     sync.Mutex
	ring   []Event
	next   int
	full   bool
	counts map[string]int64
}

// NewEvents keeps the newest n events (at least 1).
func NewEvents(n int) *Events {
	return &Events{ring: make([]Event, max(n, 1)), counts: map[string]int64{}}
}

// record files err, returned by tool, as an event if it is one.
func (e *Events) record(tool string, err error) {
	if e == nil || err == nil || errors.Is(err, context.Canceled) {
		return
	}
	var kind, msg string
	switch sandpit.ClassOf(err) {
	case sandpit.ErrInvalidArgument:
		kind = EventRefused
	case sandpit.ErrResourceExhausted:
		kind = EventLimit
	case sandpit.ErrConflict:
		kind = EventConflict
	case sandpit.ErrUnavailable:
		kind = EventUnavailable
	case sandpit.ErrNotFound:
		return
	default:
		kind, msg = EventFailed, "an internal error (the server log has it)"
	}
	if msg == "" {
		msg = err.Error()
	}
	e.Add(Event{Kind: kind, Tool: tool, Message: msg})
}

// Add keeps ev (its time now when zero; its message bounded).
func (e *Events) Add(ev Event) {
	if e == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	ev.Message = boundMessage(ev.Message)
	ev.Tool = boundMessage(ev.Tool)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ring[e.next] = ev
	e.next = (e.next + 1) % len(e.ring)
	e.full = e.full || e.next == 0
	e.counts[ev.Kind]++
}

func boundMessage(msg string) string {
	if len(msg) <= eventMessageBytes {
		return msg
	}
	msg = msg[:eventMessageBytes]
	for len(msg) > 0 && !utf8.ValidString(msg) {
		msg = msg[:len(msg)-1]
	}
	return msg + "…"
}

// List returns the events kept, newest first.
func (e *Events) List() []Event {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.next
	if e.full {
		n = len(e.ring)
	}
	out := make([]Event, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, e.ring[(e.next-i+len(e.ring))%len(e.ring)])
	}
	return out
}

// Counts returns how many events of each kind there were since the
// server started (more than List keeps).
func (e *Events) Counts() map[string]int64 {
	out := map[string]int64{}
	if e == nil {
		return out
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, v := range e.counts {
		out[k] = v
	}
	return out
}
