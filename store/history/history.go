// Package history is sandpit's execution history: one SQLite row per run,
// with each distinct program text stored once.
//
// Guarantees: a Record that returned nil survives the server being killed
// (kill -9) at any later moment; the database is in WAL mode, so readers never
// block the writer and a crash leaves it consistent. Pruning works in small
// transactions and never holds the write lock for long.
package history

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver

	"github.com/sandpit-dev/sandpit"
)

// ErrNotFound means no run with that id is in the history (it may have been pruned).
var ErrNotFound = sandpit.Define(sandpit.ErrNotFound, "not found in history")

// HeadBytes is how much of each output stream a run keeps.
const HeadBytes = 1024

// PreviewChars is the length of the code preview List returns.
const PreviewChars = 200

// OutputBytes is how much of each output stream the newest OutputRuns runs
// keep beyond their heads, for a person reading a run (Get's Stdout and
// Stderr); older runs keep only their heads. Together they bound what
// outputs add to the database: 2 × OutputBytes × OutputRuns = 128 MiB.
const (
	OutputBytes = 64 << 10
	OutputRuns  = 1000
)

// Run is one recorded execution.
type Run struct {
	ID       string    `json:"id"`
	Started  time.Time `json:"started"` // UTC
	Language string    `json:"language"`
	// Code is the full source in Get results; List leaves it empty and fills
	// CodePreview instead. Both are empty when the run executed a workspace file.
	Code        string `json:"code,omitempty"`
	CodePreview string `json:"code_preview,omitempty"`
	CodeSHA256  string `json:"code_sha256,omitempty"`
	CodeBytes   int64  `json:"code_bytes"`
	Path        string `json:"path,omitempty"` // workspace file run instead of code
	StdinBytes  int64  `json:"stdin_bytes"`

	Status     string `json:"status"`
	ExitCode   int    `json:"exit_code"`
	DurationMS int64  `json:"duration_ms"`

	CPUUserMS       int64 `json:"cpu_user_ms"`
	CPUSystemMS     int64 `json:"cpu_system_ms"`
	MemoryPeakBytes int64 `json:"memory_peak_bytes"`
	Pids            int64 `json:"pids"`
	OOMKilled       bool  `json:"oom_killed"`

	StdoutBytes     int64  `json:"stdout_bytes"`
	StderrBytes     int64  `json:"stderr_bytes"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	StdoutHead      string `json:"stdout_head"` // first HeadBytes of what was kept
	StderrHead      string `json:"stderr_head"`
	// Stdout and Stderr are the first OutputBytes of each stream as the
	// run returned them: given to Record, and filled by Get while the run
	// is among the newest OutputRuns (empty otherwise, and in List).
	Stdout string `json:"-"`
	Stderr string `json:"-"`
	// CancelledBy says who cancelled a cancelled run when it was not the
	// caller (e.g. "person": from the dashboard).
	CancelledBy string `json:"cancelled_by,omitempty"`

	// Files and Limits are stored as the JSON the caller gives; nil when absent.
	Files  json.RawMessage `json:"files,omitempty"`
	Limits json.RawMessage `json:"limits,omitempty"`
}

// Filter selects runs for List. The zero value lists the newest DefaultLimit runs.
type Filter struct {
	Limit    int       // at most MaxLimit; zero means DefaultLimit
	Offset   int       // rows to skip after the other conditions
	Before   time.Time // only runs started strictly before this
	BeforeID string    // only runs older than this run (a keyset cursor)
	Status   string
	Language string
	After    time.Time // only runs started at or after this
	// Text: only runs whose code or kept output contains it (a plain
	// substring, case-insensitive for ASCII).
	Text string
}

// List limits.
const (
	DefaultLimit = 20
	MaxLimit     = 1000
)

// DB is an open history database. It is safe for concurrent use.
type DB struct {
	db   *sql.DB
	path string
	// outputRuns is OutputRuns; tests lower it.
	outputRuns int
}

// Open opens (creating if needed) the history database at path and applies
// any pending migrations.
func Open(ctx context.Context, path string) (*DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("history database directory: %w", err)
	}
	// _txlock=immediate takes the write lock at BEGIN, so two writers wait on
	// busy_timeout instead of failing with SQLITE_BUSY on lock upgrade.
	// synchronous=NORMAL in WAL mode loses nothing when the process dies; only
	// a power cut can drop the last commits.
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_busy_timeout", "5000")
	q.Set("_foreign_keys", "on")
	q.Set("_txlock", "immediate")
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, fmt.Errorf("open history database %s: %w", path, err)
	}
	h := &DB{db: db, path: path, outputRuns: OutputRuns}
	if err := h.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("history database %s: %w", path, err)
	}
	return h, nil
}

// Path is the database file.
func (h *DB) Path() string { return h.path }

// Close closes the database.
func (h *DB) Close() error { return h.db.Close() }

// Record stores one run. Recording the same run id twice is an error.
func (h *DB) Record(ctx context.Context, r Run) error {
	if r.ID == "" {
		return errors.New("record run: empty id")
	}
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record run %s: %w", r.ID, err)
	}
	defer tx.Rollback()

	var sum sql.NullString
	if r.Code != "" {
		s := sha256.Sum256([]byte(r.Code))
		sum = sql.NullString{String: hex.EncodeToString(s[:]), Valid: true}
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO code(sha256, text, bytes) VALUES(?, ?, ?) ON CONFLICT(sha256) DO NOTHING`,
			sum.String, r.Code, len(r.Code)); err != nil {
			return fmt.Errorf("record run %s: code: %w", r.ID, err)
		}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO runs(
		id, started_ns, language, code_sha256, path, stdin_bytes,
		status, exit_code, duration_ms, cpu_user_ms, cpu_system_ms, memory_peak_bytes, pids, oom_killed,
		stdout_bytes, stderr_bytes, stdout_truncated, stderr_truncated, stdout_head, stderr_head,
		files, limits, cancelled_by
	) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Started.UTC().UnixNano(), r.Language, sum, nullString(r.Path), r.StdinBytes,
		r.Status, r.ExitCode, r.DurationMS, r.CPUUserMS, r.CPUSystemMS, r.MemoryPeakBytes, r.Pids, r.OOMKilled,
		r.StdoutBytes, r.StderrBytes, r.StdoutTruncated, r.StderrTruncated, head(r.StdoutHead), head(r.StderrHead),
		nullJSON(r.Files), nullJSON(r.Limits), nullString(r.CancelledBy))
	if err != nil {
		return fmt.Errorf("record run %s: %w", r.ID, err)
	}
	if len(r.Stdout) > HeadBytes || len(r.Stderr) > HeadBytes {
		// Only what the head does not already hold needs a row.
		var seq int64
		if err := tx.QueryRowContext(ctx, `SELECT seq FROM runs WHERE id = ?`, r.ID).Scan(&seq); err != nil {
			return fmt.Errorf("record run %s: %w", r.ID, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO outputs(run_seq, stdout, stderr) VALUES(?, ?, ?)`,
			seq, clip(r.Stdout, OutputBytes), clip(r.Stderr, OutputBytes)); err != nil {
			return fmt.Errorf("record run %s: output: %w", r.ID, err)
		}
		// Older runs' outputs go: the table holds at most OutputRuns rows
		// (seqs only grow).
		if _, err := tx.ExecContext(ctx, `DELETE FROM outputs WHERE run_seq IN
			(SELECT run_seq FROM outputs ORDER BY run_seq DESC LIMIT -1 OFFSET ?)`, h.outputRuns); err != nil {
			return fmt.Errorf("record run %s: output: %w", r.ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record run %s: commit: %w", r.ID, err)
	}
	return nil
}

const runColumns = `r.id, r.started_ns, r.language, r.code_sha256, c.bytes, r.path, r.stdin_bytes,
	r.status, r.exit_code, r.duration_ms, r.cpu_user_ms, r.cpu_system_ms, r.memory_peak_bytes, r.pids, r.oom_killed,
	r.stdout_bytes, r.stderr_bytes, r.stdout_truncated, r.stderr_truncated, r.stdout_head, r.stderr_head,
	r.files, r.limits, r.cancelled_by`

// List returns the runs matching f, newest first, without full code.
func (h *DB) List(ctx context.Context, f Filter) ([]Run, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultLimit
	}
	f.Limit = min(f.Limit, MaxLimit)
	var where []string
	var args []any
	if !f.Before.IsZero() {
		where = append(where, "r.started_ns < ?")
		args = append(args, f.Before.UTC().UnixNano())
	}
	if f.BeforeID != "" {
		var ns, seq int64
		err := h.db.QueryRowContext(ctx, `SELECT started_ns, seq FROM runs WHERE id = ?`, f.BeforeID).Scan(&ns, &seq)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("run %q: %w", f.BeforeID, ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		where = append(where, "(r.started_ns, r.seq) < (?, ?)")
		args = append(args, ns, seq)
	}
	if f.Status != "" {
		where = append(where, "r.status = ?")
		args = append(args, f.Status)
	}
	if f.Language != "" {
		where = append(where, "r.language = ?")
		args = append(args, f.Language)
	}
	if !f.After.IsZero() {
		where = append(where, "r.started_ns >= ?")
		args = append(args, f.After.UTC().UnixNano())
	}
	if f.Text != "" {
		// instr, not LIKE: the text is matched as it is, with no
		// wildcards of its own. Output beyond the head is matched where
		// kept.
		t := strings.ToLower(f.Text)
		where = append(where, `(instr(lower(c.text), ?) > 0 OR instr(lower(r.stdout_head), ?) > 0 OR instr(lower(r.stderr_head), ?) > 0
			OR EXISTS (SELECT 1 FROM outputs o WHERE o.run_seq = r.seq AND (instr(lower(o.stdout), ?) > 0 OR instr(lower(o.stderr), ?) > 0)))`)
		args = append(args, t, t, t, t, t)
	}
	q := `SELECT ` + runColumns + `, substr(c.text, 1, ` + fmt.Sprint(PreviewChars) + `)
		FROM runs r LEFT JOIN code c ON c.sha256 = r.code_sha256`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY r.started_ns DESC, r.seq DESC LIMIT ? OFFSET ?"
	args = append(args, f.Limit, max(f.Offset, 0))

	rows, err := h.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	runs := []Run{}
	for rows.Next() {
		var r Run
		var preview sql.NullString
		if err := scanRun(rows, &r, &preview); err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		r.CodePreview = preview.String
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return runs, nil
}

// Get returns one run with its full code.
func (h *DB) Get(ctx context.Context, id string) (Run, error) {
	var r Run
	var code sql.NullString
	var stdout, stderr sql.NullString
	row := h.db.QueryRowContext(ctx, `SELECT `+runColumns+`, c.text, o.stdout, o.stderr
		FROM runs r LEFT JOIN code c ON c.sha256 = r.code_sha256
		LEFT JOIN outputs o ON o.run_seq = r.seq WHERE r.id = ?`, id)
	err := scanRun(row, &r, &code, &stdout, &stderr)
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, fmt.Errorf("run %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Run{}, fmt.Errorf("get run %q: %w", id, err)
	}
	r.Code = code.String
	r.Stdout, r.Stderr = r.StdoutHead, r.StderrHead
	if stdout.Valid {
		r.Stdout, r.Stderr = stdout.String, stderr.String
	}
	return r, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanRun(s scanner, r *Run, code *sql.NullString, more ...any) error {
	var ns int64
	var sum, path, cancelledBy sql.NullString
	var codeBytes sql.NullInt64
	var files, limits []byte
	dest := []any{&r.ID, &ns, &r.Language, &sum, &codeBytes, &path, &r.StdinBytes,
		&r.Status, &r.ExitCode, &r.DurationMS, &r.CPUUserMS, &r.CPUSystemMS, &r.MemoryPeakBytes, &r.Pids, &r.OOMKilled,
		&r.StdoutBytes, &r.StderrBytes, &r.StdoutTruncated, &r.StderrTruncated, &r.StdoutHead, &r.StderrHead,
		&files, &limits, &cancelledBy, code}
	err := s.Scan(append(dest, more...)...)
	if err != nil {
		return err
	}
	r.CancelledBy = cancelledBy.String
	r.Started = time.Unix(0, ns).UTC()
	r.CodeSHA256, r.CodeBytes, r.Path = sum.String, codeBytes.Int64, path.String
	if len(files) > 0 {
		r.Files = json.RawMessage(files)
	}
	if len(limits) > 0 {
		r.Limits = json.RawMessage(limits)
	}
	return nil
}

// Count is the number of runs recorded.
func (h *DB) Count(ctx context.Context) (int64, error) {
	var n int64
	err := h.db.QueryRowContext(ctx, `SELECT count(*) FROM runs`).Scan(&n)
	return n, err
}

// clip keeps at most n bytes of s, cut at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// head keeps at most HeadBytes of s, cut at a rune boundary.
func head(s string) string {
	if len(s) <= HeadBytes {
		return s
	}
	s = s[:HeadBytes]
	// Drop a rune the cut split in two (at most UTFMax-1 bytes).
	for i := 0; i < utf8.UTFMax-1 && len(s) > 0; i++ {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return string(b)
}
