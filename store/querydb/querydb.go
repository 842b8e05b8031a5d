// Package querydb is a read-only SQL query engine over SQLite files.
//
// Its guarantee: nothing a caller sends through Query or DescribeSchema can
// change a database file or write any other file. That holds in layers, so
// that no single mistake breaks it:
//
//  1. The file is opened read-only (SQLite URI mode=ro: the descriptor is
//     O_RDONLY, so even a bug in SQLite cannot write through it).
//  2. Every connection runs PRAGMA query_only=1 and trusted_schema=0, and
//     has SQLITE_LIMIT_ATTACHED set to 0.
//  3. An authorizer allows only reads: SELECT, reading columns, functions
//     other than load_extension and fts3_tokenizer, recursive CTEs and a
//     short list of read-only PRAGMAs. Everything else (INSERT, UPDATE,
//     DELETE, CREATE, DROP, ALTER, ATTACH, DETACH, ANALYZE, REINDEX, writing
//     PRAGMAs, temp objects, transactions and savepoints) is denied at
//     prepare time.
//  4. A prepared statement must be read-only per sqlite3_stmt_readonly,
//     which catches what the authorizer never sees (VACUUM and VACUUM INTO,
//     PRAGMA journal_mode).
//  5. Exactly one statement per call: the text is tokenized the way SQLite
//     does and anything after the first statement is refused; and only the
//     first prepared statement is ever executed.
//
// Transactions are denied rather than allowed: a BEGIN left open on a pooled
// connection would hold a read lock and block the database's real writers.
//
// The configured database (--db) is opened by path with mode=ro and
// ordinary shared locks: its owner may update it while sandpit serves it,
// and a locked read sees a consistent snapshot. A workspace database is
// never opened by name: a running program (in the bind fallback) could swap
// a symlink into its path between any check and SQLite's own open, which
// resolves every symlink itself (even /proc/self/fd/N is turned back into
// the file's path). The caller's opener hands over a descriptor opened
// without following links; its content is copied into a private file
// outside the workspace, and SQLite opens that copy with immutable=1. So
// SQLite takes no locks on workspace files, never creates a -wal, -shm or
// -journal beside them, and reads a snapshot no program can change midway
// (a -wal the program left behind is not read: a database a program closed
// cleanly has none).
//
// Queries are bounded: a time limit that covers preparing a statement as
// well as stepping it (a watchdog calls sqlite3_interrupt from the deadline
// on), a row cap, a cap on result bytes checked before a value is encoded,
// SQLITE_LIMIT_LENGTH on any single value, and a memory budget on all that
// SQLite allocates while queries run (an allocator wrapped around SQLite's
// charges it; SQLite's process-wide hard heap limit sits above it with
// headroom for the server's other databases, which a query at its budget
// must not starve). The budget is what stops nested views that expand to an
// exponential parse tree at prepare time (SQLite does not check for
// interrupts while it expands them), and it bounds a row before it is
// copied into Go. Temporary
// b-trees and sorters live in that bounded memory (temp_store=MEMORY), never
// in files under /var/tmp. DescribeSchema has one deadline for the whole
// call and a budget of objects and bytes; what does not fit is counted, not
// listed.
package querydb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/sandpit-dev/sandpit"
)

// Errors callers branch on with errors.Is. Each wrapped error's text says
// what was refused and what to do instead.
var (
	// ErrNoDatabase: no database is configured and none was named.
	ErrNoDatabase = sandpit.Define(sandpit.ErrNotFound, "no database is configured")
	// ErrRefused: the statement would write, or uses something denied.
	ErrRefused = sandpit.Define(sandpit.ErrInvalidArgument, "refused: the database is read-only")
	// ErrMultipleStatements: more than one statement in one call.
	ErrMultipleStatements = sandpit.Define(sandpit.ErrInvalidArgument, "refused: exactly one SQL statement per call")
	// ErrEmpty: the SQL holds no statement.
	ErrEmpty = sandpit.Define(sandpit.ErrInvalidArgument, "empty SQL")
	// ErrTimeout: the query ran past its time limit and was interrupted.
	ErrTimeout = sandpit.Define(sandpit.ErrResourceExhausted, "query timed out")
	// ErrTooLarge: a value, the SQL text, a workspace database or the
	// memory a query needs exceeded its limit.
	ErrTooLarge = sandpit.Define(sandpit.ErrResourceExhausted, "too large")
	// ErrSQL: SQLite rejected the statement (syntax, unknown table, ...).
	ErrSQL = sandpit.Define(sandpit.ErrInvalidArgument, "SQL error")
	// ErrParams: the parameters cannot be bound.
	ErrParams = sandpit.Define(sandpit.ErrInvalidArgument, "bad query parameters")
	// ErrDatabasePath: a named database is not a usable SQLite file.
	ErrDatabasePath = sandpit.Define(sandpit.ErrInvalidArgument, "bad database path")
)

