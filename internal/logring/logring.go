// Package logring keeps the last N structured log records in memory, so a
// server can show its recent logs to a client that cannot read its stderr.
//
// A Ring's handler tees: every record goes on to the wrapped handler
// unchanged, and a JSON-ready copy (attributes and groups preserved, values
// snapshotted at log time) goes into the ring. All methods are safe for
// concurrent use.
package logring

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Record is one log record as kept by the ring.
type Record struct {
	Time    time.Time      `json:"time"` // UTC
	Level   string         `json:"level"`
	Message string         `json:"msg"`
	Attrs   map[string]any `json:"attrs,omitempty"` // groups are nested maps
}

// Ring holds the most recent records, oldest evicted first.
type Ring struct {
	level slog.Leveler

	mu    sync.Mutex
	buf   []Record
	next  int    // where the next record goes
	total uint64 // records ever added
}

// New returns a ring that keeps the last capacity records at or above level
// (nil means slog.LevelInfo).
func New(capacity int, level slog.Leveler) *Ring {
	if capacity < 1 {
		capacity = 1
	}
	if level == nil {
		level = slog.LevelInfo
	}
	return &Ring{level: level, buf: make([]Record, 0, capacity)}
}

// Records returns the kept records, oldest first. n > 0 limits the result to
// the newest n.
func (r *Ring) Records(n int) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Record, 0, len(r.buf))
	if len(r.buf) < cap(r.buf) {
		out = append(out, r.buf...)
	} else {
		out = append(append(out, r.buf[r.next:]...), r.buf[:r.next]...)
	}
	if n > 0 && n < len(out) {
		out = out[len(out)-n:]
	}
	return out
}

// Total is the number of records ever added, kept or evicted.
func (r *Ring) Total() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// Capacity is the most records the ring keeps.
func (r *Ring) Capacity() int { return cap(r.buf) }

func (r *Ring) add(rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, rec)
		return
	}
	r.buf[r.next] = rec
	r.next = (r.next + 1) % cap(r.buf)
}

// Handler returns a handler that records into the ring and passes every
// record on to next (which may be nil: the ring alone).
func (r *Ring) Handler(next slog.Handler) slog.Handler {
	return &handler{ring: r, next: next}
}

// step is one WithGroup (group != "") or WithAttrs call, in order.
type step struct {
	group string
	attrs []slog.Attr
}

type handler struct {
	ring  *Ring
	next  slog.Handler
	steps []step
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.ring.level.Level() || (h.next != nil && h.next.Enabled(ctx, l))
}

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= h.ring.level.Level() {
		h.ring.add(h.snapshot(rec))
	}
	if h.next != nil && h.next.Enabled(ctx, rec.Level) {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	return h.with(step{attrs: as}, func(n slog.Handler) slog.Handler { return n.WithAttrs(as) })
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(step{group: name}, func(n slog.Handler) slog.Handler { return n.WithGroup(name) })
}

func (h *handler) with(s step, derive func(slog.Handler) slog.Handler) *handler {
	h2 := &handler{ring: h.ring, steps: append(h.steps[:len(h.steps):len(h.steps)], s)}
	if h.next != nil {
		h2.next = derive(h.next)
	}
	return h2
}

// snapshot converts rec and the handler's attributes into a Record that
// shares no memory with the caller.
func (h *handler) snapshot(rec slog.Record) Record {
	out := Record{Time: rec.Time.UTC(), Level: rec.Level.String(), Message: rec.Message}
	root := map[string]any{}
	cur := root
	for _, s := range h.steps {
		if s.group != "" {
			m := map[string]any{}
			cur[s.group] = m
			cur = m
			continue
		}
		for _, a := range s.attrs {
			addAttr(cur, a)
		}
	}
	rec.Attrs(func(a slog.Attr) bool {
		addAttr(cur, a)
		return true
	})
	pruneEmpty(root)
	if len(root) > 0 {
		out.Attrs = root
	}
	return out
}

func addAttr(m map[string]any, a slog.Attr) {
	v := a.Value.Resolve()
	if a.Key == "" && v.Kind() != slog.KindGroup {
		return // slog ignores empty attributes
	}
	if v.Kind() == slog.KindGroup {
		dst := m
		if a.Key != "" { // an inline group has no key
			g := map[string]any{}
			m[a.Key] = g
			dst = g
		}
		for _, ga := range v.Group() {
			addAttr(dst, ga)
		}
		return
	}
	m[a.Key] = plain(v)
}

// plain turns a slog value into a JSON-ready copy.
func plain(v slog.Value) any {
	switch v.Kind() {
	case slog.KindString:
		return v.String()
	case slog.KindInt64:
		return v.Int64()
	case slog.KindUint64:
		return v.Uint64()
	case slog.KindFloat64:
		return v.Float64()
	case slog.KindBool:
		return v.Bool()
	case slog.KindDuration:
		return v.Duration().String()
	case slog.KindTime:
		return v.Time().UTC().Format(time.RFC3339Nano)
	}
	switch x := v.Any().(type) {
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	default:
		// Marshal now: the caller may change a map or slice after logging it.
		if b, err := json.Marshal(x); err == nil {
			return json.RawMessage(b)
		}
	}
	return fmt.Sprintf("%+v", v.Any())
}

// pruneEmpty drops groups that ended up with no attributes, as slog's own
// handlers do.
func pruneEmpty(m map[string]any) {
	for k, v := range m {
		if g, ok := v.(map[string]any); ok {
			pruneEmpty(g)
			if len(g) == 0 {
				delete(m, k)
			}
		}
	}
}
