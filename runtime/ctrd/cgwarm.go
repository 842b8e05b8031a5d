package ctrd

import (
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandpit-dev/sandpit/internal/host"
)

// Every sandbox's creation moves its first process into its cgroups
// (libcontainer's or runc's Apply). That move takes the kernel's global
// cgroup_threadgroup_rwsem for writing, and unless some move happened
// within about the last RCU grace period the write lock first waits for a
// grace period (rcu_sync_enter): 7–12 ms on these VMs, asleep, on the cold
// path between the sandbox's exec and its namespaces — about a tenth of a
// cold run. After a move the lock stays fast for about one more grace
// period.
//
// migrationWarmer keeps it fast while sandboxes are being created: from
// before a sandbox's containerd record is written until its task exists, it
// rewrites this process's own pid into its own cgroup.procs (a move to
// where it already is: nothing changes, but the kernel takes the same lock)
// every warmInterval. The first write waits for the grace period while
// containerd and the shim do their own work; the sandbox's move then finds
// the lock fast. Cost: ~50 µs of CPU a write; while the lock is in its fast
// state, fork and exit anywhere on the host use its shared slow path (an
// atomic instead of per-CPU counters), as they do whenever cgroups are
// busy. A host that mounts its hierarchies with favordynmods never waits,
// and this changes nothing there.
type migrationWarmer struct {
	log     *slog.Logger
	mu      sync.Mutex
	holds   int
	running bool
	off     bool // no cgroup.procs of ours accepts the write: do nothing
	writes  atomic.Int64
	mounts  []host.CgroupMount // read at the first spell: mountinfo is long on a busy server
}

// warmInterval is below the shortest grace period seen here (~8 ms), so
// the lock never falls back to its slow state between writes.
const warmInterval = 4 * time.Millisecond

// hold keeps moves fast until release is called.
func (w *migrationWarmer) hold() (release func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.off {
		return func() {}
	}
	w.holds++
	if !w.running {
		w.running = true
		go w.loop()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			w.holds--
			w.mu.Unlock()
		})
	}
}

func (w *migrationWarmer) loop() {
	// Where this process is now: read afresh for every busy spell, since
	// it may have been moved (the bench moves each path into a cgroup).
	target := ""
	pid := []byte(strconv.Itoa(os.Getpid()))
	if w.mounts == nil {
		w.mounts = host.CgroupMounts() // one loop runs at a time (w.running)
	}
	for _, p := range host.OwnCgroupProcs(w.mounts) {
		if err := os.WriteFile(p, pid, 0); err != nil {
			w.log.Debug("cgroup warm-up: cannot write", "file", p, "err", err)
			continue
		}
		w.writes.Add(1)
		target = p
		break
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if target == "" {
		w.off, w.running = true, false
		w.log.Debug("cgroup warm-up off: no cgroup.procs of this process takes its pid")
		return
	}
	for w.holds > 0 {
		w.mu.Unlock()
		time.Sleep(warmInterval)
		err := os.WriteFile(target, pid, 0)
		if err == nil {
			w.writes.Add(1)
		}
		w.mu.Lock()
		if err != nil {
			// Moved meanwhile, its cgroup gone: the next spell looks again.
			w.log.Debug("cgroup warm-up: cannot write", "file", target, "err", err)
			break
		}
	}
	w.running = false
}
