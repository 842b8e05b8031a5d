package runtime_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/runtime"
)

// waitPool waits until the pool of lang satisfies ok.
func waitPool(t *testing.T, r *runtime.Runtime, lang, what string, ok func(runtime.PoolStats) bool) runtime.PoolStats {
	t.Helper()
	var st runtime.PoolStats
	if !testenv.Poll(testenv.Patience, func() bool { st = r.PoolStats()[lang]; return ok(st) }) {
		t.Fatalf("pool for %s: never %s: %+v", lang, what, st)
	}
	return st
}

// A parked sandbox (created, not started) serves a request as a started
// one does, and as a fresh sandbox's first process would: the table of
// TestPoolBehavesLikeCold, in short, through sandboxes taken parked.
func TestPoolParkedBehavesLikeCold(t *testing.T) {
	cold := newRuntime(t, func(c *runtime.Config) { c.NoInit = true })
	// One started sandbox at most, never grown: every other request takes
	// a parked one.
	parked := newRuntime(t, func(c *runtime.Config) {
		c.Pool = runtime.PoolConfig{Size: 1, MaxSize: 1, Created: 2, IdleTimeout: time.Minute}
	})
	tests := []sandpit.Request{
		{Language: "python", Code: "import sys\nprint(__name__, sys.argv, __file__)", Args: []string{"x", "", "a b"}},
		{Language: "python", Code: "import sys; d = sys.stdin.read(); print(len(d), d[:5])", Stdin: []byte("hello world\n" + strings.Repeat("z", 100000))},
		{Language: "python", Code: "import sys; print('x'); sys.exit(7)"},
		{Language: "python", Code: "def f():\n    raise KeyError('k')\n\nf()\n"},
		{Language: "bash", Code: "echo \"$0\" \"$@\"; read x; echo got $x; exit 3", Args: []string{"p q"}, Stdin: []byte("line\n")},
		{Language: "c", Code: "#include <stdio.h>\nint main(int c, char**v){char b[64]; fgets(b, 64, stdin); printf(\"%s %d %s\", v[0], c, b); return 5;}", Args: []string{"a"}, Stdin: []byte("in\n")},
		{Language: "c", Code: "int main(void) { return x; }"},
	}
	for i, req := range tests {
		t.Run(fmt.Sprintf("%d-%s", i, req.Language), func(t *testing.T) {
			// Keep the started one busy (the pool refills after a run,
			// not during it), so that the request takes a parked one: busy
			// until the request is served, however long that takes here
			// (a fixed sleep ended before a slow cold run, and the refill
			// then served the request started).
			waitPool(t, parked, "python", "one started and two parked", func(st runtime.PoolStats) bool { return st.Ready >= 1 && st.Parked >= 2 })
			busy := make(chan struct{})
			ctx, stop := context.WithCancel(t.Context())
			go func() {
				defer close(busy)
				parked.Run(ctx, sandpit.Request{Language: "python", Code: "import time; time.sleep(3600)"})
			}()
			waitPool(t, parked, "python", "busy", func(st runtime.PoolStats) bool { return st.Ready == 0 })
			before := parked.PoolStats()["python"]
			c, p := run(t, cold, req), run(t, parked, req)
			after := parked.PoolStats()["python"]
			stop()
			<-busy
			if after.Claimed-before.Claimed != 1 || after.Misses-before.Misses != 1 {
				t.Fatalf("the request was not served parked: pool before %+v, after %+v", before, after)
			}
			if c.Status != p.Status || c.ExitCode != p.ExitCode || c.Stdout != p.Stdout || c.Stderr != p.Stderr {
				t.Errorf("cold %s/%d %q %q\nparked %s/%d %q %q", c.Status, c.ExitCode, c.Stdout, c.Stderr, p.Status, p.ExitCode, p.Stdout, p.Stderr)
			}
		})
	}
}

// A burst of requests grows the started pool (up to MaxSize), and it
// shrinks back to Size once requests stop missing; every sandbox it made is
// claimed, expired or discarded.
//
// The pool's clock is held still while it grows: in CI at load 12 a 1 s
// ShrinkAfter shrank the target before the slow host had made the 4
// sandboxes ("never grown to 4 started"). So ShrinkAfter is an hour until
// the pool has grown, then a second. The pool looks every 250 ms (a
// quarter of the ShrinkAfter it was made with); the idle timeout is out of
// the way.
func TestPoolGrowsUnderBurstsAndShrinks(t *testing.T) {
	r := newRuntime(t, func(c *runtime.Config) {
		c.Pool = runtime.PoolConfig{Size: 1, MaxSize: 4, ShrinkAfter: time.Second, IdleTimeout: time.Hour}
	})
	// Before any request: the target cannot shrink below Size meanwhile.
	runtime.SetPoolShrinkAfter(r, "python", time.Hour)
	waitReady(t, r, "python", 1)
	for i := range 6 {
		if res := run(t, r, sandpit.Request{Language: "python", Code: fmt.Sprintf("print(%d)", i)}); res.Stdout != fmt.Sprintf("%d\n", i) {
			t.Fatalf("run %d: %+v", i, res)
		}
	}
	st := waitPool(t, r, "python", "grown to 4 started", func(st runtime.PoolStats) bool { return st.Target == 4 && st.Ready == 4 })
	t.Logf("after the burst: %+v", st)
	runtime.SetPoolShrinkAfter(r, "python", time.Second)
	st = waitPool(t, r, "python", "shrunk back to 1", func(st runtime.PoolStats) bool { return st.Target == 1 && st.Ready == 1 })
	t.Logf("after the quiet: %+v", st)
	if st.Expired < 3 {
		t.Errorf("shrinking expired %d sandboxes, want the 3 beyond the target", st.Expired)
	}
	r.Close()
	st = r.PoolStats()["python"]
	if st.Created != st.Claimed+st.Expired+st.Discarded || st.Ready != 0 || st.Parked != 0 {
		t.Errorf("accounting after close: %+v", st)
	}
}
