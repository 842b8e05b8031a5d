package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
)

var _ sandpit.KeepingWorkspace = (*Workspace)(nil)

var validRunID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

func (w *Workspace) runsDir() string { return filepath.Join(w.opts.StateDir, "runs") }

// probeOverlay mounts and unmounts a tiny tmpfs and overlay to learn whether
// per-run views are possible here.
func (w *Workspace) probeOverlay() (bool, error) {
	if w.opts.StateDir == "" {
		return false, errors.New("no state directory configured")
	}
	if os.Geteuid() != 0 {
		return false, errors.New("mounting needs root")
	}
	if strings.ContainsAny(w.dir, ",:\\") {
		return false, fmt.Errorf("the workspace path %q contains ',', ':' or '\\', which overlay options cannot carry", w.dir)
	}
	if err := os.MkdirAll(w.runsDir(), 0o700); err != nil {
		return false, err
	}
	probe, err := os.MkdirTemp(w.runsDir(), ".probe-")
	if err != nil {
		return false, err
	}
	defer os.Remove(probe)
	m, err := mountRun(probe, w, 1<<20, 16)
	if err != nil {
		return false, err
	}
	return true, m.release()
}

// Open prepares run runID's view of the workspace; it implements
// sandpit.Workspace. Until the view is closed, Replace (restore, undo)
// waits for it.
func (w *Workspace) Open(ctx context.Context, runID string) (sandpit.View, error) {
	return w.open(ctx, runID, w.spare)
}

// Close releases the view kept for the next run (keep.go); views closed
// afterwards are released, not kept. It also removes the workspace's host
// lock files if no process holds them (a later lock makes them again).
// Call it once no run will start.
func (w *Workspace) Close() {
	w.spare.Release()
	w.data.release()
	w.runsHost.release()
}

// open is Open for a run, or for a call of a session whose views k keeps.
func (w *Workspace) open(ctx context.Context, runID string, k *keeper) (sandpit.View, error) {
	if !validRunID.MatchString(runID) {
		return nil, fmt.Errorf("workspace view: invalid run id %q", runID)
	}
	w.runs.RLock()
	w.runsHost.rlock()
	var (
		fp      fingerprint
		entries int64 = -1
	)
	if k != nil && w.overlay {
		var err error
		if entries, err = w.entries(); err != nil {
			w.runsUnlock()
			return nil, fmt.Errorf("workspace view for run %s: %w", runID, err)
		}
		if entries <= keepMaxEntries {
			// Taken before the undo record and the mount: whatever
			// changes after it, the next check mismatches.
			fp = w.fingerprint()
			if v := k.reuse(runID, fp); v != nil {
				// The workspace is exactly as it was before the kept
				// view's own undo record, which is still the newest (any
				// change, an undo's restore included, changes the
				// fingerprint): recording it again would change nothing.
				return v, nil
			}
		} else {
			k.drop()
		}
	}
	if w.opts.BeforeRun != nil {
		if err := w.opts.BeforeRun(ctx, w, runID); err != nil {
			w.runsUnlock()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("workspace view: %w", ctx.Err())
			}
			// The cause may name host paths: it goes to the log only.
			w.log.Warn("no undo state could be recorded: the run does not start", "run", runID, "err", err)
			return nil, sandpit.WithHint(ErrNoUndoState, "try again; if it keeps failing, the server's disk may be full (the server log has the cause)")
		}
	}
	if !w.overlay {
		v, err := w.openBind()
		if err != nil {
			w.runsUnlock()
		}
		return v, err
	}
	// Overlay whiteouts take tmpfs inodes: the run may create MaxFiles
	// entries and also delete everything the workspace holds.
	if entries < 0 {
		var err error
		if entries, err = w.entries(); err != nil {
			w.runsUnlock()
			return nil, fmt.Errorf("workspace view for run %s: %w", runID, err)
		}
	}
	dir := filepath.Join(w.runsDir(), runID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		w.runsUnlock()
		return nil, fmt.Errorf("workspace view for run %s: %w", runID, err)
	}
	m, err := mountRun(dir, w, w.opts.Quota, w.opts.MaxFiles+entries+inodeSlack)
	if err != nil {
		os.Remove(dir)
		w.runsUnlock()
		return nil, fmt.Errorf("workspace view for run %s: %w", runID, err)
	}
	return &overlayView{w: w, runID: runID, m: m, k: k, fp: fp}, nil
}

// runMount is one run's tmpfs (size = quota) holding upper and work dirs, and
// the overlay of the workspace mounted on merged.
type runMount struct {
	dir, tmpfs, upper, merged string
}

