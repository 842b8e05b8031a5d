package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/sparse"
)

// A run's changes come back in two phases, so that a merge that is cut
// short leaves the workspace as it was, and the workspace lock is held only
// for work bounded by counts, never by bytes:
//
//  1. stage (no workspace lock; bounded by MergeTimeout and the context):
//     walk the upper dir with a descriptor per directory (never a host path,
//     so depth is no problem), check every entry against the bounds, and
//     copy each regular file that passes, sparse-aware, into a staging
//     directory inside the workspace (.sandpit-tmp-merge-<run>), with its
//     mode, owner and mtime. If this phase fails or runs out of time, the
//     staging directory is removed and the workspace is unchanged.
//  2. apply (exclusive lock; metadata only, at most MaxFiles renames plus
//     the deletions the run made): first every deletion (whiteouts, opaque
//     directories, type changes), then directories and renames from the
//     staging directory, charging each file against MaxSize and
//     MaxWorkspaceFiles, then directory modes and mtimes.

// Drop reasons: why a path the run made did not come back.
const (
	DropReserved       = "reserved_name"         // a .sandpit-tmp- name
	DropTooDeep        = "too_deep"              // deeper than MaxDepth
	DropPathTooLong    = "path_too_long"         // longer than MaxPathBytes
	DropTooManyFiles   = "too_many_files"        // past MaxFiles for one run
	DropRunBytes       = "run_bytes_limit"       // past MaxRunBytes (apparent size) for one run
	DropWorkspaceSize  = "workspace_size_limit"  // the workspace would exceed MaxSize
	DropWorkspaceFiles = "workspace_files_limit" // the workspace would exceed MaxWorkspaceFiles
	DropError          = "error"                 // could not be read or applied (logged)
	// Symlinks, FIFOs, sockets and devices are dropped with their type
	// name ("symlink", "fifo", "socket", "device"); what they replaced is
	// deleted.
)

// reservedPrefix starts the names of sandpit's own temporary files and
// directories. File tools refuse such names and merges drop them, so a user
// file can never be mistaken for one (snapshots skip them, restores remove
// them).
const reservedPrefix = ".sandpit-tmp-"

func isReserved(name string) bool { return strings.HasPrefix(name, reservedPrefix) }

type kind uint8

const (
	kFile     kind = iota + 1
	kDir           // a directory: created if missing, then its entries
	kWhiteout      // the run deleted what had this name
	kOther         // a symlink, FIFO, socket or device: dropped, and what it replaced deleted
)

type oldKind uint8

const (
	oldNone oldKind = iota
	oldFile
	oldDir
)

// node is one entry of the upper dir that the merge applies. Nodes are in
// depth-first order, each directory's entries sorted by name right after it
// and before its next sibling, so a directory's subtree is nodes[i+1:end].
type node struct {
	name    string
	end     int32 // index past this node's subtree
	kind    kind
	opaque  bool // dir: the run saw none of the old content at this path
	mode    fs.FileMode
	mtime   unix.Timespec
	size    int64 // file: apparent size
	staged  bool  // file: copied into the staging dir as strconv.Itoa(index)
	overCap bool  // dir: seen past MaxFiles; applied only if the workspace has it
	old     oldKind
	oldSize int64
	wasFile bool // an opaque parent's clear removed a regular file of this name
}

type merger struct {
	w     *Workspace
	runID string
	nodes []node
	ch    changeList

	root, stage int // descriptors of the workspace root and the staging dir
	stageName   string

	runFiles int64 // entries staged (files and directories)
	runBytes int64 // apparent bytes staged

	used, count int64 // the workspace's size and entries during apply

	reasons map[string]int // drop reasons, for the log
	errs    int
	first   error // the first per-entry error, for the log
}

// merge brings the run's upper dir into the workspace. It never returns a
// partial merge on failure: a failure before the apply phase leaves the
// workspace unchanged and says why in Changes.Reason. Errors it logs carry
// paths relative to the workspace only.
func (w *Workspace) merge(ctx context.Context, runID, upper string) *sandpit.Changes {
	start := time.Now()
	m := &merger{w: w, runID: runID, root: -1, stage: -1, reasons: map[string]int{}}
	ch := m.run(ctx, upper)
	ch.MergeMS = time.Since(start).Milliseconds()
	return ch
}

