package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/host"
)

// StateTmpfsOptions are the mount options of a state dir's own tmpfs. What
// lives there is small — FIFOs, run files of at most the code size limit,
// bundle configs, mount points — since every run's writes to its workspace
// go to a tmpfs of their own with its own bound (store/workspace).
const StateTmpfsOptions = "mode=0711,size=512m"

// StateOnTmpfs mounts a tmpfs on dir when dir lies under /run but is not on
// a tmpfs: /run is meant to be one, and is on disk in some containers and
// minimal VMs (the CI machines among them). Sandpit and containerd create
// and remove a few dirs, files and FIFOs there for every sandbox; on ext4
// each creation scans for an inode number not recently freed and goes
// through the journal, which measured ~17 % of the CPU of a run over MCP on
// such a host (notes of issue 15).
//
// It leaves dir alone, reporting false, when dir is elsewhere (the user chose
// it), already on a tmpfs, a mount point of its own, or holds anything but
// empty dirs — hiding a file there could hide a live or dead instance's
// state from its owner and from the janitor — or when this process lacks
// real root. (Empty dirs are what a clean stop leaves: containerd's
// per-namespace dirs, sandpit's instances dir.) Concurrent callers
// serialise on a lock of the dir, so at most one tmpfs is ever mounted there.
func StateOnTmpfs(dir string, log *slog.Logger) (bool, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	if !underRun(abs) || host.IsRootless() {
		return false, nil
	}
	if err := os.MkdirAll(abs, 0o711); err != nil {
		return false, err
	}
	f, err := os.Open(abs)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return false, fmt.Errorf("lock %s: %w", abs, err)
	}
	// Checked by path under the lock: a caller that opened the dir before
	// another mounted on it holds the covered dir, not the tmpfs.
	if onTmpfs, err := host.OnTmpfs(abs); err != nil || onTmpfs {
		return false, err
	}
	if mp, err := host.IsMountPoint(abs); err != nil || mp {
		return false, err
	}
	empty, err := onlyDirs(abs)
	if err != nil || !empty {
		if err == nil {
			log.Info("state dir is on disk and not empty; sandpit runs faster with it on a tmpfs (stop every sandpit process and containerd using it, empty it, and start again)", "dir", abs)
		}
		return false, err
	}
	if err := unix.Mount("tmpfs", abs, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, StateTmpfsOptions); err != nil {
		return false, fmt.Errorf("mount a tmpfs on %s: %w", abs, err)
	}
	log.Info("mounted a tmpfs on the state dir (it was on disk)", "dir", abs, "options", StateTmpfsOptions)
	return true, nil
}

// underRun reports whether an absolute, clean path lies below /run.
func underRun(p string) bool {
	p = filepath.Clean(p)
	return strings.HasPrefix(p, "/run/") || strings.HasPrefix(p, "/var/run/")
}

// onlyDirs reports whether the tree at dir holds nothing but directories.
func onlyDirs(dir string) (bool, error) {
	errFile := errors.New("a file")
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return errFile
		}
		return nil
	})
	if errors.Is(err, errFile) {
		return false, nil
	}
	return err == nil, err
}
