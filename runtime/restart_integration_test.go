package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/images"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testruntime"
	"github.com/sandpit-dev/sandpit/runtime"
)

// A containerd of the test's own, so that killing it disturbs no other test.
func ownContainerd(t *testing.T) runtime.PrivateDaemon {
	t.Helper()
	testenv.Containerd(t)                  // the same skip (or CI failure) rule as every containerd test
	dir, err := os.MkdirTemp("", "sp-cd-") // short: socket paths have a length limit
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o711) // the sandbox's root (an unprivileged host id) must reach its rootfs below
	d := runtime.PrivateDaemon{Dir: filepath.Join(dir, "run"), Root: filepath.Join(dir, "root")}
	if err := d.Start(t.Context(), slog.Default()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Stop(context.Background())
		os.RemoveAll(dir)
	})
	// The image, from the cache `sandpit images build` filled.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	store, err := images.Connect(ctx, d.Address(), testenv.Namespace, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.Builder().Ensure(ctx, images.DefaultRecipe()); err != nil {
		t.Fatalf("import the image into the test's containerd: %v", err)
	}
	return d
}

func restartDaemon(t *testing.T, d runtime.PrivateDaemon) {
	t.Helper()
	pid := d.PID()
	if pid == 0 {
		t.Fatal("the test's containerd is not running")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for d.PID() != 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if err := d.Start(t.Context(), slog.Default()); err != nil {
		t.Fatalf("restart containerd: %v", err)
	}
}

// containerd killed and restarted while runs are in flight: they end with
// a clear error (not a hang), the next run works without a new runtime,
// the pool refills, and nothing of the instance is left at the end.
func TestContainerdRestartMidRun(t *testing.T) {
	d := ownContainerd(t)
	cfg := testruntime.Config(t)
	cfg.Address = d.Address()
	cfg.Pool = runtime.PoolConfig{Size: 1}
	r, err := runtime.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ctx := t.Context()
	if res, err := r.Run(ctx, sandpit.Request{Language: "python", Code: "print(1)"}); err != nil || res.Status != sandpit.StatusSuccess {
		t.Fatalf("first run: %v %+v", err, res)
	}
	type out struct {
		res *sandpit.Result
		err error
	}
	inflight := make(chan out, 2)
	for i := 0; i < 2; i++ {
		go func() {
			// Far past any wait below: the run must end with containerd,
			// never by its own timeout on a slow host.
			res, err := r.Run(ctx, sandpit.Request{Language: "python", Code: "import time\ntime.sleep(3600)", Timeout: 10 * time.Minute})
			inflight <- out{res, err}
		}()
	}
	waitPrograms(t, d.Address(), cfg.Instance, 2)
	t0 := time.Now()
	restartDaemon(t, d)
	for i := 0; i < 2; i++ {
		select {
		case o := <-inflight:
			t.Logf("in-flight run %d ended %s after the kill: %v", i, time.Since(t0).Round(time.Millisecond), o.err)
			if o.err == nil {
				t.Errorf("in-flight run: status %s, want an error saying containerd went away", o.res.Status)
			} else if !errors.Is(o.err, sandpit.ErrUnavailable) {
				t.Errorf("in-flight run: error %v is not of class unavailable", o.err)
			}
		case <-time.After(testenv.Patience):
			t.Fatalf("an in-flight run still hangs %v after containerd was killed", testenv.Patience)
		}
	}
	var res *sandpit.Result
	testenv.Poll(testenv.Patience, func() bool { // the first calls may meet the restart's tail
		res, err = r.Run(ctx, sandpit.Request{Language: "python", Code: "print('back')"})
		return err == nil
	})
	if err != nil || res.Status != sandpit.StatusSuccess || res.Stdout != "back\n" {
		t.Fatalf("run after the restart: %v %+v", err, res)
	}
	testenv.Poll(testenv.Patience, func() bool { return r.PoolStats()["python"].Ready > 0 })
	if st := r.PoolStats()["python"]; st.Ready == 0 {
		t.Errorf("the pool did not refill after the restart: %+v", st)
	}
	r.Close()
	var left []string
	testenv.Poll(testenv.Patience, func() bool {
		left = instanceContainers(t, d.Address(), cfg.Instance)
		return len(left) == 0
	})
	if len(left) > 0 {
		t.Errorf("left in containerd after Close: %v", left)
	}
}

// waitPrograms waits until n sandboxes of instance run a program (an idle
// pooled sandbox has two processes, one running a request three or more).
func waitPrograms(t *testing.T, addr, instance string, n int) {
	t.Helper()
	c, err := containerd.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), testenv.Namespace)
	for deadline := time.Now().Add(testenv.Patience); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctrs, err := c.Containers(ctx, fmt.Sprintf("labels.%q==%q", runtime.LabelInstance, instance))
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, ctr := range ctrs {
			if task, err := ctr.Task(ctx, nil); err == nil {
				if pids, err := task.Pids(ctx); err == nil && len(pids) >= 3 {
					running++
				}
			}
		}
		if running >= n {
			return
		}
	}
	t.Fatalf("fewer than %d sandboxes of %s run a program", n, instance)
}

func instanceContainers(t *testing.T, addr, instance string) []string {
	t.Helper()
	c, err := containerd.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), testenv.Namespace)
	ctrs, err := c.Containers(ctx, fmt.Sprintf("labels.%q==%q", runtime.LabelInstance, instance))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ctr := range ctrs {
		ids = append(ids, ctr.ID())
	}
	return ids
}

// containerd frozen (SIGSTOP) while a run creates its sandbox: the run's
// cancel still returns at once; once containerd answers again, the
// creation it was in finishes in the background and is removed, and the
// next run works.
func TestCancelWithContainerdFrozen(t *testing.T) {
	d := ownContainerd(t)
	cfg := testruntime.Config(t)
	cfg.Address = d.Address()
	r, err := runtime.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if res, err := r.Run(t.Context(), sandpit.Request{Language: "bash", Code: "echo ready"}); err != nil || res.Status != sandpit.StatusSuccess {
		t.Fatalf("first run: %v %+v", err, res)
	}
	pid := d.PID()
	if pid == 0 {
		t.Fatal("the test's containerd is not running")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			syscall.Kill(pid, syscall.SIGCONT)
			thawed = true
		}
	}
	t.Cleanup(thaw)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	t0 := time.Now()
	res, err := r.Run(ctx, sandpit.Request{Language: "bash", Code: "echo hi"})
	took := time.Since(t0)
	t.Logf("run against a frozen containerd, cancelled at 1 s: back after %s: %v", took.Round(time.Millisecond), err)
	if err == nil {
		t.Fatalf("run against a frozen containerd: %+v, want the cancellation", res)
	}
	// Back without waiting for the frozen containerd, which answers only
	// when thawed below: any bound short of forever tells the two apart,
	// and a generous one makes no bet on the host's speed.
	if took > testenv.Patience {
		t.Errorf("cancelled at 1 s, back only after %s", took)
	}
	thaw()
	settled := make(chan struct{})
	go func() { r.Settle(); close(settled) }()
	select {
	case <-settled:
	case <-time.After(testenv.Patience):
		t.Fatalf("the background creation did not finish %v after containerd was thawed", testenv.Patience)
	}
	if res, err := r.Run(t.Context(), sandpit.Request{Language: "bash", Code: "echo back"}); err != nil || res.Stdout != "back\n" {
		t.Fatalf("run after the thaw: %v %+v", err, res)
	}
	r.Settle()
	assertNothingLeft(t, d.Address(), cfg.Instance)
}
