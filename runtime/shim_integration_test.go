package runtime_test

// Tests of sandpit's own shim (runtime/shim, --runtime sandpit) that the
// suites shared by both runtimes (attack, pool, soak) do not cover: what
// happens when the shim dies under runs.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testruntime"
	"github.com/sandpit-dev/sandpit/runtime"
)

// withShim runs sandboxes under sandpit's shim, whatever SANDPIT_TEST_RUNTIME
// says; it fails (skips locally) without the shim's programs.
func withShim(t *testing.T) func(*runtime.Config) {
	t.Helper()
	dir := testruntime.ShimDir()
	for _, name := range []string{runtime.ShimRuntimeBinary, runtime.ShimDaemonBinary} {
		if _, err := os.Stat(filepath.Join(dir, name)); dir == "" || err != nil {
			testenv.Skip(t, "sandpit's shim is not built: set SANDPIT_BIN or SANDPIT_SHIM_DIR to the bin/ of scripts/build.sh")
		}
	}
	return func(c *runtime.Config) { c.RuntimeName, c.ShimDir = runtime.RuntimeSandpit, dir }
}

// shimPids returns the sandpit-shim processes serving the state dir.
func shimPids(t *testing.T, stateDir string) []int {
	t.Helper()
	var out []int
	root := filepath.Join(stateDir, "shim")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		if filepath.Base(argv[0]) != runtime.ShimDaemonBinary {
			continue
		}
		for i, a := range argv {
			if a == "-root" && i+1 < len(argv) && argv[i+1] == root {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				out = append(out, pid)
			}
		}
	}
	return out
}

// The shim killed while runs are in flight: they end promptly with an error
// that names the shim (class unavailable, not a containerd outage), the
// sandboxes it held are killed and removed (a fresh shim destroys what the
// dead one left), the next run works and the pool refills, and nothing is
// left at the end (newRuntime checks containerd; this test the shim's state
// and processes).
func TestShimCrashMidRun(t *testing.T) {
	r := newRuntime(t, withShim(t), withPool(1, time.Minute))
	cfg := r.Config()
	if res := run(t, r, sandpit.Request{Language: "python", Code: "print(1)"}); res.Status != sandpit.StatusSuccess {
		t.Fatalf("first run: %+v", res)
	}
	waitReady(t, r, "python", 1)
	marker := "sandpit-shimcrash-" + token(t)[:12]
	type out struct {
		res *sandpit.Result
		err error
	}
	inflight := make(chan out, 2)
	for range 2 {
		go func() {
			res, err := r.Run(t.Context(), sandpit.Request{Language: "bash", Code: "exec -a " + marker + " sleep 600", Timeout: 10 * time.Minute})
			inflight <- out{res, err}
		}()
	}
	waitPrograms(t, cfg.Address, cfg.Instance, 2)
	for deadline := time.Now().Add(testenv.Patience); len(hostProcs(t, marker)) < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the runs' programs never showed up: %v", hostProcs(t, marker))
		}
	}
	pids := shimPids(t, cfg.StateDir)
	if len(pids) != 1 {
		t.Fatalf("want one sandpit-shim serving %s, found %v", cfg.StateDir, pids)
	}
	t0 := time.Now()
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		select {
		case o := <-inflight:
			t.Logf("in-flight run %d ended %s after the kill: %v", i, time.Since(t0).Round(time.Millisecond), o.err)
			switch {
			case o.err == nil:
				t.Errorf("in-flight run: status %s, want an error saying the shim died", o.res.Status)
			case !errors.Is(o.err, runtime.ErrShimDied) || !errors.Is(o.err, sandpit.ErrUnavailable):
				t.Errorf("in-flight run: error %v, want ErrShimDied (class unavailable)", o.err)
			case !strings.Contains(o.err.Error(), strconv.Itoa(pids[0])) || sandpit.HintOf(o.err) == "":
				t.Errorf("in-flight run: error %q (hint %q) does not name the shim and its log", o.err, sandpit.HintOf(o.err))
			}
		case <-time.After(testenv.Patience):
			t.Fatalf("an in-flight run still hangs %v after its shim was killed", testenv.Patience)
		}
	}
	// The dead shim's sandboxes kept running; the fresh one kills them.
	for deadline := time.Now().Add(testenv.Patience); len(hostProcs(t, marker)) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("programs of the dead shim's sandboxes still run: %v", hostProcs(t, marker))
		}
	}
	if got := shimPids(t, cfg.StateDir); len(got) != 1 || got[0] == pids[0] {
		t.Errorf("want one fresh sandpit-shim, found %v (the dead one was %d)", got, pids[0])
	}
	if res := run(t, r, sandpit.Request{Language: "python", Code: "print('back')"}); res.Status != sandpit.StatusSuccess || res.Stdout != "back\n" {
		t.Fatalf("run after the crash: %+v", res)
	}
	waitReady(t, r, "python", 1)
	r.Close()
	if got := shimPids(t, cfg.StateDir); len(got) > 0 {
		t.Errorf("sandpit-shim still runs after Close: %v", got)
	}
	if entries, _ := os.ReadDir(filepath.Join(cfg.StateDir, "shim", "containers")); len(entries) > 0 {
		log, _ := os.ReadFile(filepath.Join(cfg.StateDir, "shim", "shim.log"))
		t.Errorf("the shim's state dir still holds %d containers after Close (%s); its log:\n%s", len(entries), entries[0].Name(), log)
	}
}

