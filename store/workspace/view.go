package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
)

var _ sandpit.Workspace = (*Workspace)(nil)

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
	m, err := mountRun(probe, w.dir, 1<<20, 16, w.opts.Owner)
	if err != nil {
		return false, err
	}
	return true, m.release()
}

// Open prepares run runID's view of the workspace; it implements
// sandpit.Workspace. Until the view is closed, Replace (restore, undo)
// waits for it.
func (w *Workspace) Open(ctx context.Context, runID string) (sandpit.View, error) {
	if !validRunID.MatchString(runID) {
		return nil, fmt.Errorf("workspace view: invalid run id %q", runID)
	}
	w.runs.RLock()
	if w.opts.BeforeRun != nil {
		if err := w.opts.BeforeRun(ctx, w, runID); err != nil {
			w.log.Warn("no undo state for this run", "run", runID, "err", err)
		}
	}
	if !w.overlay {
		v, err := w.openBind()
		if err != nil {
			w.runs.RUnlock()
		}
		return v, err
	}
	dir := filepath.Join(w.runsDir(), runID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		w.runs.RUnlock()
		return nil, fmt.Errorf("workspace view for run %s: %w", runID, err)
	}
	m, err := mountRun(dir, w.dir, w.opts.Quota, w.opts.MaxFiles, w.opts.Owner)
	if err != nil {
		os.Remove(dir)
		w.runs.RUnlock()
		return nil, fmt.Errorf("workspace view for run %s: %w", runID, err)
	}
	return &overlayView{w: w, runID: runID, m: m}, nil
}

// runMount is one run's tmpfs (size = quota) holding upper and work dirs, and
// the overlay of the workspace mounted on merged.
type runMount struct {
	dir, tmpfs, upper, merged string
}

