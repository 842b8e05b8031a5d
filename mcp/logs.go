package mcp

import (
	"bytes"
	"cmp"
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/logring"
)

// HostPath is a host path sandbox://logs shows under a placeholder.
type HostPath struct {
	Path        string // absolute
	Placeholder string // what the model reads instead, e.g. "<workspace>"
}

// homeDir matches a path into anyone's home directory: the user name goes.
var homeDir = regexp.MustCompile(`/home/[^/\s"'<>\\]+`)

// redactor rewrites log records for sandbox://logs. The server's log holds
// host paths (where the workspace, the state dir, the snapshot store and
// the history database live, a run's overlay directories in an internal
// error) that the model has no use for and an attacker steering it would
// like: each configured path, and any path under it, becomes its
// placeholder ("<state-dir>/workspace/runs/…"), and a home directory
// becomes /home/<user>. Only what sandbox://logs serves is rewritten; the
// ring and stderr keep the real paths for the operator.
type redactor struct {
	r *strings.Replacer
}

// minPathElems is the fewest elements a configured path needs to be
// replaced: "/" or "/tmp" would rewrite every path in the log.
const minPathElems = 2

func newRedactor(paths []HostPath) *redactor {
	type pair struct{ old, new string }
	var pairs []pair
	for _, p := range paths {
		clean := filepath.Clean(p.Path)
		if !filepath.IsAbs(clean) || len(strings.Split(strings.Trim(clean, "/"), "/")) < minPathElems {
			continue
		}
		pairs = append(pairs, pair{clean, p.Placeholder})
		// The same path as %q prints it, inside a quoted message.
		if q := strconv.Quote(clean); q[1:len(q)-1] != clean {
			pairs = append(pairs, pair{q[1 : len(q)-1], p.Placeholder})
		}
	}
	// Longest first: the replacer tries its pairs in order at each
	// position, and /run/sandpit/state/history.db must win over
	// /run/sandpit/state.
	slices.SortStableFunc(pairs, func(a, b pair) int { return cmp.Compare(len(b.old), len(a.old)) })
	args := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.old, p.new)
	}
	return &redactor{r: strings.NewReplacer(args...)}
}

func (rd *redactor) string(s string) string {
	return homeDir.ReplaceAllString(rd.r.Replace(s), "/home/<user>")
}

// records returns redacted copies of in; the ring's records are shared and
// stay as they are.
func (rd *redactor) records(in []logring.Record) []logring.Record {
	out := make([]logring.Record, len(in))
	for i, r := range in {
		r.Message = rd.string(r.Message)
		if r.Attrs != nil {
			r.Attrs = rd.value(r.Attrs).(map[string]any)
		}
		out[i] = r
	}
	return out
}

// value redacts a record's attribute value: strings, groups (maps), and
// values the ring kept as JSON (a logged struct or slice), which are
// decoded to be walked the same way.
func (rd *redactor) value(v any) any {
	switch x := v.(type) {
	case string:
		return rd.string(x)
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[rd.string(k)] = rd.value(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = rd.value(e)
		}
		return s
	case json.RawMessage:
		d := json.NewDecoder(bytes.NewReader(x))
		d.UseNumber()
		var decoded any
		if d.Decode(&decoded) != nil {
			return rd.string(string(x))
		}
		return rd.value(decoded)
	}
	return v // numbers, booleans
}
