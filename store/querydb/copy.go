package querydb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sandpit-dev/sandpit"
)

// copyChunk is how much is copied between two checks of the deadline.
const copyChunk = 8 << 20

// openWorkspace opens the workspace database rel for one call: the opener
// hands over a descriptor (no symlink followed, regular files only), its
// content goes to a file in a new 0700 directory of the call's own, and
// SQLite opens that file immutable. Both are removed as soon as the
// connection holds the file, so nothing is left behind however the call
// ends.
func (e *Engine) openWorkspace(ctx context.Context, rel string) (*sql.Conn, func(), error) {
	f, err := e.open(rel)
	if err != nil {
		return nil, nil, err // the workspace's own class says why, with rel
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %q cannot be read", ErrDatabasePath, rel)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%w: %q is not a regular file", ErrDatabasePath, rel)
	}
	if fi.Size() > e.opts.MaxDBBytes {
		return nil, nil, sandpit.WithHint(fmt.Errorf("%w: %q is %d bytes; a workspace database may be at most %d", ErrTooLarge, rel, fi.Size(), e.opts.MaxDBBytes), "query a smaller extract, e.g. written by run_code with VACUUM INTO after a DELETE")
	}
	select {
	case e.copies <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	done := func() { <-e.copies }
	dir, err := os.MkdirTemp(e.opts.TempDir, "sandpit-querydb-")
	if err != nil {
		done()
		return nil, nil, fmt.Errorf("directory for a private database copy: %w", noPath(err))
	}
	// SQLite holds its own descriptor once the connection is open: the
	// names are not needed after that, and nothing is left behind.
	defer os.RemoveAll(dir)
	path, err := privateCopy(ctx, f, rel, dir, e.opts.MaxDBBytes)
	if err != nil {
		done()
		return nil, nil, err
	}
	db, err := openDB(path, true)
	if err != nil {
		done()
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		done()
		return nil, nil, classify(err, nil)
	}
	return conn, func() { conn.Close(); db.Close(); done() }, nil
}

// privateCopy copies f into a new file in dir (the call's own 0700
// directory) and returns its path. It stops at the deadline and at max
// bytes (the file may grow while it is copied).
func privateCopy(ctx context.Context, f *os.File, rel, dir string, max int64) (string, error) {
	out, err := os.CreateTemp(dir, "db-*.sqlite")
	if err != nil {
		return "", fmt.Errorf("private copy of %q: %w", rel, noPath(err))
	}
	fail := func(err error) (string, error) {
		out.Close()
		os.Remove(out.Name())
		return "", err
	}
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		// io.CopyN uses copy_file_range where the filesystem allows it.
		m, err := io.CopyN(out, f, copyChunk)
		n += m
		if n > max {
			return fail(fmt.Errorf("%w: %q grew past %d bytes while it was read", ErrTooLarge, rel, max))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(fmt.Errorf("%w: %q cannot be read: %v", ErrDatabasePath, rel, noPath(err)))
		}
	}
	if err := out.Close(); err != nil {
		os.Remove(out.Name())
		return "", fmt.Errorf("private copy of %q: %w", rel, noPath(err))
	}
	return out.Name(), nil
}

// noPath drops the host path from an OS error: what reaches the model names
// workspace paths only.
func noPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
