package querydb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
)

// copyChunk is how much is copied between two checks of the deadline.
const copyChunk = 8 << 20

// openWorkspace opens the workspace database rel for one call: the opener
// hands over a descriptor (no symlink followed, regular files only), its
// content goes to a private file, and SQLite opens that file immutable. The
// private file is unlinked as soon as the connection holds it, so nothing is
// left behind however the call ends.
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
		return nil, nil, fmt.Errorf("%w: %q is %d bytes; a workspace database may be at most %d (hint: query a smaller extract, e.g. written by run_code with VACUUM INTO after a DELETE)", ErrTooLarge, rel, fi.Size(), e.opts.MaxDBBytes)
	}
	select {
	case e.copies <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	done := func() { <-e.copies }
	path, err := e.privateCopy(ctx, f, rel)
	if err != nil {
		done()
		return nil, nil, err
	}
	db, err := openDB(path, true)
	if err != nil {
		os.Remove(path)
		done()
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	os.Remove(path) // SQLite holds its descriptor now; the name is not needed
	if err != nil {
		db.Close()
		done()
		return nil, nil, classify(err, nil)
	}
	return conn, func() { conn.Close(); db.Close(); done() }, nil
}

// privateCopy copies f into a new file of the engine's private directory and
// returns its path. It stops at the deadline and at MaxDBBytes (the file may
// grow while it is copied).
func (e *Engine) privateCopy(ctx context.Context, f *os.File, rel string) (string, error) {
	dir, err := e.privateDir()
	if err != nil {
		return "", err
	}
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
		if n > e.opts.MaxDBBytes {
			return fail(fmt.Errorf("%w: %q grew past %d bytes while it was read", ErrTooLarge, rel, e.opts.MaxDBBytes))
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

// privateDir makes (once) the engine's own 0700 directory for copies.
func (e *Engine) privateDir() (string, error) {
	e.tmpMu.Lock()
	defer e.tmpMu.Unlock()
	if e.tmpDir == "" {
		d, err := os.MkdirTemp(e.opts.TempDir, "sandpit-querydb-")
		if err != nil {
			return "", fmt.Errorf("directory for private database copies: %w", noPath(err))
		}
		e.tmpDir = d
	}
	return e.tmpDir, nil
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
