package npm

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/sandpit-dev/sandpit/internal/artifact"
)

// FetchTarball returns the path of p's verified tarball in cache and its
// sha256, downloading it first when the cache holds no entry of its
// sha512. The bytes are kept only when their sha512 is the one p.Integrity
// publishes: a mismatch is ErrIntegrity, and nothing of p stays in the
// cache. A pypi.Cache's embedded *artifact.Cache is the same store.
func FetchTarball(ctx context.Context, c *Client, cache *artifact.Cache, p Planned) (path, sha256hex string, err error) {
	what := p.Name + "@" + p.Version
	want, ok := integritySum(p.Integrity)
	if !ok {
		return "", "", fmt.Errorf("%w: %s: no sha512 integrity to verify it by", ErrRefused, what)
	}
	want512 := hex.EncodeToString(want)
	if path, sum, ok := cache.Lookup("sha512", want512); ok {
		return path, sum, nil
	}
	path, sum, _, err := cache.Store(
		func(w io.Writer) (int64, error) {
			return c.download(ctx, what, p.TarballURL, w, c.maxArtifact())
		},
		func(_ string, got []byte) error {
			if !bytes.Equal(got, want) {
				return fmt.Errorf("%w: %s: the registry published %s, the download has sha512-%s", ErrIntegrity, what, p.Integrity, base64.StdEncoding.EncodeToString(got))
			}
			return nil
		})
	if err != nil {
		return "", "", err
	}
	if err := cache.Alias("sha512", want512, sum); err != nil {
		// The entry is verified and in place; only the next lookup by
		// sha512 will miss. A GC between Store and Alias removed it.
		if _, ok := cache.Path(sum); !ok {
			return "", "", fmt.Errorf("%s: the package cache dropped it while fetching; try again", what)
		}
		return "", "", err
	}
	return path, sum, nil
}