// Options bound every query. Zero fields take the defaults.
type Options struct {
	Timeout       time.Duration // per query, from opening the database to the last row; default 5s
	DefaultRows   int           // rows returned when the caller gives no max; default 100
	MaxRows       int           // ceiling on a caller's max_rows; default 10000
	MaxBytes      int           // result size cap, approximate JSON bytes; default 256 KiB
	MaxValueBytes int           // SQLITE_LIMIT_LENGTH: largest string or blob, also mid-query; default 4 MiB
	MaxSQLBytes   int           // longest SQL text accepted; default 256 KiB
	// MaxMemoryBytes is the memory all running queries may hold together
	// (SQLite has one heap per process; what queries allocate is charged
	// to this budget, what history and snapshots allocate is not); a query
	// that needs more fails with ErrTooLarge. SQLite's hard heap limit is
	// set above it, leaving the other databases headroom. Default 64 MiB.
	MaxMemoryBytes int64
	// MaxDBBytes is the largest workspace database accepted: each call
	// copies it to a private file first. Default 256 MiB.
	MaxDBBytes int64
	// TempDir holds the private copies (each in a 0700 directory of its
	// own, both removed as soon as SQLite has the file open); default
	// os.TempDir().
	TempDir string
	// MaxCopies is how many workspace databases may be copied at once
	// (further calls wait); default 2.
	MaxCopies    int
	CountTimeout time.Duration // per-table row count in DescribeSchema; default 250ms
	CountBudget  time.Duration // all row counts in one DescribeSchema; default 2s
	// SchemaTimeout bounds one whole DescribeSchema call; default Timeout.
	SchemaTimeout time.Duration
	// SchemaMaxObjects is how many tables and views DescribeSchema
	// describes; default 200. The rest are counted.
	SchemaMaxObjects int
	// SchemaMaxBytes is DescribeSchema's output budget, approximate JSON
	// bytes; default 128 KiB. Columns and objects past it are counted.
	SchemaMaxBytes int
}

func (o *Options) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.MaxRows <= 0 {
		o.MaxRows = 10000
	}
	if o.DefaultRows <= 0 {
		o.DefaultRows = min(100, o.MaxRows)
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 256 << 10
	}
	if o.MaxValueBytes <= 0 {
		o.MaxValueBytes = 4 << 20
	}
	if o.MaxSQLBytes <= 0 {
		o.MaxSQLBytes = 256 << 10
	}
	if o.MaxMemoryBytes <= 0 {
		o.MaxMemoryBytes = 64 << 20
	}
	if o.MaxDBBytes <= 0 {
		o.MaxDBBytes = 256 << 20
	}
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	if o.MaxCopies <= 0 {
		o.MaxCopies = 2
	}
	if o.CountTimeout <= 0 {
		o.CountTimeout = 250 * time.Millisecond
	}
	if o.CountBudget <= 0 {
		o.CountBudget = 2 * time.Second
	}
	if o.SchemaTimeout <= 0 {
		o.SchemaTimeout = o.Timeout
	}
	if o.SchemaMaxObjects <= 0 {
		o.SchemaMaxObjects = 200
	}
	if o.SchemaMaxBytes <= 0 {
		o.SchemaMaxBytes = 128 << 10
	}
}

// WorkspaceExts are the file extensions a workspace database may have.
var WorkspaceExts = []string{".db", ".sqlite", ".sqlite3"}

// OpenFunc opens a workspace file for reading without following symlinks
// and returns it only if it is a regular file. Its errors are the
// workspace's own classes and name the path as the caller gave it.
type OpenFunc func(rel string) (*os.File, error)

