package ctrd

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// The warmer rewrites this process's pid into its own cgroup while held,
// stops when released, and never moves the process anywhere.
func TestMigrationWarmer(t *testing.T) {
	if os.Geteuid() != 0 || len(host.OwnCgroupProcs(host.CgroupMounts())) == 0 {
		testenv.Skip(t, "needs root and a mounted cgroup hierarchy")
	}
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	w := &migrationWarmer{log: slog.New(slog.DiscardHandler)}
	release := w.hold()
	second := w.hold()
	waitFor(t, "a second write while held", func() bool { return w.writes.Load() >= 2 })
	release()
	release() // twice: still one release
	// Still writing: a few more writes after the releases (a fixed pause
	// proved nothing on a host too loaded to run the loop meanwhile).
	n := w.writes.Load()
	waitFor(t, "writes after one of two holds was released", func() bool { return w.writes.Load() >= n+3 })
	w.mu.Lock()
	running, off := w.running, w.off
	w.mu.Unlock()
	if !running || off {
		t.Fatalf("one hold is left: running %v, off %v", running, off)
	}
	second()
	waitFor(t, "the writes to stop after the last release", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.running
	})
	n = w.writes.Load()
	time.Sleep(5 * warmInterval)
	if w.writes.Load() != n {
		t.Fatal("wrote after the last release")
	}
	after, _ := os.ReadFile("/proc/self/cgroup")
	if string(before) != string(after) {
		t.Fatalf("the warmer moved this process:\nbefore %s\nafter %s", before, after)
	}
	// A new spell starts again.
	r := w.hold()
	waitFor(t, "a write in a second spell", func() bool { return w.writes.Load() > n })
	r()
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testenv.Eventually(t, what, ok)
}