func (m *merger) run(ctx context.Context, upper string) *sandpit.Changes {
	w := m.w
	ctx, cancel := context.WithTimeout(ctx, w.opts.MergeTimeout)
	defer cancel()
	var err error
	m.root, err = unix.Open(w.dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return m.discard("internal", fmt.Errorf("open the workspace: %w", err))
	}
	defer unix.Close(m.root)
	up, err := unix.Open(upper, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return m.discard("internal", fmt.Errorf("open the run's changes: %w", err))
	}
	defer unix.Close(up)

	m.stageName = reservedPrefix + "merge-" + m.runID
	if err := unix.Mkdirat(m.root, m.stageName, 0o700); err != nil {
		return m.discard("internal", fmt.Errorf("make the staging directory: %w", err))
	}
	defer m.removeStage()
	if m.stage, err = openDirAt(m.root, m.stageName); err != nil {
		return m.discard("internal", fmt.Errorf("open the staging directory: %w", err))
	}

	if err := m.walk(ctx, up, "", 1, false); err != nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
			return m.discard(fmt.Sprintf("copying the run's changes took longer than %s, the merge's bound; none were applied", w.opts.MergeTimeout), err)
		case ctx.Err() != nil:
			return m.discard("the merge was cancelled; none of the run's changes were applied", err)
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
			return m.discard("the server's disk is full; none of the run's changes were applied", err)
		}
		return m.discard("internal", err)
	}

	w.lock()
	defer w.unlock()
	if w.used < 0 {
		if err := w.recount(); err != nil {
			return m.discard("internal", fmt.Errorf("measure the workspace: %w", err))
		}
	}
	m.used, m.count = w.used, w.count
	m.deletions(m.root, "", 0, int32(len(m.nodes)), false)
	m.creations(m.root, "", 0, int32(len(m.nodes)))
	w.used, w.count = m.used, m.count
	m.log()
	return m.ch.changes()
}

// discard reports that nothing was applied. reason "internal" hides err's
// detail from the model (it is logged).
func (m *merger) discard(reason string, err error) *sandpit.Changes {
	m.w.log.Warn("run changes discarded", "run", m.runID, "reason", reason, "err", err)
	if reason == "internal" {
		reason = "an internal error stopped the merge (the server log has the cause); none of the run's changes were applied"
	}
	return &sandpit.Changes{Created: []string{}, Modified: []string{}, Deleted: []string{}, Discarded: true, Reason: reason}
}

func (m *merger) removeStage() {
	if m.stage >= 0 {
		unix.Close(m.stage)
	}
	if _, _, err := removeAllAt(m.root, m.stageName); err != nil {
		m.w.log.Warn("could not remove a merge's staging directory; it is removed at the next start", "name", m.stageName, "err", err)
	}
}

func (m *merger) drop(p, reason string) {
	m.ch.drop(p, reason)
	m.reasons[reason]++
}

func (m *merger) fail(p string, err error) {
	m.drop(p, DropError)
	m.errs++
	if m.first == nil {
		m.first = fmt.Errorf("%s: %w", p, errnoOf(err))
	}
}

func (m *merger) log() {
	if len(m.reasons) == 0 {
		return
	}
	args := []any{"run", m.runID}
	for _, r := range slices.Sorted(mapsKeys(m.reasons)) {
		args = append(args, r, m.reasons[r])
	}
	if m.first != nil {
		args = append(args, "errors", m.errs, "first_error", m.first)
	}
	m.w.log.Info("run entries not brought back into the workspace", args...)
}

