// Package instance finds who owns a sandpit instance: the process that holds
// an exclusive flock on the instance's lock file for its whole life. Every
// server, `sandpit run` and the janitor go through it, so nothing removes
// what a live process holds, whatever the names say.
//
// Layout: <root>/<name>/lock (the lock, holding the owner's pid for humans)
// and everything else the instance keeps under <root>/<name>/. A lock is
// released by the kernel when its holder dies, however it dies, so a free
// lock always means a dead (or finished) owner.
package instance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
)

// ErrBusy: a live process holds the instance.
var ErrBusy = sandpit.Define(sandpit.ErrConflict, "instance in use")

// BusyError says which process holds an instance.
type BusyError struct {
	Name string
	PID  int // 0 when unknown
}

func (e *BusyError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("instance %q is held by pid %d", e.Name, e.PID)
	}
	return fmt.Sprintf("instance %q is held by another process", e.Name)
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// Instance is one held instance.
type Instance struct {
	name string
	dir  string
	lock *os.File
}

// Name is the instance's name (its containers' label).
func (in *Instance) Name() string { return in.name }

// Dir is where the instance keeps its state.
func (in *Instance) Dir() string { return in.dir }

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Acquire takes the instance name under root, failing with a *BusyError
// when a live process holds it.
func Acquire(root, name string) (*Instance, error) {
	if !validName.MatchString(name) {
		return nil, sandpit.Newf(sandpit.ErrInvalidArgument, "instance name %q: use letters, digits, '.', '_' and '-' (at most 63)", name)
	}
	dir := filepath.Join(root, name)
	// Each retry means a Remove of this name finished meanwhile (it moved
	// the dir away); only a storm of Acquire+Remove pairs by others can
	// exhaust the tries.
	for range maxTries {
		f, err := lock(dir)
		if errors.Is(err, errMoved) {
			continue
		}
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &BusyError{Name: name, PID: holder(dir)}
		}
		if err != nil {
			return nil, fmt.Errorf("instance lock: %w", err)
		}
		// The pid is for humans (sandpit gc says who holds it); the lock is
		// what counts.
		f.Truncate(0)
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		return &Instance{name: name, dir: dir, lock: f}, nil
	}
	return nil, fmt.Errorf("instance lock %s: the dir was removed and recreated %d times while taking it", dir, maxTries)
}

// maxTries bounds Acquire's retries when the dir moves under it.
const maxTries = 100

// errMoved: the lock file taken (or found held) is no longer the one at
// dir/lock, or dir vanished meanwhile: a Remove ran. Try again.
var errMoved = errors.New("instance dir moved")

// lock opens and flocks dir/lock, and checks that the file it locked is
// still the one at that path: Remove moves the dir away while holding the
// lock, so a lock on a file no longer at dir/lock is worth nothing (a third
// process would create a fresh one and hold the name too).
func lock(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o711); errors.Is(err, os.ErrExist) {
		return nil, errMoved // made by another Acquire, then moved away by its Remove
	} else if err != nil {
		return nil, fmt.Errorf("instance dir: %w", err)
	}
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, os.ErrNotExist) {
		return nil, errMoved // dir moved away between MkdirAll and here
	}
	if err != nil {
		return nil, err
	}
	lockErr := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if lockErr != nil && !errors.Is(lockErr, unix.EWOULDBLOCK) {
		f.Close()
		return nil, lockErr
	}
	// Held or not, a file no longer at path means its holder is removing
	// the instance: the name is about to be free.
	same, err := isAt(f, path)
	if err != nil || !same || lockErr != nil {
		f.Close()
		switch {
		case err != nil:
			return nil, err
		case !same:
			return nil, errMoved
		}
		return nil, lockErr
	}
	return f, nil
}

// isAt says whether f is the file at path now.
func isAt(f *os.File, path string) (bool, error) {
	var have, now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &have); err != nil {
		return false, err
	}
	err := unix.Stat(path, &now)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return have.Dev == now.Dev && have.Ino == now.Ino, nil
}

