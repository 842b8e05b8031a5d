package snapshot

import (
	"errors"
	"testing"
)

// RunFile gives a file before a run (its undo state) and after it (the
// next run's undo state, or the workspace now); a run whose state is no
// longer kept, or never was, is ErrRunStateGone.
func TestRunFile(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	put := func(p, s string) {
		t.Helper()
		if _, err := e.ws.Write(ctx, p, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	put("a.txt", "one\n")
	must(t, e.store.BeforeRun(ctx, e.ws, "r1"))
	put("a.txt", "two\n") // what r1 did
	put("b.txt", "new\n")
	must(t, e.store.BeforeRun(ctx, e.ws, "r2"))
	put("a.txt", "three\n") // what r2 did
	must(t, e.ws.Delete(ctx, "b.txt"))

	for _, tc := range []struct {
		run, path     string
		before, after string // "-": did not exist
		now           bool
	}{
		{"r1", "a.txt", "one\n", "two\n", false},
		{"r1", "b.txt", "-", "new\n", false},
		{"r2", "a.txt", "two\n", "three\n", true},
		{"r2", "b.txt", "new\n", "-", true},
	} {
		got, err := e.store.For(e.ws).RunFile(ctx, tc.run, tc.path, 1<<20)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.run, tc.path, err)
		}
		show := func(v Version) string {
			if !v.Existed {
				return "-"
			}
			return string(v.Data)
		}
		if show(got.Before) != tc.before || show(got.After) != tc.after || got.AfterIsNow != tc.now {
			t.Errorf("%s %s: before %q after %q now %v, want %q %q %v", tc.run, tc.path, show(got.Before), show(got.After), got.AfterIsNow, tc.before, tc.after, tc.now)
		}
	}
	// Bounded by the limit.
	if got, _ := e.store.RunFile(ctx, e.ws, "r1", "a.txt", 2); string(got.Before.Data) != "on" || got.Before.Size != 4 {
		t.Errorf("limited: %+v", got.Before)
	}
	// A run that changed nothing shares the state before it with the next
	// run, which finds it.
	must(t, e.store.BeforeRun(ctx, e.ws, "r3")) // r3 changes nothing
	must(t, e.store.BeforeRun(ctx, e.ws, "r4"))
	put("a.txt", "four\n") // what r4 did
	if got, err := e.store.RunFile(ctx, e.ws, "r4", "a.txt", 100); err != nil || string(got.Before.Data) != "three\n" || string(got.After.Data) != "four\n" {
		t.Errorf("r4, after a run that changed nothing: %+v %v", got, err)
	}
	// Older than the kept undo states (MaxUndo 3), or never recorded.
	for _, id := range []string{"r5", "r6", "r7"} {
		must(t, e.store.BeforeRun(ctx, e.ws, id))
		put("a.txt", id)
	}
	for _, id := range []string{"r1", "never"} {
		if _, err := e.store.RunFile(ctx, e.ws, id, "a.txt", 10); !errors.Is(err, ErrRunStateGone) {
			t.Errorf("RunFile(%s): %v, want ErrRunStateGone", id, err)
		}
	}
}
