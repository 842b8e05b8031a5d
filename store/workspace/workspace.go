package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
)

// Owner is a host uid/gid.
type Owner struct{ UID, GID uint32 }

// DefaultOwner is the sandbox user when no user namespace is used.
var DefaultOwner = Owner{UID: sandpit.SandboxUID, GID: sandpit.SandboxGID}

// Options configure a workspace. The zero value of every field but StateDir
// picks a sensible default.
type Options struct {
	// StateDir holds per-run directories (<StateDir>/runs/<runID>). Without it
	// runs bind the workspace directly (no quota, no atomic write-back).
	StateDir string
	// Sandbox is the host uid/gid the sandbox user appears as (its user
	// namespace's mapping); nil: DefaultOwner, or the current user when
	// not root. A pointer: 0:0 is a real answer (rootless, where the
	// sandbox user is the user running sandpit, root of rootlesskit's
	// namespace).
	Sandbox *Owner
	// Owner is who owns the workspace's files on the host: every file and
	// directory sandpit (or a run) writes into it is given to Owner. Zero:
	// the workspace directory's owner when Open is called. Runs still see
	// the files as the sandbox user's, through an idmapped lower layer;
	// where the kernel cannot do that (or without per-run overlays), Owner
	// becomes Sandbox, as runs could not write the files otherwise, and
	// Open says so in the log.
	Owner Owner
	// LockDir, when set, holds the host-wide locks (flock) through which
	// every process that opens this workspace serialises its writes, merges
	// and restores: two servers, or a server and `sandpit run`, on one
	// workspace. Empty: the locks are this process's only.
	LockDir string
	// Quota bounds the bytes a single run may write (its changes, not the
	// whole workspace): the run gets ENOSPC beyond it. Default 1 GiB.
	Quota int64
	// MaxFiles bounds the files and directories one run brings back into
	// the workspace; the rest is dropped and reported. Default 20000. The
	// run's tmpfs has MaxFiles inodes plus one per entry of the workspace
	// (and some slack), because overlay whiteouts take inodes too: a run
	// can delete everything the workspace holds.
	MaxFiles int64
	// MaxRunBytes bounds what one run's merge writes to the host, by
	// apparent size (a sparse file counts its holes). Default Quota.
	MaxRunBytes int64
	// MaxSize bounds the whole workspace (sum of apparent file sizes):
	// write_file is refused past it, and a run's files that would exceed
	// it are dropped and reported. Default 4 × Quota.
	MaxSize int64
	// MaxWorkspaceFiles bounds the entries of the whole workspace, the same
	// way. Default 100000.
	MaxWorkspaceFiles int64
	// MergeTimeout bounds the copy of one run's changes into the workspace
	// (the first phase of Close): past it, none are applied. Default 30 s.
	MergeTimeout  time.Duration
	MaxReadBytes  int64 // largest single read; default 1 MiB
	MaxWriteBytes int64 // largest single write; default 16 MiB
	MaxEntries    int   // largest listing; default 5000
	// RequireOverlay refuses to open when per-run overlays cannot be mounted
	// (not root), instead of falling back to a direct bind without quota.
	RequireOverlay bool
	// BeforeRun is called when a run's view is opened, before the run can
	// change anything; sandpit records the undo state there. If it fails,
	// Open fails with ErrNoUndoState (the cause is logged): a run never
	// goes without its undo state, so undo never reverts two runs.
	BeforeRun func(ctx context.Context, w *Workspace, runID string) error
	Logger    *slog.Logger
}