// Engine answers queries against the configured database and, when an
// opener is set, against SQLite files in the workspace.
type Engine struct {
	opts   Options
	path   string   // configured database, "" when none
	db     *sql.DB  // nil when none
	open   OpenFunc // nil: no workspace databases
	copies chan struct{}
}

// New opens the configured database at path ("" for none) read-only.
// open opens workspace files (nil turns workspace databases off). New sets
// the queries' memory budget to opts.MaxMemoryBytes (process-wide, as
// SQLite's heap is), and SQLite's hard heap limit above it.
func New(path string, open OpenFunc, opts Options) (*Engine, error) {
	opts.defaults()
	registerOnce.Do(func() {
		sql.Register(driverName, &sqlite3.SQLiteDriver{ConnectHook: harden})
	})
	setHeapLimit(opts.MaxMemoryBytes)
	e := &Engine{opts: opts, open: open, copies: make(chan struct{}, opts.MaxCopies)}
	if path == "" {
		return e, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDatabasePath, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrDatabasePath, abs)
	}
	db, err := openDB(abs, false)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(2)
	db.SetConnMaxIdleTime(time.Minute)
	// A cheap round trip proves the file is a database now, not at the
	// first query.
	if err := db.QueryRow("SELECT count(*) FROM sqlite_schema").Scan(new(int)); err != nil {
		db.Close()
		return nil, sandpit.WithHint(fmt.Errorf("database %s: %w", abs, classify(err, nil)), "is it a SQLite 3 file?")
	}
	e.path, e.db = abs, db
	return e, nil
}

// Path is the configured database's absolute path, "" when none.
func (e *Engine) Path() string { return e.path }

// Options returns the effective limits.
func (e *Engine) Options() Options { return e.opts }

// Close closes the configured database.
func (e *Engine) Close() error {
	if e.db == nil {
		return nil
	}
	return e.db.Close()
}

// handle returns a connection to use: from the configured database's pool
// for "", else to a private copy of a workspace file, made for this call
// only. release gives everything back.
func (e *Engine) handle(ctx context.Context, database string) (conn *sql.Conn, release func(), err error) {
	if database == "" {
		if e.db == nil {
			hint := "start sandpit with --db FILE"
			if e.open != nil {
				hint += ", or name a .db/.sqlite file in the workspace with database"
			}
			return nil, nil, sandpit.WithHint(ErrNoDatabase, hint)
		}
		conn, err := e.db.Conn(ctx)
		if err != nil {
			return nil, nil, classify(err, nil)
		}
		return conn, func() { conn.Close() }, nil
	}
	if e.open == nil {
		return nil, nil, fmt.Errorf("%w: %q: workspace databases are not enabled on this server; leave database empty to use the configured one", ErrDatabasePath, database)
	}
	ext := strings.ToLower(filepath.Ext(database))
	ok := false
	for _, x := range WorkspaceExts {
		ok = ok || ext == x
	}
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q: a workspace database must end in %s", ErrDatabasePath, database, strings.Join(WorkspaceExts, ", "))
	}
	return e.openWorkspace(ctx, database)
}

const driverName = "sandpit-sqlite3-readonly"

var registerOnce sync.Once

// openDB opens path read-only through the hardened driver; immutable for
// private copies nobody else can change.
func openDB(path string, immutable bool) (*sql.DB, error) {
	// EscapedPath keeps '/' and escapes '?', '#' and '%', which SQLite's URI
	// parser would otherwise read as the query, fragment or an escape.
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?mode=ro"
	if immutable {
		dsn += "&immutable=1"
	}
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDatabasePath, err)
	}
	return db, nil
}

// harden runs once on every new connection, before any caller SQL.
func harden(c *sqlite3.SQLiteConn) error {
	for _, p := range []string{
		"PRAGMA query_only=1",
		"PRAGMA trusted_schema=0",
		// Sorters and temporary b-trees in (heap-limited) memory, never in
		// files under /var/tmp.
		"PRAGMA temp_store=MEMORY",
		// A database file is untrusted input: check cell sizes on read and
		// never map it into memory.
		"PRAGMA cell_size_check=1",
		"PRAGMA mmap_size=0",
	} {
		if _, err := c.Exec(p, nil); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	c.SetLimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
	c.SetLimit(sqlite3.SQLITE_LIMIT_WORKER_THREADS, 0)
	c.RegisterAuthorizer(newAuthorizer().check)
	return nil
}
