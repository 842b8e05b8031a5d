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
// The database is not opened with immutable=1. Immutable skips locking and
// change detection, which is only correct for files nobody changes: the
// configured database may be updated by its owner while sandpit serves it,
// and a workspace database may be written by a sandboxed program. mode=ro
// with ordinary shared locks reads a consistent snapshot in both cases.
//
// Queries are bounded: a time limit (the connection is interrupted with
// sqlite3_interrupt through context cancellation), a row cap, a cap on
// result bytes, and SQLITE_LIMIT_LENGTH on any single value.
package querydb

import (
	"database/sql"
	"errors"
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
	// ErrTooLarge: a single value exceeded the value size limit.
	ErrTooLarge = sandpit.Define(sandpit.ErrResourceExhausted, "value too large")
	// ErrSQL: SQLite rejected the statement (syntax, unknown table, ...).
	ErrSQL = sandpit.Define(sandpit.ErrInvalidArgument, "SQL error")
	// ErrParams: the parameters cannot be bound.
	ErrParams = sandpit.Define(sandpit.ErrInvalidArgument, "bad query parameters")
	// ErrDatabasePath: a named database is not a usable SQLite file.
	ErrDatabasePath = sandpit.Define(sandpit.ErrInvalidArgument, "bad database path")
)

// Options bound every query. Zero fields take the defaults.
type Options struct {
	Timeout       time.Duration // per query; default 5s
	DefaultRows   int           // rows returned when the caller gives no max; default 100
	MaxRows       int           // ceiling on a caller's max_rows; default 10000
	MaxBytes      int           // result size cap, approximate bytes; default 4 MiB
	MaxValueBytes int           // SQLITE_LIMIT_LENGTH: largest string or blob; default 16 MiB
	CountTimeout  time.Duration // per-table row count in DescribeSchema; default 250ms
	CountBudget   time.Duration // all row counts in one DescribeSchema; default 2s
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
		o.MaxBytes = 4 << 20
	}
	if o.MaxValueBytes <= 0 {
		o.MaxValueBytes = 16 << 20
	}
	if o.CountTimeout <= 0 {
		o.CountTimeout = 250 * time.Millisecond
	}
	if o.CountBudget <= 0 {
		o.CountBudget = 2 * time.Second
	}
}

// WorkspaceExts are the file extensions a workspace database may have.
var WorkspaceExts = []string{".db", ".sqlite", ".sqlite3"}

// Engine answers queries against the configured database and, when a
// resolver is set, against SQLite files in the workspace.
type Engine struct {
	opts    Options
	path    string  // configured database, "" when none
	db      *sql.DB // nil when none
	resolve func(rel string) (string, error)
}

// New opens the configured database at path ("" for none) read-only.
// resolve turns a workspace path into a host path that stays inside the
// workspace; nil turns workspace databases off.
func New(path string, resolve func(rel string) (string, error), opts Options) (*Engine, error) {
	opts.defaults()
	e := &Engine{opts: opts, resolve: resolve}
	if path == "" {
		return e, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	db, err := open(abs)
	if err != nil {
		return nil, err
	}
	// A cheap round trip proves the file is a database now, not at the
	// first query.
	if err := db.QueryRow("SELECT count(*) FROM sqlite_schema").Scan(new(int)); err != nil {
		db.Close()
		return nil, fmt.Errorf("database %s: %w (hint: is it a SQLite 3 file?)", abs, classify(err, nil))
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

// handle returns the database to use: the configured one for "", else a
// workspace file opened for this call only (release closes it).
func (e *Engine) handle(database string) (db *sql.DB, release func(), err error) {
	if database == "" {
		if e.db == nil {
			hint := "start sandpit with --db FILE"
			if e.resolve != nil {
				hint += ", or name a .db/.sqlite file in the workspace with database"
			}
			return nil, nil, fmt.Errorf("%w (hint: %s)", ErrNoDatabase, hint)
		}
		return e.db, func() {}, nil
	}
	if e.resolve == nil {
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
	host, err := e.resolve(database)
	if err != nil {
		return nil, nil, err // the workspace's own error class says why
	}
	fi, err := os.Stat(host)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil, fmt.Errorf("%w: %q does not exist in the workspace", ErrDatabasePath, database)
	case err != nil:
		return nil, nil, fmt.Errorf("%w: %q: %v", ErrDatabasePath, database, err)
	case !fi.Mode().IsRegular():
		return nil, nil, fmt.Errorf("%w: %q is not a regular file", ErrDatabasePath, database)
	}
	db, err = open(host)
	if err != nil {
		return nil, nil, err
	}
	return db, func() { db.Close() }, nil
}

const driverName = "sandpit-sqlite3-readonly"

var registerOnce sync.Once

// open opens path read-only through a driver whose every connection is
// hardened before first use.
func open(path string) (*sql.DB, error) {
	registerOnce.Do(func() {
		sql.Register(driverName, &sqlite3.SQLiteDriver{ConnectHook: harden})
	})
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDatabasePath, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrDatabasePath, path)
	}
	// EscapedPath keeps '/' and escapes '?', '#' and '%', which SQLite's URI
	// parser would otherwise read as the query, fragment or an escape.
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?mode=ro"
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(2)
	db.SetConnMaxIdleTime(time.Minute)
	return db, nil
}

// harden runs once on every new connection, before any caller SQL.
func harden(c *sqlite3.SQLiteConn) error {
	for _, p := range []string{"PRAGMA query_only=1", "PRAGMA trusted_schema=0"} {
		if _, err := c.Exec(p, nil); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	c.SetLimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
	c.RegisterAuthorizer(newAuthorizer().check)
	return nil
}
