package pypi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// Cache is a content-addressed store of verified artifacts, shared by
// whoever installs from the same index: dir/sha256/<hex> holds the
// artifact whose sha256 is <hex>. An entry appears only by rename of a
// complete, verified download, so a name in sha256/ is always a whole
// artifact of that hash. Downloads in progress live in dir/tmp, each held
// with an flock by its writer; GC removes only the ones no live writer
// holds.
//
// The directory is trusted: entries are not re-hashed when read. It is
// created 0700 and entries are made read-only.
type Cache struct {
	dir string
}

// OpenCache opens (creating) a cache in dir.
func OpenCache(dir string) (*Cache, error) {
	for _, d := range []string{dir, filepath.Join(dir, "sha256"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("package cache: %w", err)
		}
	}
	return &Cache{dir: dir}, nil
}

// Dir is the cache's directory.
func (c *Cache) Dir() string { return c.dir }

func (c *Cache) entry(sum string) string { return filepath.Join(c.dir, "sha256", sum) }

// Path returns the entry of hash sum when the cache holds it, and marks it
// recently used (GC removes the least recently used first).
func (c *Cache) Path(sum string) (string, bool) {
	if !sha256RE.MatchString(sum) {
		return "", false
	}
	p := c.entry(sum)
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		return "", false
	}
	now := time.Now()
	os.Chtimes(p, now, now) // best effort: only GC's order depends on it
	return p, true
}

// Fetch returns the path of f's verified artifact, downloading it first
// when the cache does not hold it. On any failure (a hash mismatch, a
// bound, the index) nothing of f stays in the cache.
func (c *Cache) Fetch(ctx context.Context, cl *Client, f File) (string, error) {
	p, _, err := c.fetch(ctx, cl, f, cl.maxArtifact())
	return p, err
}

// fetch is Fetch with a byte bound; it returns the bytes downloaded (0 on
// a hit).
func (c *Cache) fetch(ctx context.Context, cl *Client, f File, max int64) (string, int64, error) {
	if err := f.check(); err != nil {
		return "", 0, err
	}
	if p, ok := c.Path(f.SHA256); ok {
		return p, 0, nil
	}
	tmp, err := os.CreateTemp(filepath.Join(c.dir, "tmp"), "fetch-*")
	if err != nil {
		return "", 0, fmt.Errorf("package cache: %w", err)
	}
	// The lock says "being written" to GC in any process; the kernel drops
	// it if this one dies, which marks the file as garbage.
	if err := syscall.Flock(int(tmp.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", 0, fmt.Errorf("package cache: lock: %w", err)
	}
	var n int64
	fail := func(err error) (string, int64, error) {
		os.Remove(tmp.Name())
		tmp.Close()
		return "", n, err
	}
	n, err = cl.download(ctx, f, tmp, max)
	if err != nil {
		return fail(err)
	}
	if err := tmp.Chmod(0o444); err != nil {
		return fail(fmt.Errorf("package cache: %w", err))
	}
	if err := tmp.Sync(); err != nil {
		return fail(fmt.Errorf("package cache: %w", err))
	}
	// Rename while still holding the lock: GC never sees it unlocked.
	dst := c.entry(f.SHA256)
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fail(fmt.Errorf("package cache: %w", err))
	}
	tmp.Close()
	return dst, n, nil
}

// GCResult says what a GC did.
type GCResult struct {
	Removed, Kept           int   // entries removed and left
	RemovedBytes, KeptBytes int64 // their sizes
	Partial                 int   // abandoned partial downloads removed
}

// GC removes abandoned partial downloads (older than a minute, and held by
// no writer's lock), then the least recently used entries until the
// entries total at most maxBytes. An entry a caller got from Path or Fetch
// may be removed under it: open it before a GC can run, or hold the
// installs and GC apart.
func (c *Cache) GC(maxBytes int64) (GCResult, error) {
	var res GCResult
	tmpDir := filepath.Join(c.dir, "tmp")
	tmps, err := os.ReadDir(tmpDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("package cache: %w", err)
	}
	for _, de := range tmps {
		p := filepath.Join(tmpDir, de.Name())
		// A writer locks its file right after creating it: a file younger
		// than a minute may be in that gap.
		if info, err := de.Info(); err != nil || time.Since(info.ModTime()) < time.Minute {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			if os.Remove(p) == nil {
				res.Partial++
			}
		}
		f.Close()
	}

	type ent struct {
		path  string
		size  int64
		mtime time.Time
	}
	dir := filepath.Join(c.dir, "sha256")
	des, err := os.ReadDir(dir)
	if err != nil {
		return res, fmt.Errorf("package cache: %w", err)
	}
	var ents []ent
	var total int64
	for _, de := range des {
		if !sha256RE.MatchString(de.Name()) {
			continue
		}
		info, err := de.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		ents = append(ents, ent{filepath.Join(dir, de.Name()), info.Size(), info.ModTime()})
		total += info.Size()
	}
	slices.SortFunc(ents, func(a, b ent) int { return a.mtime.Compare(b.mtime) })
	for _, e := range ents {
		if total <= maxBytes {
			res.Kept++
			res.KeptBytes += e.size
			continue
		}
		if err := os.Remove(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, fmt.Errorf("package cache: %w", err)
		}
		total -= e.size
		res.Removed++
		res.RemovedBytes += e.size
	}
	return res, nil
}
