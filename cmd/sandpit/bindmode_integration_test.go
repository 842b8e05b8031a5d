package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// swapProgram is the background run of review 2026-12-01 H2: in the
// workspace, d/ holds a FIFO named .ssh, l -> ../../victim (relative: no
// host path needed), 3,000 files widen every other run's walk, and
// renameat2(d, l, RENAME_EXCHANGE) loops until the file "stop" appears.
const swapProgram = `import os, ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
def ensure():
    for a, b in (("d", "l"), ("l", "d")):
        if os.path.isdir(a) and not os.path.islink(a):
            if not os.path.lexists(a + "/.ssh"): os.mkfifo(a + "/.ssh")
            if not os.path.lexists(b): os.symlink("../../victim", b)
            return
    for n in ("d", "l"):
        if os.path.lexists(n) and not os.path.isdir(n): os.unlink(n)
    os.makedirs("d", exist_ok=True)
for i in range(3000): open("z%04d" % i, "w").close()
print("swapping", flush=True)
end = time.time() + 50
while time.time() < end and not os.path.exists("stop"):
    try: ensure()
    except OSError: pass
    for _ in range(50): libc.syscall(316, -100, b"d", -100, b"l", 2)
`

// A root server whose workspace path holds a ',' (no overlay options can
// carry it) binds the workspace only with --allow-workspace-bind; then a
// background run swapping a directory for a symlink out of the workspace
// must not make other runs' cleanup delete anything outside it (review
// 2026-12-01 H2: victim/.ssh deleted after 2, 13 and 18 runs).
func TestLifecycleBindModeSwapAttack(t *testing.T) {
	s := newLifecycleStore(t)
	ws := filepath.Join(s.dir, "a,b", "ws")
	victim := filepath.Join(s.dir, "victim", ".ssh")
	if err := os.MkdirAll(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(victim, "id_ed25519")
	if err := os.WriteFile(key, []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, _ := s.start(t, "--workspace", ws, "--allow-workspace-bind", "--max-timeout", "2m")
	c := srv.client
	bg := runResult(t, callOn(t, c, "run_code", map[string]any{"language": "python", "background": true, "timeout_seconds": 90, "code": swapProgram}))
	if bg.Status != "running" {
		t.Fatalf("background start: %+v", bg)
	}
	defer os.WriteFile(filepath.Join(ws, "stop"), nil, 0o644)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Lstat(filepath.Join(ws, "z2999")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background run never made its files")
		}
	}
	// The undo record of a run is taken by walking the workspace too, and
	// the swap makes it fail now and then ("too many levels of symbolic
	// links"): that run does not start. Count the runs that ran.
	refused := 0
	for i := 0; i < 25; {
		res := callOn(t, c, "run_code", map[string]any{"language": "python", "code": "print(1)"})
		if res.IsError && strings.Contains(text(res), "could not be recorded") && refused < 200 {
			refused++
			continue
		}
		r := runResult(t, res)
		if r.Status != "success" {
			t.Fatalf("run %d: %+v", i+1, r)
		}
		i++
		if _, err := os.Lstat(key); err != nil {
			t.Fatalf("after %d foreground runs, the victim outside the workspace: %v", i, err)
		}
		if r.Files != nil {
			for _, p := range slices.Concat(r.Files.Created, r.Files.Modified, r.Files.Deleted) {
				if strings.Contains(p, "id_ed25519") {
					t.Fatalf("run %d reports %q, a file outside the workspace", i, p)
				}
			}
		}
	}
	t.Logf("25 runs beside the swap; %d more refused for want of an undo record", refused)
}