func mountRun(dir, lower string, size, inodes int64, owner Owner) (*runMount, error) {
	m := &runMount{
		dir:    dir,
		tmpfs:  filepath.Join(dir, "changes"),
		upper:  filepath.Join(dir, "changes", "upper"),
		merged: filepath.Join(dir, "merged"),
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
	for _, d := range []string{m.merged, m.tmpfs} {
		if err := unmountAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range []string{m.merged, m.tmpfs, m.dir} {
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

	once    sync.Once
	changes *sandpit.Changes
	err     error
}

func (v *overlayView) Dir() string { return v.m.merged }

// Close unmounts the overlay, merges the run's changes into the workspace
// under the exclusive lock, and releases the mounts.
func (v *overlayView) Close(ctx context.Context) (*sandpit.Changes, error) {
	v.once.Do(func() {
		w := v.w
		defer w.runs.RUnlock()
		if err := unmountAll(v.m.merged); err != nil {
			v.err = fmt.Errorf("run %s: changes discarded: %w", v.runID, err)
			return
		}
		w.mu.Lock()
		w.used = -1
		v.changes, v.err = w.merge(ctx, v.m.upper)
		w.mu.Unlock()
		if err := v.m.release(); err != nil {
			w.log.Warn("run view not fully released; Sweep removes it at next start", "run", v.runID, "err", err)
		}
	})
	return v.changes, v.err
}

// merger applies an overlay upper dir to the workspace.
type merger struct {
	w       *Workspace
	r       *os.Root
	upper   string
	ch      sandpit.Changes
	hidden  map[string]bool // files under opaque dirs, deleted before their dir was refilled
	skipped []string
}

func (w *Workspace) merge(ctx context.Context, upper string) (*sandpit.Changes, error) {
	r, err := os.OpenRoot(w.dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	m := &merger{w: w, r: r, upper: upper, hidden: map[string]bool{}}
	err = m.dir(ctx, ".")
	for p := range m.hidden {
		m.ch.Deleted = append(m.ch.Deleted, p)
	}
	if len(m.skipped) > 0 {
		w.log.Info("run created entries that are not regular files or directories; they were dropped", "paths", m.skipped)
	}
	for _, l := range [][]string{m.ch.Created, m.ch.Modified, m.ch.Deleted} {
		slices.Sort(l)
	}
	return &m.ch, err
}

func (m *merger) dir(ctx context.Context, rel string) error {
	ents, err := os.ReadDir(filepath.Join(m.upper, rel))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := path.Join(rel, e.Name())
		info, err := e.Info()
		if err != nil {
			return err
		}
		if err := m.entry(ctx, p, info); err != nil {
			return fmt.Errorf("merge %s: %w", p, err)
		}
	}
	return nil
}

func (m *merger) entry(ctx context.Context, p string, info fs.FileInfo) error {
	cur, err := m.r.Lstat(p)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	mode := info.Mode()
	switch {
	case isWhiteout(info):
		if exists {
			if err := m.r.RemoveAll(p); err != nil {
				return err
			}
			m.deleted(p, cur)
		}
	case mode.IsDir():
		if exists && !cur.IsDir() {
			if err := m.r.RemoveAll(p); err != nil {
				return err
			}
			m.deleted(p, cur)
			exists = false
		}
		if exists && isOpaque(filepath.Join(m.upper, p)) {
			if err := m.clear(p); err != nil {
				return err
			}
		}
		if !exists {
			if err := m.r.Mkdir(p, 0o700); err != nil {
				return err
			}
		}
		if err := m.dir(ctx, p); err != nil {
			return err
		}
		if err := m.r.Chmod(p, mode.Perm()); err != nil {
			return err
		}
		if err := m.w.rootChown(m.r, p); err != nil {
			return err
		}
		return m.r.Chtimes(p, info.ModTime(), info.ModTime())
	case mode.IsRegular():
		if exists && cur.IsDir() {
			if err := m.r.RemoveAll(p); err != nil {
				return err
			}
			m.deleted(p, cur)
			exists = false
		}
		src, err := os.OpenFile(filepath.Join(m.upper, p), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer src.Close()
		if err := m.w.writeAtomic(m.r, p, mode.Perm(), info.ModTime(), func(f *os.File) error {
			_, err := io.Copy(f, src)
			return err
		}); err != nil {
			return err
		}
		switch {
		case exists || m.hidden[p]:
			delete(m.hidden, p)
			m.ch.Modified = append(m.ch.Modified, p)
		default:
			m.ch.Created = append(m.ch.Created, p)
		}
	default:
		// A symlink, FIFO, socket or device: never brought back. Whatever the
		// run replaced with it is gone in its view, so it goes here too.
		m.skipped = append(m.skipped, p)
		if exists {
			if err := m.r.RemoveAll(p); err != nil {
				return err
			}
			m.deleted(p, cur)
		}
	}
	return nil
}

func (m *merger) deleted(p string, fi fs.FileInfo) {
	if fi.IsDir() {
		p += "/"
	}
	m.ch.Deleted = append(m.ch.Deleted, p)
}

// clear empties a directory that the run made opaque (removed and
// recreated): the run saw none of its old entries. Old regular files are
// remembered so that refilled ones count as modified, not created.
func (m *merger) clear(dir string) error {
	ents, err := fs.ReadDir(m.r.FS(), dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := path.Join(dir, e.Name())
		fs.WalkDir(m.r.FS(), p, func(q string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				m.hidden[q] = true
			}
			return nil
		})
		if err := m.r.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

func isWhiteout(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0
}

func isOpaque(p string) bool {
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(p, "trusted.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
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

func (w *Workspace) statAll() (map[string]fileID, error) {
	out := map[string]fileID{}
	err := filepath.WalkDir(w.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == w.dir {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(w.dir, p)
		st, _ := fi.Sys().(*syscall.Stat_t)
		id := fileID{size: fi.Size(), mtime: fi.ModTime().UnixNano(), dir: fi.IsDir()}
		if st != nil {
			id.ino = st.Ino
		}
		out[filepath.ToSlash(rel)] = id
		return nil
	})
	return out, err
}

func (v *bindView) Dir() string { return v.w.dir }

func (v *bindView) Close(ctx context.Context) (*sandpit.Changes, error) {
	v.once.Do(func() {
		w := v.w
		defer w.runs.RUnlock()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.used = -1
		// Drop what must never come back: symlinks, FIFOs, sockets, devices.
		var drop []string
		filepath.WalkDir(w.dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !d.Type().IsRegular() {
				drop = append(drop, p)
			}
			return nil
		})
		for _, p := range drop {
			os.Remove(p)
		}
		after, err := w.statAll()
		if err != nil {
			v.err = err
			return
		}
		ch := &sandpit.Changes{}
		for p, a := range after {
			b, ok := v.before[p]
			switch {
			case a.dir:
			case !ok || b.dir:
				ch.Created = append(ch.Created, p)
			case a != b:
				ch.Modified = append(ch.Modified, p)
			}
		}
		for p, b := range v.before {
			if _, ok := after[p]; !ok {
				if b.dir {
					p += "/"
				}
				ch.Deleted = append(ch.Deleted, p)
			}
		}
		for _, l := range [][]string{ch.Created, ch.Modified, ch.Deleted} {
			slices.Sort(l)
		}
		v.ch = ch
	})
	return v.ch, v.err
}
