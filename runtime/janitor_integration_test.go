package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/snapshots"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testruntime"
	"github.com/sandpit-dev/sandpit/runtime"
)

// awaitSignalCode is a program that names itself (its comm) and then runs
// until the test sends it SIGUSR1: the test, not the clock, says when it
// ends.
func awaitSignalCode(comm string) string {
	return fmt.Sprintf(`import signal, time
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
open('/proc/self/comm', 'w').write(%q)
deadline = time.time() + 120
while not got and time.time() < deadline:
    time.sleep(0.05)
print('released' if got else 'never released')
`, comm)
}

// pidsNamed lists the host processes whose comm is name.
func pidsNamed(name string) []int {
	var pids []int
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range comms {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == name {
			var pid int
			fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitPidsNamed waits, up to a minute, for a process named name.
func waitPidsNamed(t *testing.T, name string) []int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if pids := pidsNamed(name); len(pids) > 0 {
			return pids
		}
	}
	t.Fatalf("no process named %s within a minute", name)
	return nil
}

// ownedLeft lists the containers and snapshots of the runtime (instance,
// stateDir) in containerd: nothing of any other runtime, whatever its
// instance is called.
func ownedLeft(t *testing.T, addr, instance, stateDir string) []string {
	t.Helper()
	c, err := containerd.New(addr)
	if err != nil {
		t.Fatalf("leak check: %v", err)
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), testenv.Namespace)
	filter := runtime.OwnerFilter(instance, stateDir)
	var out []string
	ctrs, err := c.Containers(ctx, filter)
	if err != nil {
		t.Fatalf("leak check: %v", err)
	}
	for _, ctr := range ctrs {
		out = append(out, "container "+ctr.ID())
	}
	err = c.SnapshotService("overlayfs").Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		out = append(out, "snapshot "+info.Name)
		return nil
	}, filter)
	if err != nil {
		t.Fatalf("leak check: %v", err)
	}
	return out
}

// newOwnedRuntime is a runtime closed (and checked for leftovers of its
// own) when the test ends.
func newOwnedRuntime(t *testing.T, cfg runtime.Config) *runtime.Runtime {
	t.Helper()
	r, err := runtime.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		cfg := r.Config()
		if left := ownedLeft(t, cfg.Address, cfg.Instance, cfg.StateDir); len(left) > 0 {
			t.Errorf("runtime %s of %s left %v", cfg.Instance, cfg.StateDir, left)
		}
	})
	return r
}

// A runtime is (state dir, instance): another runtime with the same
// instance name and another state dir (every server without --instance is
// "default") sweeps only its own. Review 2026-12-01 H3: it killed the live
// one's in-flight run and pool and unmounted its shared image root, and
// the live one failed every later run with "invalid rootfs".
func TestJanitorSameInstanceOtherStateDir(t *testing.T) {
	base := testruntime.Config(t)
	base.RootfsDir = searchableTempDir(t) // one for both, as /run/sandpit/rootfs is on a host
	cfgA := base
	cfgA.Pool = runtime.PoolConfig{Size: 1}
	a := newOwnedRuntime(t, cfgA)
	if res := run(t, a, sandpit.Request{Language: "python", Code: "print('a ready')"}); res.Status != sandpit.StatusSuccess {
		t.Fatalf("a's first run: %+v", res)
	}
	waitReady(t, a, "python", 1)

	comm := fmt.Sprintf("sp-jan-%d", os.Getpid()%1000000)
	type answer struct {
		res *sandpit.Result
		err error
	}
	inFlight := make(chan answer, 1)
	go func() {
		res, err := a.Run(context.Background(), sandpit.Request{Language: "python", Code: awaitSignalCode(comm), Timeout: 2 * time.Minute})
		inFlight <- answer{res, err}
	}()
	waitPidsNamed(t, comm)

	// B: same instance name, another state dir. Its sweep (what every
	// connect, `sandpit run`, `serve` and `gc` runs) must find nothing.
	cfgB := base
	cfgB.StateDir = t.TempDir()
	b := newOwnedRuntime(t, cfgB)
	n, err := b.Sweep(t.Context())
	if err != nil {
		t.Errorf("b's sweep: %v", err)
	}
	if n != 0 {
		t.Errorf("b's sweep removed %d sandboxes; b had none", n)
	}
	if res := run(t, b, sandpit.Request{Language: "python", Code: "print('b')"}); res.Status != sandpit.StatusSuccess {
		t.Errorf("b's run: %+v", res)
	}
	if err := b.Close(); err != nil {
		t.Errorf("b's close: %v", err)
	}

	for _, pid := range pidsNamed(comm) {
		syscall.Kill(pid, syscall.SIGUSR1)
	}
	select {
	case got := <-inFlight:
		if got.err != nil {
			t.Fatalf("a's run in flight during b's sweep: %v", got.err)
		}
		if got.res.Status != sandpit.StatusSuccess || got.res.Stdout != "released\n" {
			t.Errorf("a's run in flight during b's sweep: status %s exit %d stdout %q stderr %q; want success, released",
				got.res.Status, got.res.ExitCode, got.res.Stdout, got.res.Stderr)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("a's run in flight never answered")
	}
	for i := range 3 {
		res, err := a.Run(t.Context(), sandpit.Request{Language: "python", Code: fmt.Sprintf("print(%d)", i), Timeout: time.Minute})
		if err != nil || res.Status != sandpit.StatusSuccess {
			t.Errorf("a's run %d after b's sweep: %+v, %v", i, res, err)
		}
	}
}

// searchableTempDir is a temp dir that other users may search: a
// user-namespaced sandbox's root is an unprivileged host uid that must
// reach its rootfs by path.
func searchableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A runtime whose shared image root vanished under it (unmounted by an
// operator or another process's janitor, its dir removed or not) makes it
// again for the next run instead of failing every run until restarted.
func TestSharedRootLostIsRemade(t *testing.T) {
	tests := []struct {
		name   string
		remove bool // rmdir the mount point too, as a janitor does
	}{
		{name: "unmounted", remove: false},
		{name: "unmounted and removed", remove: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rootfs := searchableTempDir(t)
			cfg := testruntime.Config(t)
			cfg.RootfsDir = rootfs
			r := newOwnedRuntime(t, cfg)
			if res := run(t, r, sandpit.Request{Language: "python", Code: "print(1)"}); res.Status != sandpit.StatusSuccess {
				t.Fatalf("first run: %+v", res)
			}
			mounts, err := host.MountsUnder(rootfs)
			if err != nil || len(mounts) == 0 {
				t.Fatalf("no shared root mounted under %s (%v)", rootfs, err)
			}
			for i := len(mounts) - 1; i >= 0; i-- {
				for syscall.Unmount(mounts[i], syscall.MNT_DETACH) == nil {
				}
				if tt.remove {
					os.Remove(mounts[i])
				}
			}
			if left, _ := host.MountsUnder(rootfs); len(left) > 0 {
				t.Fatalf("still mounted: %v", left)
			}
			for i := range 2 {
				res, err := r.Run(t.Context(), sandpit.Request{Language: "python", Code: "print('after')", Timeout: time.Minute})
				if err != nil || res.Status != sandpit.StatusSuccess || res.Stdout != "after\n" {
					t.Fatalf("run %d after the shared root was lost: %+v, %v", i, res, err)
				}
			}
			if again, _ := host.MountsUnder(rootfs); len(again) == 0 {
				t.Errorf("no shared root mounted under %s again", rootfs)
			}
		})
	}
}
