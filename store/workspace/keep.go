package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
)

// Views kept for the next call or run. Preparing a run's view (a tmpfs, an
// idmapped bind, an overlay) and releasing it costs ~2 ms of mount work,
// most of a session call's time when the call itself (x += 1) takes half a
// millisecond, and a tenth of a warm run's. So a keeper holds the view of a
// call or run that changed nothing still mounted, and the next one takes it
// instead of mounting another: each session has a keeper of its own (its
// calls come one at a time), and the workspace one for all runs (the spare,
// which the next run takes whatever sandbox it gets: it keeps a view only
// when its caller said, with WritersGone, that no process of the run is
// left to write through it; a run that ended in an error, its sandbox
// perhaps still alive, has its view released). The next one takes it only
// when it is indistinguishable from a fresh one:
//   - its upper dir is still empty (a process a session left running may
//     have written through it since; then it is released, and those writes
//     are discarded, as they are when a view is released under them);
//   - the workspace is exactly what it was when the view was mounted: the
//     same entries with the same inode, size, mode, mtime and ctime, the
//     root included (a restore swaps the root; a host edit changes a
//     ctime). An overlay caches what it looked up in its lower layer, so a
//     view mounted before any change, even one it already shows, is not
//     reused. The fingerprint is taken before the undo record and the
//     mount, so a change racing either only ever makes the next check fail.
//
// A reused view also skips the undo record (Options.BeforeRun): the
// workspace is then exactly the state the kept view's own record holds,
// and that record is still the newest — a run that changed the workspace,
// or an undo or restore (a new root), would have changed the fingerprint.
//
// Workspaces with more than keepMaxEntries entries are not fingerprinted
// (the walk costs ~5 µs an entry here, and past a few hundred it costs
// what the mounts it saves do): their calls mount a view each, as runs do. A fingerprint is refused when an entry's ctime is
// within keepRacyWindow of the walk: a change in the same clock tick would
// not change it (git's "racily clean" entries).
const keepMaxEntries = 256

// keepRacyWindow is a variable only so that tests can widen it: a check
// that fresh entries are refused must not depend on the test reaching the
// fingerprint within 50 ms of its write, which a loaded host does not.
var keepRacyWindow = 50 * time.Millisecond

// fingerprint is a digest of the workspace's entries' identities, or the
// zero value: not reusable.
type fingerprint struct {
	sum [sha256.Size]byte
	ok  bool
}

// fingerprint walks the workspace's entries without following symlinks,
// reading at most keepMaxEntries+1 of them (in batches: a directory with a
// million entries is not listed whole).
func (w *Workspace) fingerprint() fingerprint {
	h := sha256.New()
	racy := time.Now().Add(-keepRacyWindow).UnixNano()
	n := 0
	var buf [8 * 6]byte
	add := func(path string) (*unix.Stat_t, error) {
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return nil, err
		}
		if n++; n > keepMaxEntries {
			return nil, errTooMany
		}
		ctime := st.Ctim.Nano()
		if ctime >= racy {
			return nil, errRacy
		}
		h.Write([]byte(path))
		h.Write([]byte{0})
		for i, v := range []uint64{st.Ino, uint64(st.Size), uint64(st.Mode), uint64(st.Mtim.Nano()), uint64(ctime), st.Dev} {
			binary.LittleEndian.PutUint64(buf[i*8:], v)
		}
		h.Write(buf[:])
		return &st, nil
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		f, err := os.Open(dir)
		if err != nil {
			return err
		}
		defer f.Close()
		var names []string
		for {
			batch, err := f.Readdirnames(64)
			names = append(names, batch...)
			if n+len(names) > keepMaxEntries {
				return errTooMany
			}
			if errors.Is(err, io.EOF) || (err == nil && len(batch) == 0) {
				break
			}
			if err != nil {
				return err
			}
		}
		slices.Sort(names)
		for _, name := range names {
			p := filepath.Join(dir, name)
			st, err := add(p)
			if err != nil {
				return err
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := walk(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if _, err := add(w.dir); err != nil {
		return fingerprint{}
	}
	if err := walk(w.dir); err != nil {
		return fingerprint{}
	}
	var fp fingerprint
	copy(fp.sum[:], h.Sum(nil))
	fp.ok = true
	return fp
}

// errTooMany: the workspace has more entries than are fingerprinted.
var errTooMany = errors.New("too many entries to fingerprint")

// errRacy: an entry changed too recently to be fingerprinted.
var errRacy = errors.New("changed within the racy window")

// keeper holds one session's parked view, or the workspace's spare.
type keeper struct {
	w        *Workspace
	spare    bool // the workspace's: parks only views whose writers are gone
	mu       sync.Mutex
	parked   *overlayView
	released bool
}

// NewKeeper returns a keeper for one session's calls; it implements
// sandpit.KeepingWorkspace. Release it when the session ends.
func (w *Workspace) NewKeeper() sandpit.ViewKeeper { return &keeper{w: w} }

// Open is Workspace.Open for the session's next call.
func (k *keeper) Open(ctx context.Context, runID string) (sandpit.View, error) {
	return k.w.open(ctx, runID, k)
}

// Release unmounts the parked view; views closed later are released, not
// kept.
func (k *keeper) Release() {
	k.mu.Lock()
	p := k.parked
	k.parked, k.released = nil, true
	k.mu.Unlock()
	if p != nil {
		k.w.releaseParked(p)
	}
}

// drop releases the parked view, if any, without checking it.
func (k *keeper) drop() {
	k.mu.Lock()
	p := k.parked
	k.parked = nil
	k.mu.Unlock()
	if p != nil {
		k.w.releaseParked(p)
	}
}

// park keeps v mounted if it can be reused: the keeper is open, v was
// fingerprinted, its run changed nothing, and, for the spare, its writers
// are gone. The caller holds the runs lock (Close).
func (k *keeper) park(v *overlayView) bool {
	if k.spare && !v.gone.Load() || !v.fp.ok || !isEmptyDirOK(v.m.upper) {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.released {
		return false
	}
	if old := k.parked; old != nil && old != v { // cannot happen: calls come one at a time
		defer k.w.releaseParked(old)
	}
	k.parked = v
	return true
}

// reuse returns the parked view for run runID if it is still
// indistinguishable from a fresh one — its upper dir empty, and fp, the
// workspace now, the fingerprint it was mounted with — releasing it
// otherwise. The caller holds the runs lock (open).
func (k *keeper) reuse(runID string, fp fingerprint) *overlayView {
	k.mu.Lock()
	p := k.parked
	k.parked = nil
	k.mu.Unlock()
	if p == nil {
		return nil
	}
	if fp.ok && fp.sum == p.fp.sum && isEmptyDirOK(p.m.upper) {
		return &overlayView{w: k.w, runID: runID, m: p.m, k: k, fp: p.fp}
	}
	k.w.releaseParked(p)
	return nil
}

// releaseParked unmounts a parked view; it was never changed, so there is
// nothing to merge.
func (w *Workspace) releaseParked(v *overlayView) {
	if err := v.m.release(); err != nil {
		w.log.Warn("kept session view not fully released; Sweep removes it at next start", "run", v.runID, "err", err)
	}
}

func isEmptyDirOK(dir string) bool {
	empty, err := isEmptyDir(dir)
	return err == nil && empty
}
