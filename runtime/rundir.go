package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/host"
)

// removeRunDir removes a per-run or pooled sandbox's host directory (src/,
// fifo/, ws/). ws/ is where a workspace view is attached: it is unmounted
// and then removed with rmdir only, and nothing is removed recursively while
// /proc/self/mountinfo lists a mount at or below dir. So a mount that stays
// or lands there (a failed unmount, a concurrent attach) leaves the
// directory in place instead of leading a recursive removal into a
// workspace (security review L6). What is left is logged by the caller and
// swept again later.
func removeRunDir(dir string) error {
	for _, d := range []string{"ws", "env", "envro"} {
		p := filepath.Join(dir, d)
		for unix.Unmount(p, unix.MNT_DETACH) == nil {
		}
		if err := unix.Rmdir(p); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("run dir %s: %s/ cannot be removed (%w); left in place", dir, d, err)
		}
	}
	mounts, err := host.MountsUnder(dir)
	if err != nil {
		return fmt.Errorf("run dir %s: %w; left in place", dir, err)
	}
	if len(mounts) > 0 {
		return fmt.Errorf("run dir %s: %s is mounted; left in place", dir, mounts[0])
	}
	return os.RemoveAll(dir)
}

// sweepRunDirs removes the per-run dirs (sources, build output, FIFOs) of
// runs no run in progress in this process owns: what a dead server left,
// after the engine swept its sandboxes. Only this instance's runtime
// writes under its StateDir.
func (r *Runtime) sweepRunDirs() error {
	runs := filepath.Join(r.cfg.StateDir, "runs")
	entries, _ := os.ReadDir(runs)
	var errs []error
	for _, e := range entries {
		if r.isLive(e.Name()) {
			continue
		}
		// A pooled sandbox's ws/ is a mount point (maybe with a workspace
		// view stacked on it): never removed recursively.
		if err := removeRunDir(filepath.Join(runs, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// isLive reports whether a run directory belongs to a run in progress in
// this process (a manual `sandpit gc` while serving must not pull it away).
func (r *Runtime) isLive(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live[id]
}