// Each sandbox's init runs from a sealed copy of sandpit-shim-init when
// the shim dir has it, and from the shim's own binary when it does not;
// both serve runs. A parked sandbox's init (created, waiting on its exec
// FIFO) shows which: its executable. Without this test a change of the
// memfd's name in libcontainer would silently put every sandbox back on
// the slower path.
func TestShimInitBinary(t *testing.T) {
	dir := testruntime.ShimDir()
	withoutInit := t.TempDir()
	for _, name := range []string{runtime.ShimRuntimeBinary, runtime.ShimDaemonBinary} {
		if err := os.Symlink(filepath.Join(dir, name), filepath.Join(withoutInit, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, runtime.ShimInitBinary)); dir != "" && err != nil {
		t.Fatalf("the shim dir %s has no %s: scripts/build.sh builds it", dir, runtime.ShimInitBinary)
	}
	tests := []struct {
		name    string
		shimDir string
		isInit  func(exe string) bool // of a parked init's executable
	}{
		{"init binary", dir, func(exe string) bool {
			return strings.HasPrefix(exe, "/memfd:runc_cloned:"+runtime.ShimInitBinary+" ")
		}},
		{"shim binary", withoutInit, func(exe string) bool {
			return strings.Contains(exe, runtime.ShimDaemonBinary) && !strings.Contains(exe, runtime.ShimInitBinary)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRuntime(t, withShim(t), func(c *runtime.Config) {
				c.ShimDir = tt.shimDir
				c.Pool = runtime.PoolConfig{Size: 1, MaxSize: 1, Created: 1, IdleTimeout: time.Minute}
			})
			waitPool(t, r, "python", "one parked", func(st runtime.PoolStats) bool { return st.Parked >= 1 })
			shims := shimPids(t, r.Config().StateDir)
			if len(shims) != 1 {
				t.Fatalf("sandpit-shim processes: %v, want one", shims)
			}
			var exes []string
			for _, pid := range children(shims[0]) {
				if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
					exes = append(exes, exe)
				}
			}
			if !slices.ContainsFunc(exes, tt.isInit) {
				t.Errorf("no parked init runs from the expected binary; the shim's children run from %q", exes)
			}
			if res := run(t, r, sandpit.Request{Language: "python", Code: "print(6*7)"}); res.Status != sandpit.StatusSuccess || res.Stdout != "42\n" {
				t.Errorf("run: %+v", res)
			}
		})
	}
}

// children lists the pids whose parent is pid.
func children(pid int) []int {
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			c, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			out = append(out, c)
		}
	}
	return out
}

// A cold run under sandpit's shim has the seccomp loader as its PID 1
// (shim.goInit): seen from the host, that process carries the filter and
// no_new_privs, holds only its stdio, the liveness FIFO and the Go
// runtime's poller, and is the program's parent. The program cannot see
// any of it (PID 1 is not dumpable: TestAttackEscapeCVEs/leaked_fds), so
// this is checked from outside.
func TestColdInitIsTheLoader(t *testing.T) {
	r := newRuntime(t, withShim(t))
	done := make(chan *sandpit.Result, 1)
	go func() {
		done <- run(t, r, sandpit.Request{Language: "python", Code: `import time
open("/proc/self/comm", "w").write("sp-goinit-prog")
time.sleep(2)
print("done")`})
	}()
	testenv.WaitProcessNamed(t, "sp-goinit-prog")
	var inits []int
	for _, shim := range shimPids(t, r.Config().StateDir) {
		for _, pid := range children(shim) {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.HasPrefix(string(cmd), "/proc/self/fd/3\x00seccomp-exec\x00--init\x00python3\x00") {
				inits = append(inits, pid)
			}
		}
	}
	if len(inits) != 1 {
		t.Fatalf("loader inits among the shim's children: %v, want one", inits)
	}
	pid := inits[0]
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(string(status), want+"\n") {
			t.Errorf("PID 1's status lacks %q", want)
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		switch {
		case (fd.Name() == "0" || fd.Name() == "1" || fd.Name() == "2") && strings.HasPrefix(link, "pipe:"),
			link == sandpit.SourceDir+"/alive",
			link == "anon_inode:[eventpoll]", link == "anon_inode:[eventfd]":
		default:
			t.Errorf("PID 1 holds fd %s -> %s", fd.Name(), link)
		}
	}
	if !slices.ContainsFunc(children(pid), func(c int) bool {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c))
		return strings.TrimSpace(string(comm)) == "sp-goinit-prog"
	}) {
		t.Error("the program is not PID 1's child")
	}
	if res := <-done; res.Status != sandpit.StatusSuccess || res.Stdout != "done\n" {
		t.Errorf("run: %+v", res)
	}
}
