package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/mount"
	digest "github.com/opencontainers/go-digest"
)

// DefaultCacheDir holds built rootfs layers, outside any checkout.
const DefaultCacheDir = "/var/cache/sandpit/images"

// EnvCacheDir overrides DefaultCacheDir.
const EnvCacheDir = "SANDPIT_CACHE_DIR"

// Cache layout: CacheDir/<recipe key>/{layer.tar,meta.json}. A build works
// in CacheDir/.build-<key>-<random> and renames it into place only when
// complete, so a directory named by a key is always a whole entry.
const (
	layerFile    = "layer.tar"
	metaFile     = "meta.json"
	buildPrefix  = ".build-"
	lockPrefix   = ".lock-"
	retirePrefix = ".old-"
)

// entry is one cached rootfs: an uncompressed layer tar and what the build
// learnt about it.
type entry struct {
	Key     string            `json:"key"`
	DiffID  digest.Digest     `json:"diff_id"`
	Size    int64             `json:"size"`
	Labels  map[string]string `json:"labels"`
	Created time.Time         `json:"created"`
	Command string            `json:"command"`

	dir string
}

func (e entry) layerPath() string { return filepath.Join(e.dir, layerFile) }

// lookup returns the cached entry for key. A missing, unreadable or
// inconsistent entry is a miss (ok false), never an error: the caller
// rebuilds it.
func lookup(cacheDir, key string) (e entry, ok bool) {
	dir := filepath.Join(cacheDir, key)
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return entry{}, false
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Key != key || e.DiffID.Validate() != nil {
		return entry{}, false
	}
	e.dir = dir
	st, err := os.Stat(e.layerPath())
	if err != nil || st.Size() != e.Size {
		return entry{}, false
	}
	return e, true
}

// stepFunc fills a build directory: it must leave layer.tar there and
// return the entry that describes it.
type stepFunc func(ctx context.Context, dir string) (entry, error)

// buildEntry runs fill in a fresh temporary directory under cacheDir and
// renames the result to cacheDir/key. An interrupted or failed build leaves
// no entry; one already there is replaced only when replace is set.
func buildEntry(ctx context.Context, cacheDir, key string, replace bool, fill stepFunc) (entry, error) {
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return entry{}, fmt.Errorf("image cache %s: %w", cacheDir, err)
	}
	sweep(cacheDir)
	tmp, err := os.MkdirTemp(cacheDir, buildPrefix+key+"-")
	if err != nil {
		return entry{}, fmt.Errorf("image cache %s: %w", cacheDir, err)
	}
	defer removeTree(tmp)
	// The lock says "in progress" to sweepers in other processes; the
	// kernel drops it if this process dies, which marks the dir stale.
	unlock, err := lockDir(tmp, false)
	if err != nil {
		return entry{}, fmt.Errorf("image cache %s: %w", cacheDir, err)
	}
	defer unlock()

	e, err := fill(ctx, tmp)
	if err != nil {
		return entry{}, err
	}
	e.Key = key
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return entry{}, err
	}
	if err := writeFileSync(filepath.Join(tmp, metaFile), b); err != nil {
		return entry{}, fmt.Errorf("image cache: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return entry{}, err
	}

	final := filepath.Join(cacheDir, key)
	if replace {
		if err := retire(cacheDir, final); err != nil {
			return entry{}, err
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another build of the same recipe finished first: theirs is as
		// good as ours.
		if cached, ok := lookup(cacheDir, key); ok && (errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY)) {
			return cached, nil
		}
		return entry{}, fmt.Errorf("image cache: %w", err)
	}
	syncDir(cacheDir)
	e.dir = final
	return e, nil
}

// retire moves an existing entry out of the way (atomically) and removes it.
func retire(cacheDir, final string) error {
	old, err := os.MkdirTemp(cacheDir, retirePrefix)
	if err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	if err := os.Rename(final, filepath.Join(old, "entry")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		os.Remove(old)
		return fmt.Errorf("image cache: %w", err)
	}
	return os.RemoveAll(old)
}

// sweep removes build and retire directories that no live build holds:
// leftovers of interrupted builds.
func sweep(cacheDir string) {
	ents, err := os.ReadDir(cacheDir)
	if err != nil {
		return
	}
	for _, de := range ents {
		name := de.Name()
		if !de.IsDir() || !(strings.HasPrefix(name, buildPrefix) || strings.HasPrefix(name, retirePrefix)) {
			continue
		}
		dir := filepath.Join(cacheDir, name)
		unlock, err := lockDir(dir, true)
		if err != nil {
			continue // a live build holds it
		}
		removeTree(dir)
		unlock()
	}
}

// removeTree removes dir after unmounting anything below it: debootstrap
// mounts /proc and /sys in its target, and a killed run leaves them there.
// RemoveAll must never descend into a live /sys or /proc.
func removeTree(dir string) {
	if err := mount.UnmountRecursive(dir, syscall.MNT_DETACH); err != nil {
		return // leave it rather than risk deleting through a mount
	}
	os.RemoveAll(dir)
}

// lockDir takes an exclusive flock on dir; with nonblock it fails at once
// if another process holds it.
func lockDir(dir string, nonblock bool) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if nonblock {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// lockKey waits until this process is the only builder of key, or ctx ends.
func lockKey(ctx context.Context, cacheDir, key string, log *slog.Logger) (func(), error) {
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("image cache %s: %w", cacheDir, err)
	}
	f, err := os.OpenFile(filepath.Join(cacheDir, lockPrefix+key), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image cache %s: %w", cacheDir, err)
	}
	waiting := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("image cache %s: lock: %w", cacheDir, err)
		}
		if !waiting {
			log.Info("another process is building this image; waiting for it")
			waiting = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		f.Sync()
		f.Close()
	}
}
