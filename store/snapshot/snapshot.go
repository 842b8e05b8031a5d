// Package snapshot records and restores whole workspaces.
//
// File content is stored once per distinct SHA-256 in a content-addressed
// blob store on disk (blobs/sha256/ab/abcdef…, each written to a temporary
// file and renamed, all synced before the index refers to them), and an SQLite index records every snapshot's
// files: path, size, mode, mtime and hash. Ten snapshots of a 1 GB workspace
// that differ in one file cost one extra blob.
//
// Guarantees:
//   - Restore makes the workspace exactly equal to the snapshot (extra files
//     deleted, changed ones rewritten, missing ones recreated, modes and
//     mtimes restored), atomically: the new tree is built beside the
//     workspace and swapped in with one RENAME_EXCHANGE (workspace.Replace),
//     so a crash leaves the old state or the new one, never a mix. It never
//     runs while a run's view is open.
//   - Garbage collection never frees a blob that a snapshot references or
//     that a concurrent Create is about to reference: Create and Restore hold
//     the collector's lock shared, the collector holds it exclusively.
//   - Only regular files and directories are recorded; symlinks, FIFOs,
//     sockets and devices are not part of any snapshot, so a restore removes
//     them and never creates one.
//
// Undo: BeforeRun (the workspace's hook) records the state before every run
// as a hidden snapshot. A stat cache (size, mtime, ctime, inode per path)
// means only files changed since the last record are read and hashed, and a
// state equal to the previous one is not recorded again. UndoLastRun
// restores the newest such state; at most MaxUndo are kept.
//
// One Store serves one server process: the collector's lock is in memory.
package snapshot

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/mattn/go-sqlite3" // database/sql driver "sqlite3"
	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/sparse"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// reservedPrefix starts the names of sandpit's own temporary files and
// directories in a workspace (workspace refuses it for user files).
const reservedPrefix = ".sandpit-tmp-"

var (
	ErrNotFound = sandpit.Define(sandpit.ErrNotFound, "unknown snapshot")
	ErrNoUndo   = sandpit.Define(sandpit.ErrNotFound, "no run to undo")
)

// DefaultMaxUndo is how many pre-run states are kept per workspace.
const DefaultMaxUndo = 10

// Store is a blob store and its index.
type Store struct {
	db      *sql.DB
	blobs   blobs
	maxUndo int
	log     *slog.Logger
	gc      sync.RWMutex

	afterUndoRestore func() // tests: runs between an undo's restore and its row's removal
}

// Options configure a Store.
type Options struct {
	MaxUndo int // pre-run states kept per workspace; default DefaultMaxUndo
	Logger  *slog.Logger
}

// Snapshot describes one recorded state.
type Snapshot struct {
	ID          string    `json:"snapshot_id"`
	Description string    `json:"description"`
	Created     time.Time `json:"created"`
	Files       int       `json:"files"`
	Bytes       int64     `json:"bytes"`
}

// Diff is what changed between a snapshot and the workspace now. Directory
// paths end in "/".
type Diff struct {
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	Changed []string `json:"changed"`
}

// Open opens (creating it) the store in dir.
func Open(dir string, opts Options) (*Store, error) {
	if opts.MaxUndo <= 0 {
		opts.MaxUndo = DefaultMaxUndo
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Join(dir, "blobs"), 0o700); err != nil {
		return nil, fmt.Errorf("snapshot store %s: %w", dir, err)
	}
	dsn := "file:" + filepath.Join(dir, "index.db") + "?_journal_mode=WAL&_synchronous=NORMAL&_busy_timeout=10000&_foreign_keys=on&_txlock=immediate"
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, blobs: blobs{dir: filepath.Join(dir, "blobs")}, maxUndo: opts.MaxUndo, log: opts.Logger}
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, fmt.Errorf("snapshot store %s: %w", dir, err)
	}
	// An undo interrupted by a crash gives its state back: it may not have
	// been restored.
	if _, err := db.Exec(`UPDATE snapshots SET kind = 'undo' WHERE kind = 'undo-taken'`); err != nil {
		db.Close()
		return nil, fmt.Errorf("snapshot store %s: %w", dir, err)
	}
	return s, nil
}