func (o *Options) defaults() {
	if o.Sandbox == nil {
		s := DefaultOwner
		if os.Geteuid() != 0 { // files are ours whatever we ask
			s = Owner{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
		}
		o.Sandbox = &s
	}
	if os.Geteuid() != 0 {
		o.Owner = Owner{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	}
	if o.Quota <= 0 {
		o.Quota = 1 << 30
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = 20000
	}
	if o.MaxRunBytes <= 0 {
		o.MaxRunBytes = o.Quota
	}
	if o.MaxSize <= 0 {
		o.MaxSize = 4 * o.Quota
	}
	if o.MaxWorkspaceFiles <= 0 {
		o.MaxWorkspaceFiles = 100000
	}
	if o.MergeTimeout <= 0 {
		o.MergeTimeout = 30 * time.Second
	}
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = 1 << 20
	}
	if o.MaxWriteBytes <= 0 {
		o.MaxWriteBytes = 16 << 20
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 5000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Workspace is one directory of agent files. All methods are safe for
// concurrent use.
type Workspace struct {
	dir     string
	opts    Options
	overlay bool
	idmap   *idmap // nil: files belong to the sandbox user on the host too
	log     *slog.Logger
	// data and runsHost extend mu and runs to every process on the host
	// that opens this workspace (Options.LockDir).
	data, runsHost *hostLock

	// runs is held shared by every open run view and exclusively by Replace:
	// a restore never happens while a run may write.
	runs sync.RWMutex
	// mu is held shared by readers and exclusively by anything that changes
	// more than one file at once (merges, restores) or a single path
	// (write, delete, move), so readers never see a half-applied change.
	mu sync.RWMutex
	// used and count cache the workspace's size (apparent bytes of its
	// regular files) and its number of entries, sandpit's own temporary
	// names excluded; used is -1 when they are unknown (after a delete, a
	// move, a restore or a direct-bind run). Guarded by mu, exclusive.
	used, count int64

	// spare keeps the view of a run that changed nothing for the next run
	// (keep.go); Close releases it.
	spare *keeper
}

// inodeSlack is what a run's tmpfs allows beyond MaxFiles and the
// workspace's entries: overlay's own directories, entries the workspace
// gained after the count.
const inodeSlack = 1024

// Open opens (creating it if needed) the workspace at dir. It finishes or
// rolls back an interrupted Replace and decides whether runs get an overlay
// with a quota or, when mounting is impossible, a direct bind.
func Open(dir string, opts Options) (_ *Workspace, err error) {
	opts.defaults()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("workspace %s: %w", abs, err)
	}
	if fi, err := os.Lstat(abs); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("workspace %s is not a directory (is it a symlink?)", abs)
	}
	w := &Workspace{dir: abs, opts: opts, log: opts.Logger.With("workspace", abs), used: -1}
	w.spare = &keeper{w: w, spare: true}
	if w.data, w.runsHost, err = openHostLocks(opts.LockDir, abs, w.log); err != nil {
		return nil, fmt.Errorf("workspace %s: host locks: %w", abs, err)
	}
	defer func() {
		// A failed Open leaves no lock file behind (unless another
		// process holds it).
		if err != nil {
			w.data.close()
			w.runsHost.close()
		}
	}()
	if w.opts.Owner == (Owner{}) {
		var st unix.Stat_t
		if err := unix.Stat(abs, &st); err != nil {
			return nil, err
		}
		w.opts.Owner = Owner{UID: st.Uid, GID: st.Gid}
	}
	// Leftovers of a killed process: only when no other process has the
	// workspace open for a run (its merge stages look the same).
	if w.runsHost.tryLock() {
		var err error
		if w.data.tryLock() { // nor writes a file
			err = w.removeLeftovers()
			w.data.unlock()
		}
		w.runsHost.unlock()
		if err != nil {
			return nil, err
		}
	} else {
		w.log.Info("another sandpit process uses this workspace; its temporary entries are left alone")
	}
	w.overlay, err = w.probeOverlay()
	if err != nil {
		if opts.RequireOverlay {
			return nil, sandpit.WithHint(fmt.Errorf("workspace %s: %w: %w", abs, ErrNoOverlay, err), "run as root, or drop the requirement")
		}
		w.log.Warn("runs bind the workspace directly: no per-run quota, changes are visible while the run writes", "reason", err)
	}
	if w.opts.Owner != *w.opts.Sandbox {
		if !w.overlay {
			err = errors.New("runs bind the workspace directly")
		} else {
			err = w.setupIDMap()
		}
		if err != nil {
			// Runs must be able to write the files: they become the
			// sandbox user's, as before idmapped layers.
			w.log.Warn("workspace files will belong to the sandbox's host uid, not to the workspace's owner",
				"owner", w.opts.Owner, "sandbox", *w.opts.Sandbox, "reason", err)
			w.opts.Owner = *w.opts.Sandbox
		}
	}
	if w.idmap == nil {
		if err := w.chown(abs); err != nil {
			return nil, fmt.Errorf("workspace %s: give it to the sandbox user %d:%d: %w", abs, w.opts.Owner.UID, w.opts.Owner.GID, err)
		}
	}
	return w, nil
}

// removeLeftovers finishes what a killed process left: an interrupted
// Replace's stage, merge stages and temporary files.
func (w *Workspace) removeLeftovers() error {
	// A stage left by a killed Replace holds either the unfinished new tree
	// (before the exchange) or the old one (after it): the workspace itself is
	// complete in both cases, so dropping the stage completes the recovery.
	if _, err := os.Lstat(w.stagePath()); err == nil {
		w.log.Warn("removing the stage of an interrupted restore", "stage", w.stagePath())
		if err := os.RemoveAll(w.stagePath()); err != nil {
			return fmt.Errorf("workspace %s: remove interrupted restore: %w", w.dir, err)
		}
	}
	// Staging directories of interrupted merges (a crash before their
	// apply left the workspace as it was) and temporary files of
	// interrupted writes.
	if ents, err := os.ReadDir(w.dir); err == nil {
		for _, e := range ents {
			if isReserved(e.Name()) {
				w.log.Warn("removing a leftover temporary entry", "name", e.Name())
				if err := os.RemoveAll(filepath.Join(w.dir, e.Name())); err != nil {
					return fmt.Errorf("workspace %s: remove %s: %w", w.dir, e.Name(), err)
				}
			}
		}
	}
	return nil
}

// Dir is the workspace's host directory.
func (w *Workspace) Dir() string { return w.dir }

// ID identifies the workspace in shared stores (its absolute path).
func (w *Workspace) ID() string { return w.dir }

// Owner is the owner every file in the workspace gets.
func (w *Workspace) Owner() Owner { return w.opts.Owner }

// setupIDMap prepares idmapped lower layers (owner's files shown as the
// sandbox user's) and checks the kernel takes them under an overlay.
func (w *Workspace) setupIDMap() error {
	m, err := newIDMap(w.opts.Owner, *w.opts.Sandbox)
	if err != nil {
		return err
	}
	probe, err := os.MkdirTemp(w.runsDir(), ".probe-idmap-")
	if err != nil {
		m.close()
		return err
	}
	defer os.Remove(probe)
	w.idmap = m
	rm, err := mountRun(probe, w, 1<<20, 16)
	if err != nil {
		w.idmap = nil
		m.close()
		return err
	}
	return rm.release()
}

// Isolated reports whether runs get a per-run overlay with a quota.
func (w *Workspace) Isolated() bool { return w.overlay }

func (w *Workspace) stagePath() string {
	return filepath.Join(filepath.Dir(w.dir), "."+filepath.Base(w.dir)+".sandpit-stage")
}

func (w *Workspace) chown(p string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	return os.Lchown(p, int(w.opts.Owner.UID), int(w.opts.Owner.GID))
}

func (w *Workspace) rootChown(r *os.Root, rel string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	return r.Lchown(rel, int(w.opts.Owner.UID), int(w.opts.Owner.GID))
}

// Entry describes one file or directory.
type Entry struct {
	Path    string      `json:"path"`
	Type    string      `json:"type"` // file, dir, symlink, fifo, socket, device
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"-"`
	ModTime time.Time   `json:"mtime"`
}

func entryOf(rel string, fi fs.FileInfo) Entry {
	return Entry{Path: rel, Type: typeName(fi.Mode()), Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime()}
}

func typeName(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "other"
}

// Listing is the result of List.
type Listing struct {
	Entries   []Entry
	Truncated bool // more entries exist than MaxEntries
}

// List lists the directory at p (or describes p if it is not a directory).
// Symlinks are listed, never followed.
func (w *Workspace) List(ctx context.Context, p string, recursive bool) (Listing, error) {
	const op = "list"
	var out Listing
	err := w.withRoot(false, func(r *os.Root) error {
		c, err := w.check(r, op, p, true)
		if err != nil {
			return err
		}
		fi, err := r.Lstat(c)
		if err != nil {
			return mapErr(op, p, err)
		}
		if !fi.IsDir() {
			out.Entries = []Entry{entryOf(c, fi)}
			return nil
		}
		return fs.WalkDir(r.FS(), c, func(q string, d fs.DirEntry, err error) error {
			if err != nil {
				if q == c {
					return mapErr(op, p, err)
				}
				return nil // vanished or unreadable: leave it out
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if q == c {
				return nil
			}
			if isReserved(d.Name()) { // sandpit's own, in flight
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if len(out.Entries) >= w.opts.MaxEntries {
				out.Truncated = true
				return fs.SkipAll
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			out.Entries = append(out.Entries, entryOf(q, info))
			if d.IsDir() && !recursive {
				return fs.SkipDir
			}
			return nil
		})
	})
	return out, err
}

// Content is a byte range of a file.
type Content struct {
	Path   string
	Data   []byte
	Offset int64
	Size   int64 // whole file
	EOF    bool  // Data reaches the end of the file
}

// Read reads up to limit bytes (0: MaxReadBytes; larger limits are clamped)
// at offset. It refuses FIFOs, sockets, devices, symlinks and hard links
// without opening them for reading, so it never blocks.
func (w *Workspace) Read(ctx context.Context, p string, offset, limit int64) (Content, error) {
	const op = "read"
	if offset < 0 || limit < 0 {
		return Content{}, pathErr(op, p, ErrInvalidPath, "offset and limit must not be negative")
	}
	if limit == 0 || limit > w.opts.MaxReadBytes {
		limit = w.opts.MaxReadBytes
	}
	var out Content
	err := w.withRoot(false, func(r *os.Root) error {
		c, err := w.check(r, op, p, true)
		if err != nil {
			return err
		}
		f, fi, err := openRegular(r, op, p, c)
		if err != nil {
			return err
		}
		defer f.Close()
		size := fi.Size()
		if offset > size {
			offset = size
		}
		n := min(limit, size-offset)
		buf := make([]byte, n)
		got, err := f.ReadAt(buf, offset)
		if err != nil && !errors.Is(err, io.EOF) {
			return mapErr(op, p, err)
		}
		out = Content{Path: c, Data: buf[:got], Offset: offset, Size: size, EOF: offset+int64(got) >= size}
		return nil
	})
	return out, err
}

// openRegular opens the regular file c for reading and refuses anything else
// (checked with Lstat first, so a FIFO is never opened; O_NONBLOCK in case it
// was swapped in between; re-checked on the open descriptor).
func openRegular(r *os.Root, op, p, c string) (*os.File, fs.FileInfo, error) {
	fi, err := r.Lstat(c)
	if err != nil {
		return nil, nil, mapErr(op, p, err)
	}
	if err := regularOnly(op, p, fi); err != nil {
		return nil, nil, err
	}
	f, err := r.OpenFile(c, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, mapErr(op, p, err)
	}
	fi2, err := f.Stat()
	if err == nil {
		err = regularOnly(op, p, fi2)
	}
	if err == nil && !os.SameFile(fi, fi2) {
		err = pathErr(op, p, ErrNotRegular, "the file changed while it was opened; try again")
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi2, nil
}

func regularOnly(op, p string, fi fs.FileInfo) error {
	m := fi.Mode()
	switch {
	case m&fs.ModeSymlink != 0:
		return pathErr(op, p, ErrOutsideWorkspace, "it is a symlink, which may point outside the workspace; sandpit does not follow symlinks")
	case m.IsDir():
		return pathErr(op, p, ErrIsDir, "it is a directory: list it instead")
	case !m.IsRegular():
		return pathErr(op, p, ErrNotRegular, "it is a %s; only regular files can be read or written", typeName(m))
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		return pathErr(op, p, ErrOutsideWorkspace, "it is a hard link (%d names), which may share its content with a file outside the workspace; copy its content to a new file first", st.Nlink)
	}
	return nil
}

// Write replaces (or creates) the file at p with data, atomically: readers
// see the old content or the new, never a mix. Parent directories are
// created. The file keeps its mode if it existed (else 0644).
func (w *Workspace) Write(ctx context.Context, p string, data []byte) (Entry, error) {
	const op = "write"
	if int64(len(data)) > w.opts.MaxWriteBytes {
		return Entry{}, pathErr(op, p, ErrTooLarge, "%d bytes, at most %d per write; split the file, or have a program generate it", len(data), w.opts.MaxWriteBytes)
	}
	if strings.HasSuffix(p, "/") || strings.HasSuffix(p, "/.") || p == "." {
		return Entry{}, pathErr(op, p, ErrIsDir, "a path ending in / names a directory; give a file name (directories are created for the files in them)")
	}
	var out Entry
	err := w.withRoot(true, func(r *os.Root) error {
		c, err := w.check(r, op, p, false)
		if err != nil {
			return err
		}
		if c == "." {
			return pathErr(op, p, ErrIsDir, "give a file name")
		}
		mode := fs.FileMode(0o644)
		var old int64
		isNew := true
		if fi, err := r.Lstat(c); err == nil {
			switch {
			case fi.IsDir():
				return pathErr(op, p, ErrIsDir, "a directory has this name")
			case fi.Mode().IsRegular():
				mode, old, isNew = fi.Mode().Perm(), fi.Size(), false
			}
		}
		if w.used < 0 {
			if err := w.recountIn(r); err != nil {
				return err
			}
		}
		if w.used-old+int64(len(data)) > w.opts.MaxSize {
			return pathErr(op, p, ErrQuota, "the workspace holds %d bytes and may hold %d; delete files first", w.used, w.opts.MaxSize)
		}
		if isNew && w.count+1 > w.opts.MaxWorkspaceFiles {
			return pathErr(op, p, ErrQuota, "the workspace holds %d files and directories and may hold %d; delete some first", w.count, w.opts.MaxWorkspaceFiles)
		}
		made, err := w.mkdirs(r, op, p, path.Dir(c))
		w.count += made
		if err != nil {
			return err
		}
		if err := w.writeAtomic(r, c, mode, time.Time{}, func(f *os.File) error {
			_, err := f.Write(data)
			return err
		}); err != nil {
			return mapErr(op, p, err)
		}
		w.used += int64(len(data)) - old
		if isNew {
			w.count++
		}
		fi, err := r.Lstat(c)
		if err != nil {
			return mapErr(op, p, err)
		}
		out = entryOf(c, fi)
		return nil
	})
	return out, err
}

// writeAtomic writes a temporary file beside c, gives it to the owner, and
// renames it over c.
func (w *Workspace) writeAtomic(r *os.Root, c string, mode fs.FileMode, mtime time.Time, fill func(*os.File) error) error {
	tmp := path.Join(path.Dir(c), ".sandpit-tmp-"+randomName())
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil && os.Geteuid() == 0 {
		err = f.Chown(int(w.opts.Owner.UID), int(w.opts.Owner.GID))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && !mtime.IsZero() {
		err = r.Chtimes(tmp, mtime, mtime)
	}
	if err == nil {
		err = r.Rename(tmp, c)
	}
	if err != nil {
		r.Remove(tmp)
	}
	return err
}

// mkdirs creates dir and its missing parents, owned by the owner, and says
// how many it created.
func (w *Workspace) mkdirs(r *os.Root, op, p, dir string) (int64, error) {
	if dir == "." {
		return 0, nil
	}
	var made int64
	parts := strings.Split(dir, "/")
	for i := range parts {
		q := strings.Join(parts[:i+1], "/")
		fi, err := r.Lstat(q)
		switch {
		case err == nil && fi.IsDir():
			continue
		case err == nil:
			return made, pathErr(op, p, ErrNotDir, "%q is a %s, not a directory", q, typeName(fi.Mode()))
		case !errors.Is(err, fs.ErrNotExist):
			return made, mapErr(op, p, err)
		}
		if err := r.Mkdir(q, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return made, mapErr(op, p, err)
		}
		made++
		if err := w.rootChown(r, q); err != nil {
			return made, mapErr(op, p, err)
		}
	}
	return made, nil
}

// Delete removes the file or directory (recursively) at p. A symlink is
// removed itself, never followed.
func (w *Workspace) Delete(ctx context.Context, p string) error {
	const op = "delete"
	return w.withRoot(true, func(r *os.Root) error {
		c, err := w.check(r, op, p, false)
		if err != nil {
			return err
		}
		if c == "." {
			return pathErr(op, p, ErrInvalidPath, "the workspace root cannot be deleted; delete the files in it")
		}
		if _, err := r.Lstat(c); err != nil {
			return mapErr(op, p, err)
		}
		w.used = -1
		return mapErr(op, p, r.RemoveAll(c))
	})
}

// Move renames from to to, creating to's parent directories. An existing
// regular file at to is replaced; any other existing target is refused.
func (w *Workspace) Move(ctx context.Context, from, to string) error {
	const op = "move"
	return w.withRoot(true, func(r *os.Root) error {
		cf, err := w.check(r, op, from, false)
		if err != nil {
			return err
		}
		ct, err := w.check(r, op, to, false)
		if err != nil {
			return err
		}
		if cf == "." || ct == "." {
			return pathErr(op, from, ErrInvalidPath, "the workspace root cannot be moved")
		}
		src, err := r.Lstat(cf)
		if err != nil {
			return mapErr(op, from, err)
		}
		if dst, err := r.Lstat(ct); err == nil && !(dst.Mode().IsRegular() && src.Mode().IsRegular()) {
			return pathErr(op, to, ErrExists, "a %s already has this name; delete it first", typeName(dst.Mode()))
		}
		if ct == cf || strings.HasPrefix(ct, cf+"/") {
			return pathErr(op, to, ErrInvalidPath, "cannot move a directory into itself")
		}
		w.used = -1
		if _, err := w.mkdirs(r, op, to, path.Dir(ct)); err != nil {
			return err
		}
		return mapErr(op, from, r.Rename(cf, ct))
	})
}

// Resolve returns the host path of p. At the time of the call the result is
// inside the workspace root and neither it nor any parent is a symlink; p
// need not exist.
func (w *Workspace) Resolve(p string) (string, error) {
	var out string
	err := w.withRoot(false, func(r *os.Root) error {
		c, err := w.check(r, "resolve", p, true)
		if err != nil {
			return err
		}
		out = filepath.Join(w.dir, filepath.FromSlash(c))
		return nil
	})
	return out, err
}

// Scan calls fn with the workspace root while no merge or restore can run.
// fn must not modify the workspace.
func (w *Workspace) Scan(ctx context.Context, fn func(r *os.Root) error) error {
	return w.withRoot(false, fn)
}

func (w *Workspace) withRoot(exclusive bool, fn func(r *os.Root) error) error {
	if exclusive {
		w.lock()
		defer w.unlock()

	} else {
		w.rlock()
		defer w.runlock()
	}
	r, err := os.OpenRoot(w.dir)
	if err != nil {
		return fmt.Errorf("open workspace %s: %w", w.dir, err)
	}
	defer r.Close()
	return fn(r)
}

// check cleans p and refuses it if a parent (or, with final, p itself) is a
// symlink. os.Root would refuse an escape anyway; this turns any symlink into
// a clear ErrOutsideWorkspace instead of following links that stay inside.
func (w *Workspace) check(r *os.Root, op, p string, final bool) (string, error) {
	c, err := Clean(p)
	if err != nil {
		var pe *PathError
		if errors.As(err, &pe) {
			pe.Op = op
		}
		return "", err
	}
	if c == "." {
		return c, nil
	}
	parts := strings.Split(c, "/")
	for _, name := range parts {
		if isReserved(name) {
			return "", pathErr(op, p, ErrInvalidPath, "names starting with %q are reserved for sandpit's temporary files; choose another name", reservedPrefix)
		}
	}
	n := len(parts)
	if !final {
		n--
	}
	for i := 0; i < n; i++ {
		q := strings.Join(parts[:i+1], "/")
		fi, err := r.Lstat(q)
		if errors.Is(err, fs.ErrNotExist) {
			return c, nil
		}
		if err != nil {
			return "", mapErr(op, p, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", pathErr(op, p, ErrOutsideWorkspace, "%q is a symlink, which may point outside the workspace; sandpit does not follow symlinks", q)
		}
		if i < len(parts)-1 && !fi.IsDir() {
			return "", pathErr(op, p, ErrNotDir, "%q is a %s, not a directory", q, typeName(fi.Mode()))
		}
	}
	return c, nil
}

// mapErr turns an OS error into a PathError with a sentinel class.
func mapErr(op, p string, err error) error {
	var pe *PathError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe):
		return err
	case errors.Is(err, fs.ErrNotExist):
		return pathErr(op, p, ErrNotFound, "list the directory to see what exists")
	case errors.Is(err, fs.ErrExist):
		return pathErr(op, p, ErrExists, "")
	case errors.Is(err, syscall.ELOOP), strings.Contains(err.Error(), "path escapes"):
		return pathErr(op, p, ErrOutsideWorkspace, "it goes through a symlink; sandpit does not follow symlinks")
	case errors.Is(err, syscall.EISDIR):
		return pathErr(op, p, ErrIsDir, "")
	case errors.Is(err, syscall.ENOTDIR):
		return pathErr(op, p, ErrNotDir, "a parent is not a directory")
	case errors.Is(err, syscall.ENAMETOOLONG):
		return pathErr(op, p, ErrInvalidPath, "name too long")
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return pathErr(op, p, ErrQuota, "the disk is full")
	}
	return &PathError{Op: op, Path: p, Err: err}
}

// usage is the total size of the regular files under r and the number of
// entries, sandpit's temporary names excluded.
func usage(r *os.Root) (bytes, entries int64, err error) {
	err = fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return nil
		}
		if isReserved(d.Name()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		entries++
		if !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			bytes += fi.Size()
		}
		return nil
	})
	return bytes, entries, err
}

// recountIn measures the workspace into the cache. mu must be held
// exclusively.
func (w *Workspace) recountIn(r *os.Root) error {
	b, n, err := usage(r)
	if err != nil {
		w.used = -1
		return err
	}
	w.used, w.count = b, n
	return nil
}

// recount is recountIn on a root of its own.
func (w *Workspace) recount() error {
	r, err := os.OpenRoot(w.dir)
	if err != nil {
		return err
	}
	defer r.Close()
	return w.recountIn(r)
}

// entries is the number of entries the workspace holds, from the cache when
// it is known.
func (w *Workspace) entries() (int64, error) {
	w.lock()
	defer w.unlock()
	if w.used < 0 {
		if err := w.recount(); err != nil {
			return 0, err
		}
	}
	return w.count, nil
}

func randomName() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Replace swaps the workspace for a new tree, atomically: build fills stage
// (an empty directory beside the workspace, on the same filesystem) while
// cur is the current tree, then the two directories are exchanged with one
// renameat2(RENAME_EXCHANGE). A crash at any point leaves the workspace
// either entirely old or entirely new; Open removes the leftover stage.
// Replace fails with ErrBusy while a run is open.
//
// after, when not nil, is called with the new tree once the old one is gone,
// still under the exclusive lock (e.g. to record stats no writer can change).
func (w *Workspace) Replace(ctx context.Context, build func(stage string, cur *os.Root) error, after func(r *os.Root) error) error {
	if !w.runs.TryLock() {
		return fmt.Errorf("restore: %w (wait for it to finish, then try again)", ErrBusy)
	}
	defer w.runs.Unlock()
	if !w.runsHost.tryLock() {
		return fmt.Errorf("restore: %w in another sandpit process (wait for it to finish, then try again)", ErrBusy)
	}
	defer w.runsHost.unlock()
	w.lock()
	defer w.unlock()
	w.used = -1

	stage := w.stagePath()
	if err := os.RemoveAll(stage); err != nil {
		return err
	}
	if err := os.Mkdir(stage, 0o700); err != nil {
		return err
	}
	cur, err := os.OpenRoot(w.dir)
	if err != nil {
		return err
	}
	err = build(stage, cur)
	cur.Close()
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = w.prepareStage(stage)
	}
	if err == nil {
		err = unix.Renameat2(unix.AT_FDCWD, stage, unix.AT_FDCWD, w.dir, unix.RENAME_EXCHANGE)
		if err != nil {
			err = fmt.Errorf("exchange %s with %s: %w", stage, w.dir, err)
		}
	}
	if err == nil {
		syncDir(filepath.Dir(w.dir))
	}
	// Before the exchange the stage holds the unused new tree, after it the
	// old one: either way it goes, before the lock is released, because files
	// a build hard-linked from the old tree have two links until then (and
	// reads refuse hard links).
	if rerr := os.RemoveAll(stage); rerr != nil {
		w.log.Warn("could not remove the restore stage; it is removed at next start", "stage", stage, "err", rerr)
	}
	if err == nil && after != nil {
		r, err := os.OpenRoot(w.dir)
		if err != nil {
			return err
		}
		defer r.Close()
		return after(r)
	}
	return err
}

// prepareStage gives the stage the workspace root's mode and owner and makes
// its content durable before it becomes the workspace.
func (w *Workspace) prepareStage(stage string) error {
	fi, err := os.Stat(w.dir)
	if err != nil {
		return err
	}
	if err := os.Chmod(stage, fi.Mode().Perm()); err != nil {
		return err
	}
	if err := w.chown(stage); err != nil {
		return err
	}
	f, err := os.Open(stage)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		f.Sync()
		f.Close()
	}
}