func mountRun(dir string, w *Workspace, size, inodes int64) (*runMount, error) {
	m := &runMount{
		dir:    dir,
		tmpfs:  filepath.Join(dir, "changes"),
		upper:  filepath.Join(dir, "changes", "upper"),
		merged: filepath.Join(dir, "merged"),
	}
	lower, owner := w.dir, *w.opts.Sandbox
	if w.idmap != nil {
		// The overlay clones its layers' mounts: the idmapped bind can go
		// as soon as the overlay is mounted.
		lower = filepath.Join(dir, "lower")
		if err := os.Mkdir(lower, 0o700); err != nil {
			return nil, err
		}
		defer func() {
			unix.Unmount(lower, unix.MNT_DETACH)
			os.Remove(lower)
		}()
		if err := w.idmap.bind(w.dir, lower); err != nil {
			m.release()
			return nil, err
		}
	}
	for _, d := range []string{m.tmpfs, m.merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			m.release()
			return nil, err
		}
	}
	if err := unix.Mount("tmpfs", m.tmpfs, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700", size, inodes)); err != nil {
		m.release()
		return nil, fmt.Errorf("mount tmpfs for the run's changes: %w", err)
	}
	work := filepath.Join(m.tmpfs, "work")
	fi, err := os.Stat(lower)
	if err == nil {
		err = os.Mkdir(m.upper, fi.Mode().Perm())
	}
	if err == nil {
		err = os.Chmod(m.upper, fi.Mode().Perm()) // umask
	}
	if err == nil && os.Geteuid() == 0 {
		err = os.Chown(m.upper, int(owner.UID), int(owner.GID))
	}
	if err == nil {
		err = os.Mkdir(work, 0o700)
	}
	if err == nil {
		// redirect_dir and metacopy off: every change in upper is a whole
		// file or a whiteout, which is all merge understands.
		err = unix.Mount("overlay", m.merged, "overlay", unix.MS_NOSUID|unix.MS_NODEV,
			fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,metacopy=off,index=off", lower, m.upper, work))
		if err != nil {
			err = fmt.Errorf("mount the run's overlay: %w", err)
		}
	}
	if err != nil {
		m.release()
		return nil, err
	}
	return m, nil
}

