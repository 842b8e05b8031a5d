package ctrd

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestStateOnTmpfs checks when a state dir gets a tmpfs of its own: only
// under /run, only on disk, only empty and not a mount point, and once
// however many callers race. testenv.RunOnDisk stands for /run on disk.
func TestStateOnTmpfs(t *testing.T) {
	run := testenv.RunOnDisk(t)
	disk, err := os.MkdirTemp("/var/tmp", "sandpit-statefs-") // on disk: RunOnDisk checked
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(disk) })
	log := slog.New(slog.DiscardHandler)

	tests := []struct {
		name    string
		dir     string
		prepare func(t *testing.T, dir string)
		want    bool
	}{
		{"fresh dir under /run on disk", filepath.Join(run, "fresh", "state"), nil, true},
		{"not under /run", filepath.Join(disk, "elsewhere"), func(t *testing.T, dir string) { mkdir(t, dir) }, false},
		{"only empty dirs, as a clean stop leaves", filepath.Join(run, "stopped"), func(t *testing.T, dir string) {
			mkdir(t, filepath.Join(dir, "io.containerd.runtime.v2.task", "sandpit"))
		}, true},
		{"a file: what is there stays visible", filepath.Join(run, "used"), func(t *testing.T, dir string) {
			mkdir(t, filepath.Join(dir, "instances", "default"))
			if err := os.WriteFile(filepath.Join(dir, "instances", "default", "lock"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a FIFO: what is there stays visible", filepath.Join(run, "fifo"), func(t *testing.T, dir string) {
			mkdir(t, filepath.Join(dir, "runs", "x"))
			if err := unix.Mkfifo(filepath.Join(dir, "runs", "x", "stdout"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a mount point already", filepath.Join(run, "bound"), func(t *testing.T, dir string) {
			src := filepath.Join(run, "bound-src")
			mkdir(t, src)
			mkdir(t, dir)
			if err := unix.Mount(src, dir, "", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.prepare != nil {
				tc.prepare(t, tc.dir)
			}
			got, err := StateOnTmpfs(tc.dir, log)
			if err != nil || got != tc.want {
				t.Fatalf("StateOnTmpfs = %v, %v; want %v", got, err, tc.want)
			}
			onTmpfs, err := host.OnTmpfs(tc.dir)
			if err != nil || onTmpfs != tc.want {
				t.Fatalf("on a tmpfs afterwards: %v, %v; want %v", onTmpfs, err, tc.want)
			}
			// Once on a tmpfs, again is a no-op.
			if again, err := StateOnTmpfs(tc.dir, log); err != nil || again {
				t.Fatalf("second call = %v, %v; want false", again, err)
			}
		})
	}

	// A containerd without tasks leaves only dirs in its state, yet lives.
	t.Run("a live containerd keeps its state there", func(t *testing.T) {
		dir := filepath.Join(run, "live", "state")
		mkdir(t, filepath.Join(dir, "io.containerd.runtime.v2.task", "sandpit"))
		fake := fakeContainerd(t, "--state", dir)
		got, err := StateOnTmpfs(dir, log)
		if got || err == nil || !strings.Contains(err.Error(), strconv.Itoa(fake)) {
			t.Fatalf("StateOnTmpfs = %v, %v; want false and an error naming pid %d", got, err, fake)
		}
		if n := len(mountsAt(t, dir)); n != 0 {
			t.Fatalf("%d mounts at %s; want none", n, dir)
		}
	})

	t.Run("racing callers mount once", func(t *testing.T) {
		dir := filepath.Join(run, "race")
		var wg sync.WaitGroup
		var mu sync.Mutex
		mounted := 0
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := StateOnTmpfs(dir, log)
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					mounted++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if n := len(mountsAt(t, dir)); mounted != 1 || n != 1 {
			t.Fatalf("%d callers mounted, %d mounts at %s; want 1 and 1", mounted, n, dir)
		}
	})
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// mountsAt lists the mounts at or below dir, one entry per mount (a
// stacked mount counts twice).
func mountsAt(t *testing.T, dir string) []string {
	t.Helper()
	m, err := host.MountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fakeContainerd runs a process that looks like a containerd started with
// args (its argv[0] is "containerd"), until the test ends; it returns its pid.
func fakeContainerd(t *testing.T, args ...string) int {
	t.Helper()
	cmd := &exec.Cmd{Path: "/bin/sh", Args: append([]string{"containerd", "-c", "read x", "sh"}, args...)}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd.Process.Pid
}

func TestContainerdState(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(conf, []byte("version = 2\nroot = \"/r\"\nstate = \"/run/x/state\"\n[grpc]\n  address = \"/run/x/s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noState := filepath.Join(dir, "nostate.toml")
	if err := os.WriteFile(noState, []byte("version = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	self := "/proc/self"
	cwd, _ := os.Getwd()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"--config", []string{"--config", conf}, "/run/x/state"},
		{"--config=", []string{"--config=" + conf}, "/run/x/state"},
		{"-c", []string{"-c", conf}, "/run/x/state"},
		{"--state wins over the config", []string{"--config", conf, "--state", "/run/y"}, "/run/y"},
		{"--state= relative to the cwd", []string{"--state=st"}, filepath.Join(cwd, "st")},
		{"no state in the config: the default", []string{"--config", noState}, "/run/containerd"},
		{"a missing config: the default", []string{"--config", filepath.Join(dir, "none.toml")}, "/run/containerd"},
		{"no flags", nil, "/run/containerd"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := containerdState(tc.args, self); got != tc.want {
				t.Errorf("containerdState(%q) = %q, want %q", tc.args, got, tc.want)
			}
		})
	}
}

func TestOverlaps(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"/run/a", "/run/a", true},
		{"/run/a/state", "/run/a", true},
		{"/run/a", "/run/a/state", true},
		{"/run/ab", "/run/a", false},
		{"/run/a", "/run/b", false},
	}
	for _, tc := range tests {
		if got := overlaps(tc.a, tc.b); got != tc.want {
			t.Errorf("overlaps(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// A state tmpfs goes when its daemon stopped and left only dirs; with a
// file in it (a shim that outlived its daemon) it stays, as does a dir that
// is no tmpfs mount of its own.
func TestReleaseStateTmpfs(t *testing.T) {
	run := testenv.RunOnDisk(t)
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name    string
		mount   bool
		prepare func(t *testing.T, dir string)
		want    bool
	}{
		{"empty dirs after a clean stop", true, func(t *testing.T, dir string) {
			mkdir(t, filepath.Join(dir, "io.containerd.runtime.v2.task", "sandpit"))
		}, true},
		{"a shim's file", true, func(t *testing.T, dir string) {
			mkdir(t, filepath.Join(dir, "task"))
			if err := os.WriteFile(filepath.Join(dir, "task", "shim.pid"), []byte("1"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"no tmpfs there", false, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(run, strings.ReplaceAll(tc.name, " ", "-"), "state")
			if tc.mount {
				if ok, err := StateOnTmpfs(dir, log); !ok || err != nil {
					t.Fatalf("StateOnTmpfs: %v %v", ok, err)
				}
			} else {
				mkdir(t, dir)
			}
			if tc.prepare != nil {
				tc.prepare(t, dir)
			}
			got, err := ReleaseStateTmpfs(dir, log)
			if err != nil || got != tc.want {
				t.Fatalf("ReleaseStateTmpfs = %v, %v; want %v", got, err, tc.want)
			}
			mp, _ := host.IsMountPoint(dir)
			if mp != (tc.mount && !tc.want) {
				t.Fatalf("mounted after: %v", mp)
			}
		})
	}
}
