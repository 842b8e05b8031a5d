package pypi

import (
	"context"
	"fmt"
	"io"

	"github.com/sandpit-dev/sandpit/internal/artifact"
)

// Cache is the content-addressed store of verified artifacts
// (internal/artifact), shared by whoever installs from the same index and
// by the npm installer: dir/sha256/<hex> holds the artifact whose sha256
// is <hex>. An entry appears only by rename of a complete, verified
// download, so a name in sha256/ is always a whole artifact of that hash.
// Downloads in progress live in dir/tmp, each held with an flock by its
// writer; GC removes only the ones no live writer holds.
//
// The directory is trusted: entries are not re-hashed when read. It is
// created 0700 and entries are made read-only.
type Cache struct {
	*artifact.Cache // Dir, Path, GC, and the generic Store
}

// GCResult says what a GC did.
type GCResult = artifact.GCResult

// OpenCache opens (creating) a cache in dir.
func OpenCache(dir string) (*Cache, error) {
	c, err := artifact.Open(dir)
	if err != nil {
		return nil, err
	}
	return &Cache{c}, nil
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
	p, _, n, err := c.Store(
		func(w io.Writer) (int64, error) { return cl.download(ctx, f, w, max) },
		func(sum string, _ []byte) error {
			// download compared the hash already; this keeps the entry's
			// name and the published hash one and the same by construction.
			if sum != f.SHA256 {
				return fmt.Errorf("%w: %s: the index published sha256 %s, the download has %s", ErrHashMismatch, f.Filename, f.SHA256, sum)
			}
			return nil
		})
	return p, n, err
}