// release unmounts and removes the run directory. It only ever rmdirs
// (never removes recursively), so a mount that failed to go away cannot
// lead it into the workspace.
func (m *runMount) release() error {
	var errs []error
	// lower is the idmapped bind mountRun makes and removes once the
	// overlay is mounted: only a server killed in between leaves it.
	lower := filepath.Join(m.dir, "lower")
	for _, d := range []string{m.merged, m.tmpfs, lower} {
		if err := unmountAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range []string{m.merged, m.tmpfs, lower, m.dir} {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func unmountAll(p string) error {
	for range 8 {
		err := unix.Unmount(p, 0)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not (or no longer) a mount point
		case errors.Is(err, unix.EBUSY):
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmount %s: %w", p, err)
			}
		default:
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted", p)
}

// Sweep unmounts and removes the run directories a crashed server left
// behind. Their changes are discarded. Call it at start-up, before any run.
func (w *Workspace) Sweep(ctx context.Context) error {
	if w.opts.StateDir == "" {
		return nil
	}
	ents, err := os.ReadDir(w.runsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		dir := filepath.Join(w.runsDir(), e.Name())
		m := &runMount{dir: dir, tmpfs: filepath.Join(dir, "changes"), merged: filepath.Join(dir, "merged")}
		w.log.Info("removing a leftover run view", "dir", dir)
		if err := m.release(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

type overlayView struct {
	w     *Workspace
	runID string
	m     *runMount
	k     *keeper     // the session's keeper, if any (keep.go)
	fp    fingerprint // the workspace when m was mounted (with k only)
	gone  atomic.Bool // WritersGone: the spare may keep it

	once    sync.Once
	changes *sandpit.Changes
	err     error
}

func (v *overlayView) Dir() string { return v.m.merged }

// WritersGone tells the view that no process of its run can write through
// it any more (the run's sandbox exited, and with its init every process of
// its pid namespace). Only such a view is kept as the workspace's spare for
// the next run (keep.go); without it, Close releases the view. Call it
// before Close.
func (v *overlayView) WritersGone() { v.gone.Store(true) }

// Close unmounts the overlay, merges the run's changes into the workspace
// (see merge.go: all of them or none, the exclusive lock held only to apply
// them), and releases the mounts. Whatever goes wrong is said in the
// Changes (Discarded, Reason, Dropped), so the run's result is never lost;
// the error is always nil.
func (v *overlayView) Close(ctx context.Context) (*sandpit.Changes, error) {
	v.once.Do(func() {
		w := v.w
		defer w.runsUnlock()
		if v.k != nil && v.k.park(v) {
			// Nothing changed: the mounts stay for the session's next
			// call (keep.go).
			v.changes = noChanges()
			return
		}
		if err := unmountAll(v.m.merged); err != nil {
			w.log.Warn("run view could not be unmounted: its changes are discarded", "run", v.runID, "err", err)
			v.changes = &sandpit.Changes{Created: []string{}, Modified: []string{}, Deleted: []string{}, Discarded: true,
				Reason: "an internal error stopped the merge (the server log has the cause); none of the run's changes were applied"}
			return
		}
		if empty, _ := isEmptyDir(v.m.upper); empty {
			// The run changed nothing (most runs): no staging directory,
			// no lock, no walk. The same result as merging an empty dir.
			v.changes = noChanges()
		} else {
			v.changes = w.merge(ctx, v.runID, v.m.upper)
		}
		if err := v.m.release(); err != nil {
			w.log.Warn("run view not fully released; Sweep removes it at next start", "run", v.runID, "err", err)
		}
	})
	return v.changes, v.err
}

// bindView is the fallback without mounts: the run writes the workspace
// directly. Changes are computed by comparing stats, and entries that are not
// regular files or directories are removed when the run ends.
type bindView struct {
	w      *Workspace
	before map[string]fileID
	once   sync.Once
	ch     *sandpit.Changes
	err    error
}

type fileID struct {
	size, mtime int64
	ino         uint64
	dir         bool
}

func (w *Workspace) openBind() (*bindView, error) {
	before, err := w.statAll()
	if err != nil {
		return nil, err
	}
	return &bindView{w: w, before: before}, nil
}

// statAll records every entry of the workspace but sandpit's own
// temporary ones, by descriptor (walkAt): a run writing the workspace
// meanwhile cannot make it list a directory outside through a symlink.
func (w *Workspace) statAll() (map[string]fileID, error) {
	out := map[string]fileID{}
	err := w.walkAt(func(_ int, name, p string, st *unix.Stat_t) bool {
		if isReserved(name) {
			return false
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		out[p] = fileID{size: st.Size, mtime: st.Mtim.Nano(), ino: st.Ino, dir: isDir}
		return isDir
	})
	return out, err
}

// bindMaxDepth bounds the directories walkAt descends (and the descriptors
// it holds at once). Every component takes at least two bytes with its
// slash, so what lies deeper is past PATH_MAX, where no file tool reaches
// it either.
const bindMaxDepth = MaxPathBytes / 2

// walkAt calls fn for every entry of the workspace, depth first, with the
// descriptor of the directory that listed it, its name and its workspace
// path; fn says whether to descend into it (a directory). It acts only by
// descriptor, never by host path: each directory is opened below the
// descriptor of its parent without following symlinks, so a run that swaps
// a directory for a symlink while the walk goes on is never followed out of
// the workspace. Entries that vanish or change type meanwhile are skipped.
func (w *Workspace) walkAt(fn func(dir int, name, p string, st *unix.Stat_t) bool) error {
	root, err := unix.Open(w.dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the workspace: %w", err)
	}
	defer unix.Close(root)
	var walk func(fd int, rel string, depth int)
	walk = func(fd int, rel string, depth int) {
		names, err := readNames(fd)
		if err != nil && len(names) == 0 {
			return
		}
		for _, name := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue
			}
			p := join(rel, name)
			if !fn(fd, name, p, &st) || st.Mode&unix.S_IFMT != unix.S_IFDIR || depth >= bindMaxDepth {
				continue
			}
			child, err := openDirAt(fd, name)
			if err != nil {
				continue // swapped for something else since
			}
			walk(child, p, depth+1)
			unix.Close(child)
		}
	}
	walk(root, "", 1)
	return nil
}

func (v *bindView) Dir() string { return v.w.dir }

func (v *bindView) Close(ctx context.Context) (*sandpit.Changes, error) {
	v.once.Do(func() {
		w := v.w
		defer w.runsUnlock()
		w.lock()
		defer w.unlock()
		w.used = -1
		var c changeList
		// Drop what must never come back: symlinks, FIFOs, sockets,
		// devices, reserved names. Another run may be writing the
		// workspace meanwhile, swapping a directory for a symlink out of
		// it (review 2026-12-01, H2): each entry is removed relative to
		// the descriptor of the directory it was listed in, never by host
		// path, and a reserved directory only through descriptors too.
		w.walkAt(func(dir int, name, p string, st *unix.Stat_t) bool {
			t := st.Mode & unix.S_IFMT
			switch {
			case isReserved(name):
				removeAllAt(dir, name)
				c.drop(p+dirSuffix(t == unix.S_IFDIR), DropReserved)
				return false
			case t == unix.S_IFDIR:
				return true
			case t != unix.S_IFREG:
				// Flags 0: a directory swapped in under this name since
				// is left alone (EISDIR).
				unix.Unlinkat(dir, name, 0)
				c.drop(p, typeName(modeType(st.Mode)))
			}
			return false
		})
		after, err := w.statAll()
		if err != nil {
			v.err = err
			return
		}
		for _, p := range slices.Sorted(maps.Keys(after)) {
			a := after[p]
			b, ok := v.before[p]
			switch {
			case a.dir:
			case !ok || b.dir:
				c.created(p)
			case a != b:
				c.modified(p)
			}
		}
		for _, p := range slices.Sorted(maps.Keys(v.before)) {
			if _, ok := after[p]; !ok {
				c.deleted(p + dirSuffix(v.before[p].dir))
			}
		}
		v.ch = c.changes()
	})
	return v.ch, v.err
}

// noChanges is what a merge of a run that changed nothing reports.
func noChanges() *sandpit.Changes { return (&changeList{}).changes() }

// isEmptyDir reports whether dir holds no entries (an overlay's upper dir
// of a run that wrote, created and deleted nothing).
func isEmptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0 && err == nil, err
}
