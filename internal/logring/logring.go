// Package logring keeps the last N structured log records in memory, so a
// server can show its recent logs to a client that cannot read its stderr.
//
// A Ring's handler tees: every record goes on to the wrapped handler
// unchanged, and a JSON-ready copy (attributes and groups preserved, values
// snapshotted at log time) goes into the ring. All methods are safe for
// concurrent use.
//
// Every kept record is bounded: its JSON is at most MaxRecordBytes. A long
// message, key or value is cut with a marker saying how many bytes went
// ("…[N bytes cut]"), and attributes past the budget are replaced by one
// that says how many were left out. The wrapped handler still gets the
// record whole.
package logring

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Bounds of a kept record.
const (
	// MaxRecordBytes bounds a kept record's JSON.
	MaxRecordBytes  = 4 << 10
	maxMessageBytes = 1 << 10 // of the message, quoted
	maxKeyBytes     = 64
	maxValueBytes   = 1 << 10
	// recordOverhead is what a record's JSON holds besides its message and
	// attributes: time, level, field names, braces.
	recordOverhead = 160
	// omittedKey holds the count of attributes left out.
	omittedKey = "…"
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
	msg, n := cut(rec.Message, maxMessageBytes)
	out := Record{Time: rec.Time.UTC(), Level: rec.Level.String(), Message: msg}
	b := &budget{left: MaxRecordBytes - recordOverhead - n}
	root := map[string]any{}
	cur := root
	for _, s := range h.steps {
		if s.group != "" {
			m := map[string]any{}
			cur[b.key(s.group)] = m
			cur = m
			continue
		}
		for _, a := range s.attrs {
			b.add(cur, a)
		}
	}
	rec.Attrs(func(a slog.Attr) bool {
		b.add(cur, a)
		return true
	})
	pruneEmpty(root)
	if b.omitted > 0 {
		root[omittedKey] = fmt.Sprintf("%d more attributes cut", b.omitted)
	}
	if len(root) > 0 {
		out.Attrs = root
	}
	return out
}

// budget is what is left of a record's bytes while its attributes are
// copied, in JSON bytes, and how many attributes did not fit.
type budget struct {
	left    int
	omitted int
}

// reserve keeps room for the omitted-attributes marker and a cut value.
const reserve = 96

func (b *budget) key(k string) string {
	k, n := cut(k, maxKeyBytes)
	b.left -= n + 2 // ':' and ','
	return k
}

func (b *budget) add(m map[string]any, a slog.Attr) {
	v := a.Value.Resolve()
	if a.Key == "" && v.Kind() != slog.KindGroup {
		return // slog ignores empty attributes
	}
	if b.left < reserve {
		b.omitted += leaves(v)
		return
	}
	if v.Kind() == slog.KindGroup {
		dst := m
		if a.Key != "" { // an inline group has no key
			g := map[string]any{}
			m[b.key(a.Key)] = g
			b.left -= 2 // braces
			dst = g
		}
		for _, ga := range v.Group() {
			b.add(dst, ga)
		}
		return
	}
	k := b.key(a.Key)
	val, n := plain(v, min(maxValueBytes, b.left-reserve/2))
	m[k] = val
	b.left -= n
}

// leaves counts the attributes a value holds (a group's, recursively).
func leaves(v slog.Value) int {
	if v.Kind() != slog.KindGroup {
		return 1
	}
	n := 0
	for _, a := range v.Group() {
		n += leaves(a.Value.Resolve())
	}
	return n
}

// plain turns a slog value into a JSON-ready copy of at most limit bytes of
// JSON, and says how many it takes.
func plain(v slog.Value, limit int) (any, int) {
	switch v.Kind() {
	case slog.KindString:
		return cut(v.String(), limit)
	case slog.KindInt64:
		return v.Int64(), len(strconv.FormatInt(v.Int64(), 10))
	case slog.KindUint64:
		return v.Uint64(), len(strconv.FormatUint(v.Uint64(), 10))
	case slog.KindFloat64:
		return v.Float64(), 24
	case slog.KindBool:
		return v.Bool(), 5
	case slog.KindDuration:
		return cut(v.Duration().String(), limit)
	case slog.KindTime:
		return cut(v.Time().UTC().Format(time.RFC3339Nano), limit)
	}
	switch x := v.Any().(type) {
	case error:
		return cut(x.Error(), limit)
	case fmt.Stringer:
		return cut(x.String(), limit)
	default:
		// Marshal now: the caller may change a map or slice after logging it.
		if b, err := json.Marshal(x); err == nil {
			if len(b) <= limit {
				return json.RawMessage(b), len(b)
			}
			return cut(string(b), limit)
		}
	}
	return cut(fmt.Sprintf("%+v", v.Any()), limit)
}

// cut returns s, or its longest prefix that fits limit bytes of JSON with a
// marker saying how much was cut, and the JSON size of the result (quotes
// and escapes included).
func cut(s string, limit int) (string, int) {
	if n := quotedLen(s); n <= limit {
		return s, n
	}
	const markerRoom = len("…[99999999999 bytes cut]") + 4
	room := max(limit-markerRoom, 0)
	n, i := 2, 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		c := runeJSONLen(r, size)
		if n+c > room {
			break
		}
		n += c
		i += size
	}
	out := s[:i] + fmt.Sprintf("…[%d bytes cut]", len(s)-i)
	return out, quotedLen(out)
}

// quotedLen is the length of s as a JSON string by encoding/json (which
// escapes <, > and & for HTML, control characters, and invalid UTF-8).
func quotedLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		n += runeJSONLen(r, size)
		i += size
	}
	return n
}

func runeJSONLen(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1:
		return 6 // \ufffd
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
		return 6
	}
	return size
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
