package snapshot

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sandpit-dev/sandpit/store/workspace"
)

// ErrRunStateGone: the state before the run is no longer kept (only the
// newest undo states are) or was never recorded.
var ErrRunStateGone = fmt.Errorf("the workspace's state before that run is no longer kept (only the newest runs' are): %w", ErrNotFound)

// Version is one file as it was at some point: its first bytes (at most
// the limit asked for), its whole size, and whether it existed.
type Version struct {
	Existed bool
	Dir     bool
	Size    int64
	Data    []byte
}

// RunFile is what path was before run runID and after it, as far as the
// store knows: Before from the undo state recorded before the run, After
// from the undo state of the run after it, or, when none came after, from
// the workspace now (AfterIsNow). Between the two, the file tools may
// have changed the file too. Each side holds at most limit bytes.
type RunFile struct {
	Before, After Version
	AfterIsNow    bool
}

// RunFile reads path before and after run runID (see RunFile).
func (s *Store) RunFile(ctx context.Context, ws *workspace.Workspace, runID, path string, limit int64) (RunFile, error) {
	var seq int64
	err := s.db.QueryRowContext(ctx, `SELECT s.seq FROM run_states r JOIN snapshots s ON s.seq = r.snapshot
		WHERE r.run = ? AND s.workspace = ? AND s.kind IN ('undo', 'undo-taken')`, runID, ws.ID()).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return RunFile{}, ErrRunStateGone
	}
	if err != nil {
		return RunFile{}, err
	}
	var out RunFile
	if out.Before, err = s.version(ctx, seq, path, limit); err != nil {
		return RunFile{}, err
	}
	var next int64
	err = s.db.QueryRowContext(ctx, `SELECT seq FROM snapshots WHERE workspace = ? AND kind IN ('undo', 'undo-taken') AND seq > ? ORDER BY seq LIMIT 1`,
		ws.ID(), seq).Scan(&next)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		out.AfterIsNow = true
		c, rerr := ws.Read(ctx, path, 0, limit)
		switch {
		case rerr == nil:
			out.After = Version{Existed: true, Size: c.Size, Data: c.Data}
		case errors.Is(rerr, workspace.ErrNotFound):
		case errors.Is(rerr, workspace.ErrIsDir):
			out.After = Version{Existed: true, Dir: true}
		default:
			return RunFile{}, rerr
		}
	case err != nil:
		return RunFile{}, err
	default:
		if out.After, err = s.version(ctx, next, path, limit); err != nil {
			return RunFile{}, err
		}
	}
	return out, nil
}

// version reads path's first limit bytes as snapshot seq recorded it.
func (s *Store) version(ctx context.Context, seq int64, path string, limit int64) (Version, error) {
	var v Version
	var sha string
	err := s.db.QueryRowContext(ctx, `SELECT dir, size, sha256 FROM entries WHERE snapshot = ? AND path = ?`, seq, path).Scan(&v.Dir, &v.Size, &sha)
	if errors.Is(err, sql.ErrNoRows) {
		return Version{}, nil
	}
	if err != nil {
		return Version{}, err
	}
	v.Existed = true
	if v.Dir {
		return v, nil
	}
	f, err := os.Open(s.blobs.path(sha))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Version{}, ErrRunStateGone // its state was pruned meanwhile
		}
		return Version{}, err
	}
	defer f.Close()
	v.Data, err = io.ReadAll(io.LimitReader(f, limit))
	return v, err
}

// RunFile is Store.RunFile on the bound workspace.
func (b *Bound) RunFile(ctx context.Context, runID, path string, limit int64) (RunFile, error) {
	return b.s.RunFile(ctx, b.ws, runID, path, limit)
}