func mapsKeys(m map[string]int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// errnoOf strips an error to its errno, so that no host path leaks.
func errnoOf(err error) error {
	var en unix.Errno
	if errors.As(err, &en) {
		return en
	}
	return err
}

// walk stages the entries of the upper directory fd, whose workspace path
// is rel ("" for the root) at depth depth. It returns only errors that
// abandon the whole merge: the context, or a write to the host failing.
func (m *merger) walk(ctx context.Context, fd int, rel string, depth int, opaque bool) error {
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("read the run's changes at %q: %w", rel, errnoOf(err))
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			m.fail(p, err)
			continue
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		whiteout := st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
		switch {
		case isReserved(name):
			if !whiteout {
				m.drop(p+dirSuffix(isDir), DropReserved)
			}
			continue
		case whiteout:
			m.nodes = append(m.nodes, node{name: name, kind: kWhiteout, end: int32(len(m.nodes) + 1)})
			continue
		case len(p) > MaxPathBytes:
			m.drop(shorten(p)+dirSuffix(isDir), DropPathTooLong)
			continue
		case depth > MaxDepth:
			m.drop(p+dirSuffix(isDir), DropTooDeep)
			continue
		}
		mode := fs.FileMode(st.Mode & 0o7777 &^ (unix.S_ISUID | unix.S_ISGID | unix.S_ISVTX))
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			// Past MaxFiles a directory is still walked: it may be one the
			// workspace has (copied up), holding the run's deletions. Only
			// if it is new is it dropped, at apply.
			overCap := m.runFiles >= m.w.opts.MaxFiles
			if !overCap {
				m.runFiles++
			}
			i := len(m.nodes)
			m.nodes = append(m.nodes, node{name: name, kind: kDir, mode: mode.Perm(), mtime: st.Mtim, overCap: overCap})
			child, err := openDirAt(fd, name)
			if err != nil {
				m.fail(p+"/", err)
				m.nodes = m.nodes[:i]
				continue
			}
			m.nodes[i].opaque = opaque || isOpaque(child)
			err = m.walk(ctx, child, p, depth+1, m.nodes[i].opaque)
			unix.Close(child)
			if err != nil {
				return err
			}
			m.nodes[i].end = int32(len(m.nodes))
		case unix.S_IFREG:
			if m.runFiles >= m.w.opts.MaxFiles {
				m.drop(p, DropTooManyFiles)
				continue
			}
			if m.runBytes+st.Size > m.w.opts.MaxRunBytes {
				m.drop(p, DropRunBytes)
				continue
			}
			i := len(m.nodes)
			n := node{name: name, kind: kFile, mode: mode, mtime: st.Mtim, size: st.Size, end: int32(i + 1)}
			if err := m.stageFile(ctx, fd, name, i, &st); err != nil {
				var host hostError
				if errors.As(err, &host) || ctx.Err() != nil {
					return err
				}
				m.fail(p, err)
				continue
			}
			n.staged = true
			m.nodes = append(m.nodes, n)
			m.runFiles++
			m.runBytes += st.Size
		default:
			// Never brought back. Whatever the run replaced with it is gone
			// in its view, so it goes here too.
			m.drop(p, typeName(fs.FileMode(0)|modeType(st.Mode)))
			m.nodes = append(m.nodes, node{name: name, kind: kOther, end: int32(len(m.nodes) + 1)})
		}
	}
	return nil
}

// hostError is a failure to write the workspace's disk: it abandons the
// merge (writing the rest would fail the same way, or half-apply it).
type hostError struct{ err error }

func (e hostError) Error() string { return e.err.Error() }
func (e hostError) Unwrap() error { return e.err }

// stageFile copies the regular file name of the upper dir fd into the
// staging directory as strconv.Itoa(i), sparse-aware, with the owner, mode
// and mtime it will have in the workspace.
func (m *merger) stageFile(ctx context.Context, fd int, name string, i int, st *unix.Stat_t) error {
	sfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(sfd), "upper")
	defer src.Close()
	var st2 unix.Stat_t
	if err := unix.Fstat(sfd, &st2); err != nil {
		return err
	}
	if st2.Ino != st.Ino || st2.Dev != st.Dev || st2.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("the entry changed while it was merged")
	}
	staged := strconv.Itoa(i)
	dfd, err := unix.Openat(m.stage, staged, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return hostError{err}
	}
	dst := os.NewFile(uintptr(dfd), "stage")
	_, err = sparse.Copy(ctx, dst, src, st.Size, nil)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Path == "stage" || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			err = hostError{err} // the write side failed
		}
	}
	if err == nil {
		err = m.finish(dst, st)
	}
	if cerr := dst.Close(); err == nil && cerr != nil {
		err = hostError{cerr}
	}
	if err == nil {
		ts := []unix.Timespec{st.Atim, st.Mtim}
		if err = unix.UtimesNanoAt(m.stage, staged, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			err = hostError{err}
		}
	}
	return err
}