// Close closes the index.
func (s *Store) Close() error { return s.db.Close() }

var migrations = []string{
	`CREATE TABLE snapshots (
		seq         INTEGER PRIMARY KEY AUTOINCREMENT,
		id          TEXT NOT NULL UNIQUE,
		workspace   TEXT NOT NULL,
		kind        TEXT NOT NULL,          -- 'user' or 'undo'
		description TEXT NOT NULL,
		created_ns  INTEGER NOT NULL,
		tree        TEXT NOT NULL,          -- hash of all entries, to spot equal states
		files       INTEGER NOT NULL,
		bytes       INTEGER NOT NULL
	);
	CREATE INDEX snapshots_ws ON snapshots(workspace, kind, seq);
	CREATE TABLE entries (
		snapshot INTEGER NOT NULL REFERENCES snapshots(seq) ON DELETE CASCADE,
		path     TEXT NOT NULL,
		dir      INTEGER NOT NULL,
		size     INTEGER NOT NULL,
		mode     INTEGER NOT NULL,
		mtime_ns INTEGER NOT NULL,
		sha256   TEXT NOT NULL,             -- '' for directories
		PRIMARY KEY (snapshot, path)
	) WITHOUT ROWID;
	CREATE INDEX entries_sha ON entries(sha256);
	CREATE TABLE statcache (
		workspace TEXT NOT NULL,
		path      TEXT NOT NULL,
		size      INTEGER NOT NULL,
		mtime_ns  INTEGER NOT NULL,
		ctime_ns  INTEGER NOT NULL,
		ino       INTEGER NOT NULL,
		sha256    TEXT NOT NULL,
		PRIMARY KEY (workspace, path)
	) WITHOUT ROWID;`,
	// Which undo state holds the workspace as it was before each run: two
	// runs share one when the first changed nothing (BeforeRun keeps one
	// state for equal trees), so the description alone cannot say.
	`CREATE TABLE run_states (
		run      TEXT NOT NULL,
		snapshot INTEGER NOT NULL REFERENCES snapshots(seq) ON DELETE CASCADE,
		PRIMARY KEY (snapshot, run)
	) WITHOUT ROWID;
	CREATE INDEX run_states_run ON run_states(run);`,
}

