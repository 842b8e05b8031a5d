package runtime

import (
	"log/slog"
	"os"
	"path/filepath"
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
