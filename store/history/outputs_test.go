package history

import (
	"strings"
	"testing"
	"time"
)

// A run's output beyond its head is kept for the newest runs only, bounded
// per stream, and Get gives it; List never does.
func TestOutputsKept(t *testing.T) {
	ctx := t.Context()
	h := open(t)
	h.outputRuns = 3
	long := strings.Repeat("é", OutputBytes) // 2 bytes a rune: the cut must not split one
	for i := range 5 {
		r := run(string(rune('a'+i)), time.Duration(i)*time.Second, "python", "success", "print()")
		r.Stdout, r.StdoutHead = long, long
		r.Stderr, r.StderrHead = "short", "short"
		if err := h.Record(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	small := run("f", 9*time.Second, "python", "success", "")
	small.Stdout, small.StdoutHead = "tiny", "tiny"
	if err := h.Record(ctx, small); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := h.db.QueryRowContext(ctx, `SELECT count(*) FROM outputs`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 3 {
		t.Errorf("%d output rows, want 3 (the bound): a run whose output fits its head needs none", rows)
	}
	for _, tc := range []struct {
		id     string
		stdout int // bytes Get gives
	}{
		{"a", HeadBytes}, // pruned beyond its head
		{"b", HeadBytes},
		{"c", OutputBytes},
		{"e", OutputBytes},
		{"f", 4},
	} {
		r, err := h.Get(ctx, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(r.Stdout); got < tc.stdout-1 || got > tc.stdout {
			t.Errorf("run %s: Get's stdout %d bytes, want %d (or one less: a rune cut)", tc.id, got, tc.stdout)
		}
		if !strings.HasPrefix(long, r.Stdout) && tc.id != "f" {
			t.Errorf("run %s: stdout is not a prefix of what ran", tc.id)
		}
		if tc.id != "f" && r.Stderr != "short" {
			t.Errorf("run %s: stderr %q, want short", tc.id, r.Stderr)
		}
	}
	list, err := h.List(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list {
		if r.Stdout != "" || r.Stderr != "" {
			t.Errorf("List gave run %s's output", r.ID)
		}
	}
	// Pruning a run takes its output with it.
	if _, err := h.Prune(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := h.db.QueryRowContext(ctx, `SELECT count(*) FROM outputs`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d output rows after pruning their runs, want 0", rows)
	}
}

func TestListTextAndAfter(t *testing.T) {
	ctx := t.Context()
	h := open(t)
	a := run("a", 0, "python", "success", "print('Needle')")
	b := run("b", time.Second, "bash", "error", "echo x")
	b.StderrHead = "100% NEEDLE_in_stderr"
	c := run("c", 2*time.Second, "python", "success", "print(1)")
	c.Stdout = strings.Repeat("x", 2*HeadBytes) + "needle beyond the head"
	c.StdoutHead = c.Stdout[:HeadBytes]
	d := run("d", 3*time.Second, "python", "cancelled", "while True: pass")
	d.CancelledBy = "person"
	for _, r := range []Run{a, b, c, d} {
		if err := h.Record(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		f    Filter
		want string
	}{
		{"text in code, output head and kept output, any case", Filter{Text: "needle"}, "c b a"},
		{"text is literal: % is no wildcard", Filter{Text: "100%"}, "b"},
		{"text is literal: _ is no wildcard", Filter{Text: "e_i"}, "b"},
		{"no match", Filter{Text: "haystack"}, ""},
		{"after", Filter{After: t0.Add(2 * time.Second)}, "d c"},
		{"after and text", Filter{After: t0.Add(time.Second), Text: "needle"}, "c b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := h.List(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if s := strings.Join(ids(got), " "); s != tc.want {
				t.Errorf("got %q, want %q", s, tc.want)
			}
		})
	}
	got, err := h.Get(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if got.CancelledBy != "person" {
		t.Errorf("CancelledBy %q, want person", got.CancelledBy)
	}
}