func (m *merger) finish(f *os.File, st *unix.Stat_t) error {
	mode := fs.FileMode(st.Mode & 0o777)
	if err := f.Chmod(mode); err != nil {
		return hostError{err}
	}
	if os.Geteuid() == 0 {
		if err := f.Chown(int(m.w.opts.Owner.UID), int(m.w.opts.Owner.GID)); err != nil {
			return hostError{err}
		}
	}
	return nil
}

// deletions applies, below the workspace directory fd (path rel), every
// deletion among nodes[from:to] (the entries of one upper directory): what
// the run deleted (whiteouts), what it replaced with another type, and, in
// an opaque directory, whatever the run did not see. fd < 0: the directory
// is not in the workspace (nothing to delete there).
func (m *merger) deletions(fd int, rel string, from, to int32, opaque bool) {
	if fd < 0 {
		return
	}
	if opaque {
		m.clearOpaque(fd, rel, from, to)
	}
	for i := from; i < to; i = m.nodes[i].end {
		n := &m.nodes[i]
		p := join(rel, n.name)
		var st unix.Stat_t
		err := unix.Fstatat(fd, n.name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			m.fail(p, err)
			continue
		}
		t := st.Mode & unix.S_IFMT
		switch {
		case n.kind == kWhiteout || n.kind == kOther,
			n.kind == kFile && t != unix.S_IFREG,
			n.kind == kDir && t != unix.S_IFDIR:
			m.remove(fd, n.name, p, t == unix.S_IFDIR)
		case n.kind == kFile:
			n.old, n.oldSize = oldFile, st.Size
		case n.kind == kDir:
			n.old = oldDir
			child, err := openDirAt(fd, n.name)
			if err != nil {
				m.fail(p+"/", err)
				continue
			}
			m.deletions(child, p, i+1, n.end, n.opaque)
			unix.Close(child)
		}
	}
}

// clearOpaque removes the entries of the workspace directory fd that the
// run did not see (it removed and recreated the directory). Directories the
// run recreated are cleared in turn by deletions; regular files it
// rewrote are reported as modified, not deleted and created.
func (m *merger) clearOpaque(fd int, rel string, from, to int32) {
	names, err := readNames(fd)
	if err != nil {
		m.fail(rel+"/", err)
		return
	}
	upper := map[string]int32{}
	for i := from; i < to; i = m.nodes[i].end {
		upper[m.nodes[i].name] = i
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		t := st.Mode & unix.S_IFMT
		i, ok := upper[name]
		switch {
		case ok && m.nodes[i].kind == kDir && t == unix.S_IFDIR:
			continue // deletions clears it: the node is opaque too
		case isReserved(name):
			removeAllAt(fd, name)
			continue
		case ok && m.nodes[i].kind == kFile && t == unix.S_IFREG:
			b, e, err := removeAllAt(fd, name)
			m.used, m.count = m.used-b, m.count-e
			if err != nil {
				m.fail(join(rel, name), err)
			}
			m.nodes[i].wasFile = true
			continue
		}
		m.remove(fd, name, join(rel, name), t == unix.S_IFDIR)
	}
}

func (m *merger) remove(fd int, name, p string, dir bool) {
	b, e, err := removeAllAt(fd, name)
	m.used, m.count = m.used-b, m.count-e
	if err != nil {
		m.fail(p+dirSuffix(dir), err)
		return
	}
	m.ch.deleted(p + dirSuffix(dir))
}

