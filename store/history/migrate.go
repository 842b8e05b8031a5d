package history

import (
	"context"
	"fmt"
	"time"
)

// migrations are applied in order, each once, each in its own transaction
// together with its schema_migrations row. Never edit a released migration:
// append a new one.
var migrations = []string{
	1: `
CREATE TABLE code (
	sha256 TEXT PRIMARY KEY,
	text   TEXT NOT NULL,
	bytes  INTEGER NOT NULL
);
CREATE TABLE runs (
	seq               INTEGER PRIMARY KEY,
	id                TEXT NOT NULL UNIQUE,
	started_ns        INTEGER NOT NULL,
	language          TEXT NOT NULL,
	code_sha256       TEXT REFERENCES code(sha256),
	path              TEXT,
	stdin_bytes       INTEGER NOT NULL DEFAULT 0,
	status            TEXT NOT NULL,
	exit_code         INTEGER NOT NULL,
	duration_ms       INTEGER NOT NULL,
	cpu_user_ms       INTEGER NOT NULL DEFAULT 0,
	cpu_system_ms     INTEGER NOT NULL DEFAULT 0,
	memory_peak_bytes INTEGER NOT NULL DEFAULT 0,
	pids              INTEGER NOT NULL DEFAULT 0,
	oom_killed        INTEGER NOT NULL DEFAULT 0,
	stdout_bytes      INTEGER NOT NULL DEFAULT 0,
	stderr_bytes      INTEGER NOT NULL DEFAULT 0,
	stdout_truncated  INTEGER NOT NULL DEFAULT 0,
	stderr_truncated  INTEGER NOT NULL DEFAULT 0,
	stdout_head       TEXT NOT NULL DEFAULT '',
	stderr_head       TEXT NOT NULL DEFAULT '',
	files             TEXT,
	limits            TEXT
);
CREATE INDEX runs_started ON runs(started_ns, seq);
CREATE INDEX runs_status ON runs(status, started_ns);
CREATE INDEX runs_language ON runs(language, started_ns);
CREATE INDEX runs_code ON runs(code_sha256);
`,
	2: `
ALTER TABLE runs ADD COLUMN cancelled_by TEXT;
CREATE TABLE outputs (
	run_seq INTEGER PRIMARY KEY REFERENCES runs(seq) ON DELETE CASCADE,
	stdout  TEXT NOT NULL,
	stderr  TEXT NOT NULL
);
`,
}

// SchemaVersion is the version Open migrates to.
func SchemaVersion() int { return len(migrations) - 1 }

func (h *DB) migrate(ctx context.Context) error {
	if _, err := h.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at TEXT NOT NULL
	)`); err != nil {
		return fmt.Errorf("schema_migrations: %w", err)
	}
	for v := 1; v < len(migrations); v++ {
		if err := h.apply(ctx, v); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
	}
	return nil
}

// apply runs migration v unless it is already recorded. The check and the
// change share one (immediate) transaction, so two processes opening the
// same database at once cannot both apply it.
func (h *DB) apply(ctx context.Context, v int) error {
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, v).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at) VALUES(?, ?)`,
		v, time.Now().UTC().Format(time.RFC3339)); err != nil {
		return err
	}
	return tx.Commit()
}

// Version is the highest migration applied to the database.
func (h *DB) Version(ctx context.Context) (int, error) {
	var v int
	err := h.db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}
