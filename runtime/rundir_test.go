package runtime

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestDestroyWarmNeverRemovesThroughAMount: destroyWarm (and the janitor)
// unmounted ws/ and then RemoveAll'd the sandbox dir; a workspace bound
// anywhere below it (a mount that landed after the unmount loop, or one the
// loop does not know) was deleted through the mount (security review L6).
func TestDestroyWarmNeverRemovesThroughAMount(t *testing.T) {
	testenv.NeedRoot(t, "mounting")
	tests := []struct {
		name  string
		setup func(t *testing.T, dir, workspace string) (keep string)
	}{
		{"a workspace bound below ws/", func(t *testing.T, dir, workspace string) string {
			// ws/ holds a directory with a mount: the unmount loop on ws/
			// itself does not see it.
			sub := filepath.Join(dir, "ws", "view")
			mustOK(t, os.MkdirAll(sub, 0o755))
			mustOK(t, unix.Mount(workspace, sub, "", unix.MS_BIND, ""))
			return filepath.Join(workspace, "precious")
		}},
		{"a workspace bound beside ws/", func(t *testing.T, dir, workspace string) string {
			mustOK(t, unix.Mount(workspace, filepath.Join(dir, "src"), "", unix.MS_BIND, ""))
			return filepath.Join(workspace, "precious")
		}},
		{"no mount", func(t *testing.T, dir, workspace string) string {
			mustOK(t, os.WriteFile(filepath.Join(dir, "src", "main.py"), []byte("print(1)"), 0o644))
			return ""
		}},
		{"ws/ not empty (a view that failed to unmount)", func(t *testing.T, dir, workspace string) string {
			mustOK(t, os.WriteFile(filepath.Join(dir, "ws", "precious"), []byte("keep"), 0o644))
			return filepath.Join(dir, "ws", "precious")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			workspace := filepath.Join(base, "workspace")
			mustOK(t, os.MkdirAll(workspace, 0o755))
			mustOK(t, os.WriteFile(filepath.Join(workspace, "precious"), []byte("keep"), 0o644))
			dir := filepath.Join(base, "runs", "warm-0123")
			for _, d := range []string{"src", "ws", "fifo"} {
				mustOK(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
			}
			keep := tt.setup(t, dir, workspace)
			t.Cleanup(func() {
				for _, m := range []string{filepath.Join(dir, "ws", "view"), filepath.Join(dir, "src")} {
					unix.Unmount(m, unix.MNT_DETACH)
				}
			})
			r := &Runtime{live: map[string]bool{"warm-0123": true}, log: slog.New(slog.DiscardHandler)}
			r.destroyWarm(&warm{dir: dir})
			if keep == "" {
				if _, err := os.Stat(dir); err == nil {
					t.Error("a run dir without mounts was left")
				}
			} else if b, err := os.ReadFile(keep); err != nil || string(b) != "keep" {
				t.Errorf("%s was removed through the run dir: %q, %v", keep, b, err)
			}
			if r.live["warm-0123"] {
				t.Error("the sandbox is still live")
			}
		})
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
