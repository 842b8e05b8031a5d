package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// hostLock extends one of the workspace's mutexes to every process on the
// host: a flock on a file named after the workspace's real path, taken on
// top of the in-process mutex. flock belongs to the open file, not to the
// goroutine, so shared holders in this process are counted: the first takes
// it, the last releases it. A nil hostLock (no Options.LockDir) does
// nothing.
//
// The files do not pile up (review 2026-12-01, L4): a workspace's pair is
// removed when it is closed, and any pair no process holds when another
// workspace opens (one a killed process left). A file is removed only by
// whoever holds it exclusively, on a descriptor of its own, after checking
// it is still the file at its path; and whoever takes a lock checks,
// once it holds it, that its file is still the one at the path, and
// otherwise opens the one there (making it if need be) and locks again. So
// every holder holds the file at the path, which no one can remove under
// a holder: two processes never hold two files of one name (review M1's
// lock-file pattern).
type hostLock struct {
	path   string
	log    *slog.Logger
	mu     sync.Mutex // guards shared; and f, with the workspace's own mutex
	f      *os.File
	shared int
}

// A workspace's two lock files: lockPrefix, a digest of its path, a suffix.
const (
	lockPrefix     = "workspace-"
	dataLockSuffix = ".data.lock"
	runsLockSuffix = ".runs.lock"
)

// openHostLocks opens the workspace's two host locks in dir: data (for mu:
// writes, merges, restores) and runs (for runs: open views against a
// restore). The names come from the workspace's real path, so every process
// that opens it, by whatever path, takes the same locks. It first removes
// the lock files in dir that no process holds.
func openHostLocks(dir, workspace string, log *slog.Logger) (data, runs *hostLock, err error) {
	if dir == "" {
		return nil, nil, nil
	}
	real, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		return nil, nil, err
	}
	if err := makeLockDir(dir); err != nil {
		return nil, nil, err
	}
	sweepHostLocks(dir)
	sum := sha256.Sum256([]byte(real))
	base := filepath.Join(dir, lockPrefix+hex.EncodeToString(sum[:8]))
	open := func(suffix string) (*hostLock, error) {
		l := &hostLock{path: base + suffix, log: log}
		if err := l.reopen(); err != nil {
			return nil, err
		}
		return l, nil
	}
	if data, err = open(dataLockSuffix); err != nil {
		return nil, nil, err
	}
	if runs, err = open(runsLockSuffix); err != nil {
		data.f.Close()
		return nil, nil, err
	}
	return data, runs, nil
}

// sweepHostLocks removes the lock files in dir that no process holds. It
// is bounded by what it removes: the files of workspaces in use stay, and
// those are few.
func sweepHostLocks(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, lockPrefix) && (strings.HasSuffix(n, dataLockSuffix) || strings.HasSuffix(n, runsLockSuffix)) {
			removeUnheld(filepath.Join(dir, n))
		}
	}
}

// removeUnheld removes the lock file at p if no one holds it: on a
// descriptor of its own (which conflicts with this process's other ones
// too), exclusively and without waiting, and only if it is still the file
// at p.
func removeUnheld(p string) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return
	}
	if isAt(fd, p) {
		unix.Unlink(p)
	}
	// Closing fd releases the lock.
}

// isAt reports whether the file open as fd is the one at p.
func isAt(fd int, p string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(fd, &a) != nil || unix.Stat(p, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// makeLockDir makes the lock dir private, and whatever it makes above it
// traversable: as root that is /run/sandpit, which also holds the image
// roots that every sandbox's user must traverse.
func makeLockDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// reopen opens (making it if need be) the file at l.path in place of l.f.
func (l *hostLock) reopen() error {
	if err := makeLockDir(filepath.Dir(l.path)); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	if l.f != nil {
		l.f.Close()
	}
	l.f = f
	return nil
}

// flock takes the lock (how: LOCK_EX or LOCK_SH, with LOCK_NB or not) on
// the file at l.path, reopening it when the file l.f holds was removed
// while it waited. false: LOCK_NB, and another holds it.
func (l *hostLock) flock(how int) bool {
	for {
		err := unix.Flock(int(l.f.Fd()), how)
		for errors.Is(err, unix.EINTR) {
			err = unix.Flock(int(l.f.Fd()), how)
		}
		if err != nil {
			return false
		}
		if isAt(int(l.f.Fd()), l.path) {
			return true
		}
		unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		if err := l.reopen(); err != nil {
			// The lock dir is gone and cannot be made again: hold what
			// we have, which excludes this process's other holders only.
			l.log.Warn("host lock file could not be made again; the lock no longer excludes other processes", "path", l.path, "err", err)
			for unix.Flock(int(l.f.Fd()), how) == unix.EINTR {
			}
			return true
		}
	}
}

// lock takes the lock exclusively; the caller holds the in-process mutex
// exclusively, so no goroutine here holds it shared.
func (l *hostLock) lock() {
	if l != nil {
		l.flock(unix.LOCK_EX)
	}
}

// tryLock takes it exclusively if no other process holds it.
func (l *hostLock) tryLock() bool {
	if l == nil {
		return true
	}
	return l.flock(unix.LOCK_EX | unix.LOCK_NB)
}

func (l *hostLock) unlock() {
	if l != nil {
		for unix.Flock(int(l.f.Fd()), unix.LOCK_UN) == unix.EINTR {
		}
	}
}

func (l *hostLock) rlock() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shared == 0 {
		l.flock(unix.LOCK_SH)
	}
	l.shared++
}

func (l *hostLock) runlock() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shared--
	if l.shared == 0 {
		for unix.Flock(int(l.f.Fd()), unix.LOCK_UN) == unix.EINTR {
		}
	}
}

// release removes the lock's file if no process holds it (this one
// included); a later lock makes it again.
func (l *hostLock) release() {
	if l != nil {
		removeUnheld(l.path)
	}
}

// close closes the lock's file and removes it if no process holds it.
func (l *hostLock) close() {
	if l != nil {
		l.f.Close()
		removeUnheld(l.path)
	}
}

// lock, unlock, rlock and runlock take mu and its host lock together.
func (w *Workspace) lock() {
	w.mu.Lock()
	w.data.lock()
}

func (w *Workspace) unlock() {
	w.data.unlock()
	w.mu.Unlock()
}

func (w *Workspace) rlock() {
	w.mu.RLock()
	w.data.rlock()
}

func (w *Workspace) runlock() {
	w.data.runlock()
	w.mu.RUnlock()
}

// runsUnlock releases what Open took for a view: runs, shared, and its
// host lock.
func (w *Workspace) runsUnlock() {
	w.runsHost.runlock()
	w.runs.RUnlock()
}
