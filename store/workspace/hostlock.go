package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// hostLock extends one of the workspace's mutexes to every process on the
// host: a flock on a file named after the workspace's real path, taken on
// top of the in-process mutex. flock belongs to the open file, not to the
// goroutine, so shared holders in this process are counted: the first takes
// it, the last releases it. A nil hostLock (no Options.LockDir) does
// nothing.
type hostLock struct {
	mu     sync.Mutex
	f      *os.File
	shared int
}

// openHostLocks opens the workspace's two host locks in dir: data (for mu:
// writes, merges, restores) and runs (for runs: open views against a
// restore). The names come from the workspace's real path, so every process
// that opens it, by whatever path, takes the same locks.
func openHostLocks(dir, workspace string) (data, runs *hostLock, err error) {
	if dir == "" {
		return nil, nil, nil
	}
	real, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256([]byte(real))
	base := filepath.Join(dir, "workspace-"+hex.EncodeToString(sum[:8]))
	open := func(suffix string) (*hostLock, error) {
		f, err := os.OpenFile(base+suffix, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, err
		}
		return &hostLock{f: f}, nil
	}
	if data, err = open(".data.lock"); err != nil {
		return nil, nil, err
	}
	if runs, err = open(".runs.lock"); err != nil {
		data.f.Close()
		return nil, nil, err
	}
	return data, runs, nil
}

func (l *hostLock) flock(how int) {
	for unix.Flock(int(l.f.Fd()), how) == unix.EINTR {
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
	return unix.Flock(int(l.f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}

func (l *hostLock) unlock() {
	if l != nil {
		l.flock(unix.LOCK_UN)
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
		l.flock(unix.LOCK_UN)
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
