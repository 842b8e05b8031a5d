package runtime_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/runtime"
)

// A private containerd that does not answer (stopped, or stalled on a
// loaded host) is waited for, never "started" again: no tmpfs over its live
// state, its sockets stay, no second daemon, the pid file still names it,
// and once it runs again it answers. Needs root and the containerd binary,
// not the images.
func TestStuckPrivateContainerdIsNotStartedAgain(t *testing.T) {
	testenv.NeedRoot(t, "starting a containerd")
	for _, bin := range []string{"containerd", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.Skip(t, bin+" is not installed")
		}
	}
	tests := []struct {
		name  string
		start func(t *testing.T, d runtime.PrivateDaemon)
	}{
		{"started by sandpit", func(t *testing.T, d runtime.PrivateDaemon) {
			if err := d.Start(t.Context(), slog.Default()); err != nil {
				t.Fatal(err)
			}
		}},
		// As an operator, a script or an older sandpit would: sandpit's
		// config, no pid file, no lock of sandpit's.
		{"started by hand", func(t *testing.T, d runtime.PrivateDaemon) {
			for _, dir := range []string{d.Dir, d.Root} {
				if err := os.MkdirAll(dir, 0o711); err != nil {
					t.Fatal(err)
				}
			}
			conf := filepath.Join(d.Dir, "config.toml")
			if err := os.WriteFile(conf, []byte(d.Config()), 0o600); err != nil {
				t.Fatal(err)
			}
			logf, err := os.Create(filepath.Join(d.Dir, "containerd.log"))
			if err != nil {
				t.Fatal(err)
			}
			defer logf.Close()
			cmd := exec.Command("containerd", "--config", conf)
			cmd.Stdout, cmd.Stderr = logf, logf
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go cmd.Wait() // reap it when the cleanup kills it
			waitAnswers(t, d)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// /run on disk, as on the CI machines: where today's code mounted
			// a tmpfs over the live daemon's state.
			run := testenv.RunOnDisk(t)
			d := runtime.PrivateDaemon{Dir: filepath.Join(run, "cd"), Root: filepath.Join(run, "root"), Patience: 3 * time.Second}
			t.Cleanup(func() { killDaemons(d) }) // before RunOnDisk's unmount
			tc.start(t, d)
			pids := daemonsOf(d)
			if len(pids) != 1 {
				t.Fatalf("containerd processes with the test's config: %v, want one", pids)
			}
			pid := pids[0]
			pidFile, _ := os.ReadFile(filepath.Join(d.Dir, "containerd.pid"))
			sockets := map[string]uint64{}
			for _, s := range []string{d.Address(), d.Address() + ".ttrpc", filepath.Join(d.Dir, "debug.sock")} {
				sockets[s] = inode(t, s)
			}
			mounts := mountsUnder(t, run)

			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			defer syscall.Kill(pid, syscall.SIGCONT)

			err := d.Start(t.Context(), slog.Default())
			t.Logf("Start: %v", err)
			if err == nil || !strings.Contains(err.Error(), strconv.Itoa(pid)) {
				t.Errorf("Start beside a stopped daemon: %v, want an error naming pid %d", err, pid)
			}
			if _, err := runtime.Answers(t.Context(), runtime.SystemAddress, 2*time.Second); err != nil {
				// No system containerd: Resolve goes for the private one.
				addr, err := runtime.Resolve(t.Context(), "", d, true, slog.Default())
				t.Logf("Resolve: %s, %v", addr, err)
				if !errors.Is(err, sandpit.ErrUnavailable) || !strings.Contains(err.Error(), strconv.Itoa(pid)) {
					t.Errorf("Resolve beside a stopped daemon: %v, want unavailable naming pid %d", err, pid)
				}
				if hint := sandpit.HintOf(err); !strings.Contains(hint, "containerd stop") {
					t.Errorf("Resolve's hint: %q, want how to end the stuck daemon", hint)
				}
			}

			if got := mountsUnder(t, run); !slices.Equal(got, mounts) {
				t.Errorf("mounts under the daemon's dirs: %v, want %v as before", got, mounts)
			}
			for s, ino := range sockets {
				if _, err := os.Stat(s); err != nil {
					t.Errorf("socket %s: %v", s, err)
				} else if got := inode(t, s); got != ino {
					t.Errorf("socket %s was replaced", s)
				}
			}
			if got := daemonsOf(d); !slices.Equal(got, []int{pid}) {
				t.Errorf("containerd processes with the test's config: %v, want only %d", got, pid)
			}
			if got, _ := os.ReadFile(filepath.Join(d.Dir, "containerd.pid")); !bytes.Equal(got, pidFile) {
				t.Errorf("pid file: %q, want %q as before", got, pidFile)
			}
			if got := d.PID(); got != pid {
				t.Errorf("PID() = %d, want %d", got, pid)
			}

			syscall.Kill(pid, syscall.SIGCONT)
			waitAnswers(t, d)
			if err := d.Start(t.Context(), slog.Default()); err != nil {
				t.Errorf("Start beside a running daemon: %v, want nil (it answers)", err)
			}
			if got := daemonsOf(d); !slices.Equal(got, []int{pid}) {
				t.Errorf("after Start beside a running daemon: %v, want only %d", got, pid)
			}
		})
	}
}

// waitAnswers waits, up to a minute (a loaded host), for d to answer.
func waitAnswers(t *testing.T, d runtime.PrivateDaemon) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err = runtime.Answers(t.Context(), d.Address(), 2*time.Second); err == nil {
			return
		}
	}
	t.Fatalf("containerd at %s does not answer: %v", d.Address(), err)
}

// daemonsOf lists the containerd processes started with d's config.
func daemonsOf(d runtime.PrivateDaemon) []int {
	conf := filepath.Join(d.Dir, "config.toml")
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) != "containerd" {
			continue
		}
		for i, a := range args {
			if a == "--config" && i+1 < len(args) && args[i+1] == conf {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// killDaemons ends every containerd of d, stopped or not, and waits until
// they are gone (so the dirs can be unmounted and removed).
func killDaemons(d runtime.PrivateDaemon) {
	pids := daemonsOf(d)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
		syscall.Kill(pid, syscall.SIGCONT)
	}
	for deadline := time.Now().Add(30 * time.Second); len(daemonsOf(d)) > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.Stop(ctx)
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	m, err := host.MountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