// creations creates directories and moves staged files into place for
// nodes[from:to] below the workspace directory fd (path rel), charging each
// against MaxSize and MaxWorkspaceFiles; then it gives directories their
// mode, owner and mtime (after their entries, which change the mtime).
func (m *merger) creations(fd int, rel string, from, to int32) {
	o := m.w.opts
	for i := from; i < to; i = m.nodes[i].end {
		n := &m.nodes[i]
		p := join(rel, n.name)
		switch n.kind {
		case kFile:
			delta, added := n.size, int64(1)
			if n.old == oldFile {
				delta, added = n.size-n.oldSize, 0
			}
			reason := ""
			switch {
			case delta > 0 && m.used+delta > o.MaxSize:
				reason = DropWorkspaceSize
			case added > 0 && m.count+added > o.MaxWorkspaceFiles:
				reason = DropWorkspaceFiles
			}
			if reason != "" {
				m.drop(p, reason)
				if n.wasFile { // the old version went with its opaque directory
					m.ch.deleted(p)
				}
				continue
			}
			if err := unix.Renameat(m.stage, strconv.Itoa(int(i)), fd, n.name); err != nil {
				m.fail(p, err)
				continue
			}
			m.used, m.count = m.used+delta, m.count+added
			m.ch.bytes += n.size
			if n.old == oldFile || n.wasFile {
				m.ch.modified(p)
			} else {
				m.ch.created(p)
			}
		case kDir:
			if n.old != oldDir {
				if n.overCap {
					m.drop(p+"/", DropTooManyFiles)
					continue
				}
				if m.count+1 > o.MaxWorkspaceFiles {
					m.drop(p+"/", DropWorkspaceFiles)
					continue
				}
				if err := unix.Mkdirat(fd, n.name, 0o700); err != nil {
					m.fail(p+"/", err)
					continue
				}
				m.count++
			}
			child, err := openDirAt(fd, n.name)
			if err != nil {
				m.fail(p+"/", err)
				continue
			}
			m.creations(child, p, i+1, n.end)
			err = unix.Fchmod(child, uint32(n.mode))
			if err == nil && os.Geteuid() == 0 {
				err = unix.Fchown(child, int(o.Owner.UID), int(o.Owner.GID))
			}
			unix.Close(child)
			if err == nil {
				err = unix.UtimesNanoAt(fd, n.name, []unix.Timespec{n.mtime, n.mtime}, unix.AT_SYMLINK_NOFOLLOW)
			}
			if err != nil {
				m.fail(p+"/", err)
			}
		}
	}
}

// openDirAt opens the directory name below fd, never following a symlink.
func openDirAt(fd int, name string) (int, error) {
	return unix.Openat(fd, name, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// readNames lists the directory fd, sorted. fd stays open (and is read to
// its end).
func readNames(fd int) ([]string, error) {
	d, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(d), "")
	defer f.Close()
	if _, err := f.Seek(0, 0); err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

// removeAllAt removes name below the directory fd and everything under it,
// without following symlinks, and returns the apparent bytes of the regular
// files and the number of entries removed. A missing name is no error.
func removeAllAt(fd int, name string) (bytes, entries int64, err error) {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return 0, 0, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			bytes = st.Size
		}
		return bytes, 1, nil
	}
	child, err := openDirAt(fd, name)
	if err != nil {
		return 0, 0, err
	}
	names, err := readNames(child)
	for _, n := range names {
		b, e, rerr := removeAllAt(child, n)
		bytes, entries = bytes+b, entries+e
		if rerr != nil && err == nil {
			err = rerr
		}
	}
	unix.Close(child)
	if err != nil {
		return bytes, entries, err
	}
	if err := unix.Unlinkat(fd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return bytes, entries, err
	}
	return bytes, entries + 1, nil
}

func isOpaque(fd int) bool {
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(fd, "trusted.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

func modeType(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return fs.ModeIrregular
}

func join(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

func dirSuffix(dir bool) string {
	if dir {
		return "/"
	}
	return ""
}

// shorten keeps the start of a path too long to show whole.
func shorten(p string) string {
	const keep = 256
	if len(p) <= keep {
		return p
	}
	return strings.ToValidUTF8(p[:keep], "") + "…"
}
