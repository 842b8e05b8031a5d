package ctrd

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

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
// state from its owner and from the janitor —, when a live containerd keeps
// its state in, above or below it (an error), or when this process lacks
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
	// A containerd without tasks leaves only dirs in its state, yet lives:
	// a tmpfs over it would hide its state from it.
	if pids := ContainerdsUsing(abs); len(pids) > 0 {
		return false, fmt.Errorf("no tmpfs on %s: containerd (pid %d) keeps its state there", abs, pids[0])
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

// ContainerdsUsing lists the live containerd processes whose state dir is
// dir, lies below it or holds it. A process counts as containerd by its
// argv[0]; its state dir is its --state flag, else the `state` of its
// config file (--config, default /etc/containerd/config.toml), else
// containerd's default /run/containerd.
func ContainerdsUsing(dir string) []int {
	dir = filepath.Clean(dir)
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 { // gone, or a zombie
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) != "containerd" {
			continue
		}
		procDir := filepath.Dir(p)
		state := containerdState(args[1:], procDir)
		if state == "" {
			continue
		}
		if overlaps(state, dir) {
			pid, _ := strconv.Atoi(filepath.Base(procDir))
			pids = append(pids, pid)
		}
	}
	return pids
}

// containerdState is the state dir of a containerd started with args, or
// "" when it cannot be told. Relative paths are the process's cwd's.
func containerdState(args []string, procDir string) string {
	config, state := "/etc/containerd/config.toml", ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		for _, name := range []string{"--config", "-c", "--state"} {
			value, ok := "", false
			if a == name && i+1 < len(args) {
				value, ok = args[i+1], true
				i++
			} else if v, found := strings.CutPrefix(a, name+"="); found {
				value, ok = v, true
			}
			if !ok {
				continue
			}
			if name == "--state" {
				state = value
			} else {
				config = value
			}
			break
		}
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		cwd, err := os.Readlink(filepath.Join(procDir, "cwd"))
		if err != nil {
			return ""
		}
		return filepath.Join(cwd, p)
	}
	if state != "" {
		return abs(state)
	}
	var conf struct {
		State string `toml:"state"`
	}
	if path := abs(config); path != "" {
		if _, err := toml.DecodeFile(path, &conf); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "" // unreadable: cannot tell
		}
	}
	if conf.State == "" {
		return "/run/containerd"
	}
	return abs(conf.State)
}

// overlaps reports whether one of two clean absolute paths holds the other.
func overlaps(a, b string) bool {
	under := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/" }
	return under(a, b) || under(b, a)
}

// ReleaseStateTmpfs unmounts the tmpfs StateOnTmpfs put on dir, once the
// containerd that kept its state there stopped: a stopped private
// containerd leaves no mount behind. It leaves it when anything but empty
// dirs is there (a shim that outlived its daemon keeps its state there, and
// the next daemon's janitor needs it), when a containerd still uses it, or
// when it is no tmpfs of ours (not a tmpfs mount point under /run).
func ReleaseStateTmpfs(dir string, log *slog.Logger) (bool, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	if !underRun(abs) || host.IsRootless() {
		return false, nil
	}
	f, err := os.Open(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return false, fmt.Errorf("lock %s: %w", abs, err)
	}
	if mp, err := host.IsMountPoint(abs); err != nil || !mp {
		return false, err
	}
	if onTmpfs, err := host.OnTmpfs(abs); err != nil || !onTmpfs {
		return false, err
	}
	if empty, err := onlyDirs(abs); err != nil || !empty {
		return false, err
	}
	if pids := ContainerdsUsing(abs); len(pids) > 0 {
		return false, nil
	}
	// Our descriptor is on the tmpfs: it would keep it busy. (A daemon
	// started between here and the unmount keeps its state on the disk
	// below: slower, not wrong.)
	f.Close()
	if err := unix.Unmount(abs, 0); err != nil {
		return false, fmt.Errorf("unmount the state tmpfs %s: %w", abs, err)
	}
	log.Info("unmounted the state dir's tmpfs", "dir", abs)
	return true, nil
}