// AcquireFree takes the first free instance among prefix, prefix-2,
// prefix-3, ... (up to max tries), for processes started without an
// explicit instance: two MCP clients launching the same command each get
// their own.
func AcquireFree(root, prefix string, max int) (*Instance, error) {
	var last error
	for i := 1; i <= max; i++ {
		name := prefix
		if i > 1 {
			name = fmt.Sprintf("%s-%d", prefix, i)
		}
		in, err := Acquire(root, name)
		if err == nil {
			return in, nil
		}
		if !errors.Is(err, ErrBusy) {
			return nil, err
		}
		last = err
	}
	return nil, fmt.Errorf("no free instance among %s..%s-%d: %w", prefix, prefix, max, last)
}

// Release gives the instance up; its dir stays (the next owner's janitor,
// or Remove, deals with it).
func (in *Instance) Release() error {
	if in.lock == nil {
		return nil
	}
	err := in.lock.Close() // closing the last fd drops the flock
	in.lock = nil
	return err
}

// Remove deletes the instance's dir, lock included, and releases it. The
// caller must have emptied it of mounts first; Remove refuses to delete
// below a mount point.
func (in *Instance) Remove() error {
	if mounted, _ := host.MountsUnder(in.dir); len(mounted) > 0 {
		in.Release()
		return fmt.Errorf("instance %s: still mounted: %s", in.name, strings.Join(mounted, ", "))
	}
	// Move the dir out of the name in one step while holding the lock, then
	// delete it at leisure. Deleting it in place would race Acquire: a
	// newcomer's lock file, created while RemoveAll runs, would be deleted
	// with the dir while the newcomer holds it, and a third process would
	// then hold the name too. The tombstone's name starts with a dot, which
	// no instance name does, so Dead never takes it.
	tomb, err := os.MkdirTemp(filepath.Dir(in.dir), fmt.Sprintf("%s%d-%s-", tombPrefix, os.Getpid(), in.name))
	if err != nil {
		in.Release()
		return fmt.Errorf("instance %s: %w", in.name, err)
	}
	if err := os.Rename(in.dir, filepath.Join(tomb, in.name)); err != nil {
		os.Remove(tomb)
		in.Release()
		return fmt.Errorf("instance %s: %w", in.name, err)
	}
	in.Release()
	// An Acquire that resolved the old path just before the move may still
	// create its lock file in the tombstone (it then sees the file is not at
	// the name and retries): each such file makes one RemoveAll fail with
	// ENOTEMPTY, and there are at most as many as racing Acquires.
	for range maxTries {
		if err = os.RemoveAll(tomb); !errors.Is(err, unix.ENOTEMPTY) {
			break
		}
	}
	return err
}

// tombPrefix starts the name of a dir Remove is deleting:
// .removed-PID-NAME-RANDOM. A crash between the move and the delete leaves
// it behind; Dead deletes those whose PID is gone.
const tombPrefix = ".removed-"

// sweepTombs deletes the tombstones under root whose remover died.
func sweepTombs(root string, entries []os.DirEntry) {
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), tombPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue // not ours, or its remover may still be at it
		}
		os.RemoveAll(filepath.Join(root, e.Name()))
	}
}

// Dead takes every instance under root that no live process holds (its
// owner died), for the caller to sweep and then Remove or Release. It also
// deletes what a Remove that died midway left.
func Dead(root string) ([]*Instance, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sweepTombs(root, entries)
	var out []*Instance
	for _, e := range entries {
		if !e.IsDir() || !validName.MatchString(e.Name()) {
			continue
		}
		in, err := Acquire(root, e.Name())
		if err != nil {
			continue // held by a live process, or unreadable: not ours to sweep
		}
		out = append(out, in)
	}
	return out, nil
}

// Holder returns the pid that holds instance name under root, 0 when none
// (or unknown).
func Holder(root, name string) int {
	dir := filepath.Join(root, name)
	f, err := os.Open(filepath.Join(dir, "lock"))
	if err != nil {
		return 0
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return 0
	}
	return holder(dir)
}

func holder(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "lock"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}
