package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// pruneBatch bounds each pruning transaction, so a run being recorded waits
// at most one small batch for the write lock.
const pruneBatch = 256

// Retention says how much history to keep. A zero field keeps everything by
// that measure.
type Retention struct {
	MaxAge   time.Duration
	MaxCount int64
}

// Prune deletes runs older than maxAge and all but the newest maxCount runs
// (a zero bound is not applied), then the code no remaining run refers to.
// It returns how many runs it deleted.
func (h *DB) Prune(ctx context.Context, maxAge time.Duration, maxCount int64) (int64, error) {
	return h.prune(ctx, time.Now(), Retention{MaxAge: maxAge, MaxCount: maxCount})
}

func (h *DB) prune(ctx context.Context, now time.Time, r Retention) (int64, error) {
	var total int64
	if r.MaxAge > 0 {
		cut := now.Add(-r.MaxAge).UTC().UnixNano()
		n, err := h.deleteOlder(ctx, cut, -1)
		total += n
		if err != nil {
			return total, err
		}
	}
	if r.MaxCount > 0 {
		// The newest run past the allowance and everything older goes.
		var ns, seq int64
		err := h.db.QueryRowContext(ctx, `SELECT started_ns, seq FROM runs
			ORDER BY started_ns DESC, seq DESC LIMIT 1 OFFSET ?`, r.MaxCount).Scan(&ns, &seq)
		if errors.Is(err, sql.ErrNoRows) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("prune history: %w", err)
		}
		n, err := h.deleteOlder(ctx, ns, seq)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// deleteOlder deletes, in batches, runs ordered at or before (ns, seq); with
// seq < 0, runs started strictly before ns.
func (h *DB) deleteOlder(ctx context.Context, ns, seq int64) (int64, error) {
	var total int64
	for {
		n, err := h.deleteBatch(ctx, ns, seq)
		total += n
		if err != nil {
			return total, fmt.Errorf("prune history: %w", err)
		}
		if n < pruneBatch {
			return total, nil
		}
	}
}

func (h *DB) deleteBatch(ctx context.Context, ns, seq int64) (int64, error) {
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	cond, args := `started_ns < ?`, []any{ns}
	if seq >= 0 {
		cond, args = `(started_ns, seq) <= (?, ?)`, []any{ns, seq}
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, code_sha256 FROM runs WHERE `+cond+`
		ORDER BY started_ns, seq LIMIT ?`, append(args, pruneBatch)...)
	if err != nil {
		return 0, err
	}
	var seqs []any
	hashes := map[string]bool{}
	for rows.Next() {
		var s int64
		var sum sql.NullString
		if err := rows.Scan(&s, &sum); err != nil {
			rows.Close()
			return 0, err
		}
		seqs = append(seqs, s)
		if sum.Valid {
			hashes[sum.String] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(seqs) == 0 {
		return 0, nil
	}
	marks := strings.TrimSuffix(strings.Repeat("?,", len(seqs)), ",")
	if _, err := tx.ExecContext(ctx, `DELETE FROM runs WHERE seq IN (`+marks+`)`, seqs...); err != nil {
		return 0, err
	}
	for sum := range hashes {
		if _, err := tx.ExecContext(ctx, `DELETE FROM code WHERE sha256 = ?
			AND NOT EXISTS (SELECT 1 FROM runs WHERE code_sha256 = ?)`, sum, sum); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return int64(len(seqs)), nil
}

// Pruner prunes the history to r now and then every interval until ctx is
// done. Failures are logged and retried at the next tick; they never stop it.
func (h *DB) Pruner(ctx context.Context, r Retention, interval time.Duration, log *slog.Logger) {
	if r.MaxAge <= 0 && r.MaxCount <= 0 {
		return
	}
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := h.prune(ctx, time.Now(), r)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("pruning history failed", "db", h.path, "err", err)
		case n > 0:
			log.Info("pruned history", "db", h.path, "runs", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