func (s *Store) migrate() error {
	if _, err := s.db.Exec(`CREATE TABLE IF NOT EXISTS migrations (version INTEGER PRIMARY KEY, applied_ns INTEGER NOT NULL)`); err != nil {
		return err
	}
	var have int
	if err := s.db.QueryRow(`SELECT COALESCE(MAX(version), 0) FROM migrations`).Scan(&have); err != nil {
		return err
	}
	for v := have + 1; v <= len(migrations); v++ {
		tx, err := s.db.Begin()
		if err != nil {
			return err
		}
		if _, err := tx.Exec(migrations[v-1]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if _, err := tx.Exec(`INSERT INTO migrations(version, applied_ns) VALUES (?, ?)`, v, time.Now().UnixNano()); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// entry is one recorded file or directory.
type entry struct {
	Path  string
	Dir   bool
	Size  int64
	Mode  fs.FileMode // permission bits
	MTime int64       // ns
	SHA   string
}

// stat is what the cache compares to decide a file is unchanged.
type stat struct {
	Size, MTime, CTime int64
	Ino                uint64
}

type cached struct {
	stat
	SHA string
}

func statOf(fi fs.FileInfo) stat {
	st := fi.Sys().(*syscall.Stat_t)
	return stat{Size: fi.Size(), MTime: fi.ModTime().UnixNano(), CTime: st.Ctim.Nano(), Ino: st.Ino}
}

func (s *Store) loadCache(ctx context.Context, ws string) (map[string]cached, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT path, size, mtime_ns, ctime_ns, ino, sha256 FROM statcache WHERE workspace = ?`, ws)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]cached{}
	for rows.Next() {
		var p string
		var c cached
		if err := rows.Scan(&p, &c.Size, &c.MTime, &c.CTime, &c.Ino, &c.SHA); err != nil {
			return nil, err
		}
		out[p] = c
	}
	return out, rows.Err()
}

// saveCache makes the stored cache for ws equal to next, writing only the
// differences from prev.
func saveCache(ctx context.Context, tx *sql.Tx, ws string, prev, next map[string]cached) error {
	del, err := tx.PrepareContext(ctx, `DELETE FROM statcache WHERE workspace = ? AND path = ?`)
	if err != nil {
		return err
	}
	defer del.Close()
	put, err := tx.PrepareContext(ctx, `INSERT OR REPLACE INTO statcache(workspace, path, size, mtime_ns, ctime_ns, ino, sha256) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer put.Close()
	for p := range prev {
		if _, ok := next[p]; !ok {
			if _, err := del.ExecContext(ctx, ws, p); err != nil {
				return err
			}
		}
	}
	for p, c := range next {
		if old, ok := prev[p]; ok && old == c {
			continue
		}
		if _, err := put.ExecContext(ctx, ws, p, c.Size, c.MTime, c.CTime, c.Ino, c.SHA); err != nil {
			return err
		}
	}
	return nil
}

// scan walks the workspace and returns its entries, sorted by path. Files
// whose stat matches the cache are not read; the others are hashed and, with
// store, copied into the blob store.
func (s *Store) scan(ctx context.Context, ws *workspace.Workspace, prev map[string]cached, store bool) ([]entry, map[string]cached, error) {
	es, next, _, err := s.scanCount(ctx, ws, prev, store)
	return es, next, err
}

// scanCount is scan that also says how many files it had to read.
func (s *Store) scanCount(ctx context.Context, ws *workspace.Workspace, prev map[string]cached, store bool) ([]entry, map[string]cached, int, error) {
	var out []entry
	read := 0
	next := map[string]cached{}
	err := ws.Scan(ctx, func(r *os.Root) error {
		return fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if p == "." {
				return nil
			}
			if strings.HasPrefix(d.Name(), reservedPrefix) {
				// sandpit's own temporary files and staging directories
				// (the workspace refuses such names for user files).
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			e := entry{Path: p, Mode: fi.Mode().Perm(), MTime: fi.ModTime().UnixNano()}
			switch {
			case fi.IsDir():
				e.Dir = true
			case fi.Mode().IsRegular():
				st := statOf(fi)
				// A cached hash's blob exists: GC drops cache rows with the
				// blobs it frees, and cannot run while this scan holds gc.
				if c, ok := prev[p]; ok && c.stat == st {
					e.SHA = c.SHA
				} else if e.SHA, err = s.hashFile(ctx, r, p, fi, store); err != nil {
					return fmt.Errorf("snapshot %s: %w", p, err)
				} else {
					read++
				}
				e.Size = st.Size
				next[p] = cached{stat: st, SHA: e.SHA}
			default:
				return nil // never recorded: see the package comment
			}
			out = append(out, e)
			return nil
		})
	})
	return out, next, read, err
}

// hashFile hashes p (and with store, copies it into the blob store),
// sparse-aware: holes are neither read nor written.
func (s *Store) hashFile(ctx context.Context, r *os.Root, p string, fi fs.FileInfo, store bool) (string, error) {
	f, err := r.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi2, err := f.Stat(); err != nil || !os.SameFile(fi, fi2) || !fi2.Mode().IsRegular() || fi2.Size() != fi.Size() {
		return "", fmt.Errorf("file changed while it was recorded")
	}
	if store {
		return s.blobs.put(ctx, f, fi.Size())
	}
	return hash(ctx, f, fi.Size())
}

func treeHash(es []entry) string {
	h := sha256.New()
	for _, e := range es {
		fmt.Fprintf(h, "%q %t %d %o %d %s\n", e.Path, e.Dir, e.Size, e.Mode, e.MTime, e.SHA)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func newID(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Create records the workspace as a new snapshot.
func (s *Store) Create(ctx context.Context, ws *workspace.Workspace, description string) (Snapshot, error) {
	return s.create(ctx, ws, "user", description)
}

func (s *Store) create(ctx context.Context, ws *workspace.Workspace, kind, description string) (Snapshot, error) {
	s.gc.RLock()
	defer s.gc.RUnlock()
	prev, err := s.loadCache(ctx, ws.ID())
	if err != nil {
		return Snapshot{}, err
	}
	es, next, read, err := s.scanCount(ctx, ws, prev, true)
	if err != nil {
		return Snapshot{}, err
	}
	if read > 0 {
		if err := s.blobs.sync(); err != nil {
			return Snapshot{}, fmt.Errorf("sync blobs: %w", err)
		}
	}
	tree := treeHash(es)
	snap := Snapshot{Description: description, Created: time.Now()}
	for _, e := range es {
		if !e.Dir {
			snap.Files++
			snap.Bytes += e.Size
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Snapshot{}, err
	}
	defer tx.Rollback()
	if err := saveCache(ctx, tx, ws.ID(), prev, next); err != nil {
		return Snapshot{}, err
	}
	if kind == "undo" {
		// The state before this run equals the one before the last: keep one.
		var id, last string
		var created int64
		err := tx.QueryRowContext(ctx, `SELECT id, tree, created_ns FROM snapshots WHERE workspace = ? AND kind = 'undo' ORDER BY seq DESC LIMIT 1`, ws.ID()).Scan(&id, &last, &created)
		if err == nil && last == tree {
			snap.ID, snap.Created = id, time.Unix(0, created)
			return snap, tx.Commit()
		}
	}
	snap.ID = newID(map[string]string{"user": "snap-", "undo": "undo-"}[kind])
	res, err := tx.ExecContext(ctx, `INSERT INTO snapshots(id, workspace, kind, description, created_ns, tree, files, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		snap.ID, ws.ID(), kind, description, snap.Created.UnixNano(), tree, snap.Files, snap.Bytes)
	if err != nil {
		return Snapshot{}, err
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return Snapshot{}, err
	}
	ins, err := tx.PrepareContext(ctx, `INSERT INTO entries(snapshot, path, dir, size, mode, mtime_ns, sha256) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return Snapshot{}, err
	}
	defer ins.Close()
	for _, e := range es {
		if _, err := ins.ExecContext(ctx, seq, e.Path, e.Dir, e.Size, uint32(e.Mode), e.MTime, e.SHA); err != nil {
			return Snapshot{}, err
		}
	}
	return snap, tx.Commit()
}

// List returns the workspace's snapshots (not the hidden undo states), newest first.
func (s *Store) List(ctx context.Context, ws *workspace.Workspace) ([]Snapshot, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, description, created_ns, files, bytes FROM snapshots WHERE workspace = ? AND kind = 'user' ORDER BY seq DESC`, ws.ID())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Snapshot{}
	for rows.Next() {
		var sn Snapshot
		var ns int64
		if err := rows.Scan(&sn.ID, &sn.Description, &ns, &sn.Files, &sn.Bytes); err != nil {
			return nil, err
		}
		sn.Created = time.Unix(0, ns)
		out = append(out, sn)
	}
	return out, rows.Err()
}

// get finds snapshot id of ws and its entries, sorted by path.
func (s *Store) get(ctx context.Context, ws *workspace.Workspace, id string) (int64, []entry, error) {
	var seq int64
	err := s.db.QueryRowContext(ctx, `SELECT seq FROM snapshots WHERE id = ? AND workspace = ?`, id, ws.ID()).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, fmt.Errorf("snapshot %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return 0, nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT path, dir, size, mode, mtime_ns, sha256 FROM entries WHERE snapshot = ? ORDER BY path`, seq)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var es []entry
	for rows.Next() {
		var e entry
		var mode uint32
		if err := rows.Scan(&e.Path, &e.Dir, &e.Size, &mode, &e.MTime, &e.SHA); err != nil {
			return 0, nil, err
		}
		e.Mode = fs.FileMode(mode)
		es = append(es, e)
	}
	return seq, es, rows.Err()
}

// Restore makes the workspace exactly equal to snapshot id, atomically. It
// fails with workspace.ErrBusy while a run is open.
func (s *Store) Restore(ctx context.Context, ws *workspace.Workspace, id string) error {
	_, es, err := s.get(ctx, ws, id)
	if err != nil {
		return err
	}
	s.gc.RLock()
	defer s.gc.RUnlock()
	prev, err := s.loadCache(ctx, ws.ID())
	if err != nil {
		return err
	}
	next := map[string]cached{}
	err = ws.Replace(ctx, func(stage string, cur *os.Root) error {
		return s.build(ctx, ws, stage, cur, es, prev)
	}, func(r *os.Root) error {
		// Stats are final only now: removing the old tree changed the
		// ctime of every file that was hard-linked from it.
		for _, e := range es {
			if e.Dir {
				continue
			}
			fi, err := r.Lstat(e.Path)
			if err != nil {
				return err
			}
			next[e.Path] = cached{stat: statOf(fi), SHA: e.SHA}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	// The workspace is now exactly the snapshot: record the new stats so the
	// next snapshot or undo state does not re-read what was just written.
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := saveCache(ctx, tx, ws.ID(), prev, next); err != nil {
		return err
	}
	return tx.Commit()
}

// build materialises es in stage. A file whose content, mode, mtime and
// owner already match in the current workspace is hard-linked from it (the
// old tree is deleted after the swap, so links never outlive the restore);
// every other file is copied from its blob.
func (s *Store) build(ctx context.Context, ws *workspace.Workspace, stage string, cur *os.Root, es []entry, prev map[string]cached) error {
	r, err := os.OpenRoot(stage)
	if err != nil {
		return err
	}
	defer r.Close()
	owner := ws.Owner()
	chown := os.Geteuid() == 0
	for _, e := range es {
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.Dir {
			if err := r.Mkdir(e.Path, 0o700); err != nil {
				return err
			}
			continue
		}
		dst := filepath.Join(stage, filepath.FromSlash(e.Path))
		linked, err := linkSame(cur, e, dst, prev[e.Path], owner)
		if err != nil {
			return err
		}
		if !linked {
			if err := s.copyBlob(ctx, r, e, owner, chown); err != nil {
				return fmt.Errorf("restore %s: %w", e.Path, err)
			}
		}
	}
	for _, e := range slices.Backward(es) {
		if !e.Dir {
			continue
		}
		if err := r.Chmod(e.Path, e.Mode); err != nil {
			return err
		}
		if chown {
			if err := r.Lchown(e.Path, int(owner.UID), int(owner.GID)); err != nil {
				return err
			}
		}
		mt := time.Unix(0, e.MTime)
		if err := r.Chtimes(e.Path, mt, mt); err != nil {
			return err
		}
	}
	return nil
}

func linkSame(cur *os.Root, e entry, dst string, c cached, owner workspace.Owner) (bool, error) {
	fi, err := cur.Lstat(e.Path)
	if err != nil || !fi.Mode().IsRegular() {
		return false, nil
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Nlink != 1 || statOf(fi) != c.stat || c.SHA != e.SHA ||
		fi.Mode().Perm() != e.Mode || fi.ModTime().UnixNano() != e.MTime ||
		(os.Geteuid() == 0 && (st.Uid != owner.UID || st.Gid != owner.GID)) {
		return false, nil
	}
	f, err := cur.OpenFile(e.Path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, nil
	}
	defer f.Close()
	if fi2, err := f.Stat(); err != nil || !os.SameFile(fi, fi2) {
		return false, nil
	}
	// Link the open descriptor, not a path: nothing can swap it underneath.
	err = unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.AT_FDCWD, dst, unix.AT_SYMLINK_FOLLOW)
	return err == nil, nil
}

// copyBlob writes e's content from its blob, keeping the blob's holes.
func (s *Store) copyBlob(ctx context.Context, r *os.Root, e entry, owner workspace.Owner, chown bool) error {
	src, err := os.Open(s.blobs.path(e.SHA))
	if err != nil {
		return fmt.Errorf("blob %s: %w", e.SHA, err)
	}
	defer src.Close()
	f, err := r.OpenFile(e.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = sparse.Copy(ctx, f, src, e.Size, nil)
	if err == nil {
		err = f.Chmod(e.Mode)
	}
	if err == nil && chown {
		err = f.Chown(int(owner.UID), int(owner.GID))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	mt := time.Unix(0, e.MTime)
	return r.Chtimes(e.Path, mt, mt)
}

// Diff compares snapshot id with the workspace now. Changed means the
// content or the mode differs.
func (s *Store) Diff(ctx context.Context, ws *workspace.Workspace, id string) (Diff, error) {
	_, old, err := s.get(ctx, ws, id)
	if err != nil {
		return Diff{}, err
	}
	prev, err := s.loadCache(ctx, ws.ID())
	if err != nil {
		return Diff{}, err
	}
	now, _, err := s.scan(ctx, ws, prev, false)
	if err != nil {
		return Diff{}, err
	}
	d := Diff{Added: []string{}, Removed: []string{}, Changed: []string{}}
	name := func(e entry) string {
		if e.Dir {
			return e.Path + "/"
		}
		return e.Path
	}
	was := make(map[string]entry, len(old))
	for _, e := range old {
		was[e.Path] = e
	}
	for _, e := range now {
		o, ok := was[e.Path]
		delete(was, e.Path)
		switch {
		case !ok:
			d.Added = append(d.Added, name(e))
		case o.Dir != e.Dir:
			d.Removed = append(d.Removed, name(o))
			d.Added = append(d.Added, name(e))
		case !e.Dir && (o.SHA != e.SHA || o.Mode != e.Mode):
			d.Changed = append(d.Changed, e.Path)
		}
	}
	for _, o := range was {
		d.Removed = append(d.Removed, name(o))
	}
	slices.Sort(d.Added)
	slices.Sort(d.Removed)
	return d, nil
}

// Delete drops snapshot id and frees the blobs nothing references any more.
func (s *Store) Delete(ctx context.Context, ws *workspace.Workspace, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ? AND workspace = ?`, id, ws.ID())
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("snapshot %q: %w", id, ErrNotFound)
	}
	_, _, err = s.GC(ctx)
	return err
}

// GC removes every blob no snapshot references, and stale temporary files.
// It returns how many blobs it freed and their size.
func (s *Store) GC(ctx context.Context) (int, int64, error) {
	s.gc.Lock()
	defer s.gc.Unlock()
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT sha256 FROM entries WHERE sha256 != ''`)
	if err != nil {
		return 0, 0, err
	}
	live := map[string]bool{}
	for rows.Next() {
		var sum string
		if err := rows.Scan(&sum); err != nil {
			rows.Close()
			return 0, 0, err
		}
		live[sum] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	// Forget unreferenced hashes in the stat cache first: a cache hit
	// promises the blob exists.
	if _, err := s.db.ExecContext(ctx, `DELETE FROM statcache WHERE sha256 NOT IN (SELECT sha256 FROM entries)`); err != nil {
		return 0, 0, err
	}
	var n int
	var freed int64
	err = s.blobs.walk(func(sum, p string, size int64) error {
		if live[sum] {
			return nil
		}
		if err := os.Remove(p); err != nil {
			return err
		}
		n++
		freed += size
		return nil
	})
	// No Create runs now, so every temporary blob is a leftover.
	if tmps, _ := filepath.Glob(filepath.Join(s.blobs.dir, "tmp", "blob-*")); len(tmps) > 0 {
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	if n > 0 {
		s.log.Debug("snapshot blobs freed", "blobs", n, "bytes", freed)
	}
	return n, freed, err
}

// BeforeRun records the workspace's state before run runID, for
// UndoLastRun. It fits workspace.Options.BeforeRun.
func (s *Store) BeforeRun(ctx context.Context, ws *workspace.Workspace, runID string) error {
	snap, err := s.create(ctx, ws, "undo", "before run "+runID)
	if err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, `INSERT OR IGNORE INTO run_states(run, snapshot) SELECT ?, seq FROM snapshots WHERE id = ?`, runID, snap.ID); err != nil {
		return err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM snapshots WHERE workspace = ? AND kind = 'undo' ORDER BY seq DESC LIMIT -1 OFFSET ?`, ws.ID(), s.maxUndo)
	if err != nil {
		return err
	}
	var old []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		old = append(old, id)
	}
	rows.Close()
	if len(old) == 0 {
		return rows.Err()
	}
	for _, id := range old {
		if _, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id); err != nil {
			return err
		}
	}
	_, _, err = s.GC(ctx)
	return err
}

// UndoLastRun puts the workspace back to its state before the most recent
// run and forgets that state, so a second call goes back one run further.
//
// The state is taken out of BeforeRun's reach (kind 'undo-taken') before
// the restore: a run that opens between the restore and the state's
// removal finds the workspace equal to it, and must record a state of its
// own rather than reuse the one about to go (review M4).
func (s *Store) UndoLastRun(ctx context.Context, ws *workspace.Workspace) (Snapshot, error) {
	var sn Snapshot
	var ns int64
	for {
		err := s.db.QueryRowContext(ctx, `SELECT id, description, created_ns, files, bytes FROM snapshots WHERE workspace = ? AND kind = 'undo' ORDER BY seq DESC LIMIT 1`, ws.ID()).
			Scan(&sn.ID, &sn.Description, &ns, &sn.Files, &sn.Bytes)
		if errors.Is(err, sql.ErrNoRows) {
			return Snapshot{}, fmt.Errorf("%w: no run has changed this workspace since the server started keeping undo states", ErrNoUndo)
		}
		if err != nil {
			return Snapshot{}, err
		}
		res, err := s.db.ExecContext(ctx, `UPDATE snapshots SET kind = 'undo-taken' WHERE id = ? AND kind = 'undo'`, sn.ID)
		if err != nil {
			return Snapshot{}, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			break
		}
		// A concurrent undo took it: the next state back is ours.
	}
	sn.Created = time.Unix(0, ns)
	if err := s.Restore(ctx, ws, sn.ID); err != nil {
		if _, uerr := s.db.ExecContext(context.WithoutCancel(ctx), `UPDATE snapshots SET kind = 'undo' WHERE id = ?`, sn.ID); uerr != nil {
			s.log.Warn("an undo state could not be given back after a failed restore", "id", sn.ID, "err", uerr)
		}
		return Snapshot{}, err
	}
	if s.afterUndoRestore != nil {
		s.afterUndoRestore()
	}
	if err := s.Delete(ctx, ws, sn.ID); err != nil {
		return Snapshot{}, err
	}
	return sn, nil
}

// BlobCount is how many distinct contents are stored.
func (s *Store) BlobCount() (int, error) {
	n := 0
	err := s.blobs.walk(func(string, string, int64) error { n++; return nil })
	return n, err
}

// For binds the store to one workspace, for callers that serve just one.
func (s *Store) For(ws *workspace.Workspace) *Bound { return &Bound{s: s, ws: ws} }

// Bound is a Store bound to one workspace.
type Bound struct {
	s  *Store
	ws *workspace.Workspace
}

func (b *Bound) Create(ctx context.Context, description string) (Snapshot, error) {
	return b.s.Create(ctx, b.ws, description)
}
func (b *Bound) List(ctx context.Context) ([]Snapshot, error) { return b.s.List(ctx, b.ws) }
func (b *Bound) Restore(ctx context.Context, id string) error { return b.s.Restore(ctx, b.ws, id) }
func (b *Bound) Delete(ctx context.Context, id string) error  { return b.s.Delete(ctx, b.ws, id) }
func (b *Bound) Diff(ctx context.Context, id string) (Diff, error) {
	return b.s.Diff(ctx, b.ws, id)
}
func (b *Bound) UndoLastRun(ctx context.Context) (Snapshot, error) {
	return b.s.UndoLastRun(ctx, b.ws)
}
