package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/sparse"
)

// blobs is a content-addressed store: blobs/sha256/ab/abcdef... Each blob is
// written to a temporary file and renamed into place, so a blob that exists
// is complete; sync makes every new blob durable with one syncfs before the
// index may reference it (one fsync per blob costs seconds per thousand
// files). Blobs are read-only (0444) and never modified. Blobs keep their
// source's holes: a sparse file costs the store its data, not its apparent
// size.
type blobs struct{ dir string }

func (b blobs) path(sum string) string {
	return filepath.Join(b.dir, "sha256", sum[:2], sum)
}

func (b blobs) has(sum string) bool {
	_, err := os.Lstat(b.path(sum))
	return err == nil
}

// put copies the first size bytes of r into the store, sparse-aware, and
// returns their SHA-256.
func (b blobs) put(ctx context.Context, r *os.File, size int64) (string, error) {
	tmpDir := filepath.Join(b.dir, "tmp")
	if err := os.MkdirAll(tmpDir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(tmpDir, "blob-")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	h := sha256.New()
	_, err = sparse.Copy(ctx, f, r, size, h)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("store blob: %w", err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if b.has(sum) {
		return sum, nil
	}
	dst := b.path(sum)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", err
	}
	if err := os.Chmod(f.Name(), 0o444); err != nil {
		return "", err
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return "", fmt.Errorf("store blob: %w", err)
	}
	return sum, nil
}

// sync flushes the filesystem holding the blobs.
func (b blobs) sync() error {
	f, err := os.Open(b.dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// hash computes the SHA-256 of r's first size bytes without storing them
// (holes are not read).
func hash(ctx context.Context, r *os.File, size int64) (string, error) {
	h := sha256.New()
	_, err := sparse.Copy(ctx, nil, r, size, h)
	return hex.EncodeToString(h.Sum(nil)), err
}

// walk calls fn for every stored blob.
func (b blobs) walk(fn func(sum, p string, size int64) error) error {
	root := filepath.Join(b.dir, "sha256")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		name := d.Name()
		if len(name) != 64 || strings.Trim(name, "0123456789abcdef") != "" {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		return fn(name, p, fi.Size())
	})
	return err
}
