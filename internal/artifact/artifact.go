// Package artifact is the content-addressed store of verified package
// artifacts (Python wheels, npm tarballs) that the package installers
// share, on the host side.
//
// Its guarantees:
//
//   - dir/sha256/<hex> is always a whole artifact whose sha256 is <hex>:
//     an entry appears only by rename of a complete download that its
//     writer's check accepted. A download that fails, or that the check
//     refuses, leaves nothing behind.
//   - Downloads in progress live in dir/tmp, each held with an flock by its
//     writer; GC removes only the ones no live writer holds.
//   - An alias, dir/<algo>/<hex> for another digest of the same bytes
//     (sha512 for npm, whose registry publishes sha512), is a symbolic link
//     to ../sha256/<hex> made only after that entry is in place. An alias
//     whose entry is gone is a miss, and GC removes it. Any number of
//     processes may Store, Alias and Lookup at once: each step is one
//     rename or symlink, and two writers of the same bytes write the same
//     names.
//
// The directory is trusted: entries are not re-hashed when read. It is
// created 0700 and entries are made read-only.
package artifact

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"syscall"
	"time"
)

// Cache is a content-addressed store of verified artifacts in one
// directory. A Cache is safe for concurrent use, also across processes.
type Cache struct {
	dir string
}

var (
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// aliases are the digests an entry may also be found by, with the
	// length of their hex form.
	aliases = map[string]*regexp.Regexp{"sha512": regexp.MustCompile(`^[0-9a-f]{128}$`)}
)

// Open opens (creating) a cache in dir.
func Open(dir string) (*Cache, error) {
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

// Path returns the entry of sha256 sum (lower-case hex) when the cache
// holds it, and marks it recently used (GC removes the least recently used
// first).
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

// Store streams an artifact into a locked temporary file: write copies its
// bytes to the writer it is given (and bounds them) and returns how many
// it wrote. check then judges the bytes by their sha256 (lower-case hex)
// and sha512 (raw) before they are kept as sha256/<hex>. On any error from
// write or check, nothing stays in the cache and that error is returned
// as it is, with the bytes written.
func (c *Cache) Store(write func(io.Writer) (int64, error), check func(sha256hex string, sha512 []byte) error) (path, sha256hex string, n int64, err error) {
	tmp, err := os.CreateTemp(filepath.Join(c.dir, "tmp"), "fetch-*")
	if err != nil {
		return "", "", 0, fmt.Errorf("package cache: %w", err)
	}
	// The lock says "being written" to GC in any process; the kernel drops
	// it if this one dies, which marks the file as garbage.
	if err := syscall.Flock(int(tmp.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", "", 0, fmt.Errorf("package cache: lock: %w", err)
	}
	fail := func(err error) (string, string, int64, error) {
		os.Remove(tmp.Name())
		tmp.Close()
		return "", "", n, err
	}
	h256, h512 := sha256.New(), sha512.New()
	n, err = write(io.MultiWriter(tmp, h256, h512))
	if err != nil {
		return fail(err)
	}
	sum := hex.EncodeToString(h256.Sum(nil))
	if err := check(sum, h512.Sum(nil)); err != nil {
		return fail(err)
	}
	if err := tmp.Chmod(0o444); err != nil {
		return fail(fmt.Errorf("package cache: %w", err))
	}
	if err := tmp.Sync(); err != nil {
		return fail(fmt.Errorf("package cache: %w", err))
	}
	// Rename while still holding the lock: GC never sees it unlocked.
	dst := c.entry(sum)
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fail(fmt.Errorf("package cache: %w", err))
	}
	tmp.Close()
	return dst, sum, n, nil
}

// Alias records that the entry sha256hex also has digest algo ("sha512")
// sum, both lower-case hex, so that Lookup finds it by that digest. The
// entry must be in the cache (Store returned it). The caller vouches that
// the digest is the entry's: Store's check is where it verifies it.
func (c *Cache) Alias(algo, sum, sha256hex string) error {
	re, ok := aliases[algo]
	if !ok || !re.MatchString(sum) || !sha256RE.MatchString(sha256hex) {
		return fmt.Errorf("package cache: alias %s %q of %q: not a known digest", algo, sum, sha256hex)
	}
	if _, ok := c.Path(sha256hex); !ok {
		return fmt.Errorf("package cache: alias of %s: the cache does not hold it", sha256hex)
	}
	dir := filepath.Join(c.dir, algo)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	target := filepath.Join("..", "sha256", sha256hex)
	link := filepath.Join(dir, sum)
	err := os.Symlink(target, link)
	if errors.Is(err, fs.ErrExist) {
		// The same bytes have the same sha256: another writer made this
		// very link, or one whose entry has since come back.
		if got, rerr := os.Readlink(link); rerr == nil && got == target {
			return nil
		}
		// Not ours (a digest collision would be news): replace it. A
		// writer racing this one makes the same link.
		os.Remove(link)
		err = os.Symlink(target, link)
		if errors.Is(err, fs.ErrExist) {
			if got, rerr := os.Readlink(link); rerr == nil && got == target {
				return nil
			}
		}
	}
	if err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	return nil
}

// Lookup finds an entry by another digest (an Alias): its path and
// sha256, marking it recently used. An alias whose entry GC removed is a
// miss.
func (c *Cache) Lookup(algo, sum string) (path, sha256hex string, ok bool) {
	re, known := aliases[algo]
	if !known || !re.MatchString(sum) {
		return "", "", false
	}
	target, err := os.Readlink(filepath.Join(c.dir, algo, sum))
	if err != nil || filepath.Dir(target) != filepath.Join("..", "sha256") {
		return "", "", false
	}
	sha256hex = filepath.Base(target)
	p, ok := c.Path(sha256hex)
	if !ok {
		return "", "", false
	}
	return p, sha256hex, true
}

// GCResult says what a GC did.
type GCResult struct {
	Removed, Kept           int   // entries removed and left
	RemovedBytes, KeptBytes int64 // their sizes
	Partial                 int   // abandoned partial downloads removed
	Aliases                 int   // aliases removed because their entry was gone
}

// GC removes abandoned partial downloads (older than a minute, and held by
// no writer's lock), then the least recently used entries until the
// entries total at most maxBytes, then the aliases of entries no longer
// held. An entry a caller got from Path, Lookup or Store may be removed
// under it: open it before a GC can run, or hold the installs and GC
// apart.
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
		if info, err := de.Info(); err != nil || time.Since(info.ModTime()) < time.Minute || !info.Mode().IsRegular() {
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

	for algo := range aliases {
		adir := filepath.Join(c.dir, algo)
		des, err := os.ReadDir(adir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return res, fmt.Errorf("package cache: %w", err)
		}
		for _, de := range des {
			p := filepath.Join(adir, de.Name())
			// Stat follows the link: an error is a dangling alias (or an
			// abandoned temporary link), which no one can use.
			if _, err := os.Stat(p); err == nil {
				continue
			}
			if os.Remove(p) == nil {
				res.Aliases++
			}
		}
	}
	return res, nil
}
