package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process of another state dir — `sandpit run`, a second `serve`, `sandpit
// gc --instance` — on the same containerd, with the same instance name (each
// is "default" without --instance), leaves a live server alone: its run in
// flight comes back success and its next run_code succeeds. Review
// 2026-12-01 H3: their janitors swept by name only, killed the server's
// sandboxes and unmounted its image root, and every later run_code of the
// server failed ("invalid rootfs") until it was restarted.
func TestLifecycleOtherStateDirSameInstance(t *testing.T) {
	tests := []struct {
		name string
		// other does what a process of state dir b (its own store) does
		// while a's run is in flight; ia is a's instance.
		// rootfs is the --rootfs-dir of both, as /run/sandpit/rootfs is
		// on a host.
		other func(t *testing.T, a, b lifecycleStore, ia, rootfs string)
	}{
		{"sandpit run", func(t *testing.T, a, b lifecycleStore, ia, rootfs string) {
			out, err := exec.Command(binPath, "run", "--address", b.addr, "--no-start", "--state-dir", b.state, "--rootfs-dir", rootfs, "-l", "python", "print(40+2)").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "42") {
				t.Errorf("sandpit run --state-dir b: %v\n%s", err, out)
			}
		}},
		{"sandpit serve", func(t *testing.T, a, b lifecycleStore, ia, rootfs string) {
			srv, _ := b.start(t, "--rootfs-dir", rootfs)
			if ib := srv.instanceOf(t); ib != ia {
				t.Fatalf("the second server took instance %s, want %s like a's (the collision under test)", ib, ia)
			}
			runOK(t, srv, "print('b')")
			srv.stdin.Close()
			srv.waitExit(t, 30*time.Second)
		}},
		{"sandpit gc --instance", func(t *testing.T, a, b lifecycleStore, ia, rootfs string) {
			out, err := exec.Command(binPath, "gc", "--address", b.addr, "--no-start", "--state-dir", b.state, "--rootfs-dir", rootfs, "--instance", ia).CombinedOutput()
			if err != nil {
				t.Errorf("sandpit gc --state-dir b --instance %s: %v\n%s", ia, err, out)
			}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := newLifecycleStore(t), newLifecycleStore(t)
			rootfs := searchableTempDir(t)
			srv, _ := a.start(t, "--rootfs-dir", rootfs)
			ia := srv.instanceOf(t)
			comm := fmt.Sprintf("sp-h3-%d-%d", os.Getpid()%100000, i)
			inFlight := srv.runAsync(t, map[string]any{"language": "python", "timeout_seconds": 60, "code": fmt.Sprintf(`import signal, time
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
open('/proc/self/comm', 'w').write(%q)
deadline = time.time() + 55
while not got and time.time() < deadline:
    time.sleep(0.05)
print('released' if got else 'never released')
`, comm)})
			for deadline := time.Now().Add(90 * time.Second); len(processesNamed(comm)) == 0; time.Sleep(20 * time.Millisecond) {
				select {
				case res := <-inFlight:
					t.Fatalf("a's run ended before it was told to: %s", text(res))
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("a's program never started")
				}
			}

			tt.other(t, a, b, ia, rootfs)

			// The test, not the clock, ends a's program: only if it is
			// still there to be told.
			for _, pid := range processesNamed(comm) {
				syscall.Kill(pid, syscall.SIGUSR1)
			}
			select {
			case res := <-inFlight:
				if r := runResult(t, res); r.Status != "success" || r.Stdout != "released\n" {
					t.Errorf("a's run in flight: status %s, exit %d, stdout %q, stderr %q; want success, released", r.Status, r.ExitCode, r.Stdout, r.Stderr)
				}
			case <-time.After(3 * time.Minute):
				t.Fatal("a's run in flight never answered")
			}
			for range 3 { // the pool's sandboxes and fresh ones
				runOK(t, srv, "print('a again')")
			}
		})
	}
}

// processesNamed lists the host processes whose comm is name.
func processesNamed(name string) []int {
	var pids []int
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range comms {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == name {
			var pid int
			if _, err := fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
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
