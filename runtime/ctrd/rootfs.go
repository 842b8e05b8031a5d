package ctrd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/mount"
	coci "github.com/containerd/containerd/oci"
	"github.com/containerd/containerd/snapshots"
	"github.com/containerd/platforms"
	"github.com/opencontainers/image-spec/identity"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// One root filesystem per image, shared by every sandbox of a runtime. A
// sandbox's root was a view snapshot of its own — a read-only bind mount of
// the image's committed layer, made and removed through containerd for
// every sandbox (two metadata transactions with fsync each way, and a mount
// and an unmount in the shim). The runtime now makes one such view per
// image, mounts it once under RootfsDir (ro,nosuid,nodev), and gives
// sandboxes its path as their read-only root: the same layer directory,
// bound read-only, seen by each sandbox in its own mount namespace. The view is labelled with the
// instance (LabelRootfsInstance: the janitor unmounts and removes a dead
// instance's) and with containerd.io/gc.root (no lease outlives a crash).

// Labels of a shared root view: where it is mounted, and its runtime's
// instance. Not LabelInstance, which marks what is made per run: the view
// lives as long as its runtime.
const (
	LabelRootfs         = "sandpit.rootfs"
	LabelRootfsInstance = "sandpit.rootfs.instance"
)

// DefaultRootfsDir holds the shared roots of every runtime on the host. It
// must be searchable by others: a user-namespaced sandbox's root is an
// unprivileged host uid that must reach its rootfs by path.
const DefaultRootfsDir = "/run/sandpit/rootfs"

// sharedRoot is a mounted view.
type sharedRoot struct {
	key, dir string
	// mnt is the mount's id (statx STATX_MNT_ID) when it was made, 0 where
	// the kernel does not say: a root whose dir no longer has that mount
	// was lost (unmounted by an operator, or by another process's
	// janitor) and is made again.
	mnt uint64
}

// mountID is the id of the mount path is on, or 0 when the kernel does
// not report one (before Linux 5.8) or path cannot be read.
func mountID(path string) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, err
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return 0, nil
	}
	return stx.Mnt_id, nil
}

// present says whether the root is still mounted where it was made.
func (sr sharedRoot) present() bool {
	id, err := mountID(sr.dir)
	if err != nil {
		return false
	}
	return sr.mnt == 0 || id == sr.mnt
}

// rootfsOpts are the container options of a sandbox on image img: its
// shared root, read-only. The caller holds no lock.
func (e *Engine) rootfsOpts(ctx context.Context, c *containerd.Client, img containerd.Image) (coci.SpecOpts, error) {
	dir, err := e.sharedRootfs(ctx, c, img)
	if err != nil {
		return nil, err
	}
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		s.Root = &specs.Root{Path: dir, Readonly: true}
		return nil
	}, nil
}

// sharedRootfs returns the mounted root of img, making it the first time.
func (e *Engine) sharedRootfs(ctx context.Context, c *containerd.Client, img containerd.Image) (string, error) {
	e.rootMu.Lock()
	defer e.rootMu.Unlock()
	if sr, ok := e.roots[img.Name()]; ok {
		if sr.present() {
			return sr.dir, nil
		}
		// Sandboxes already made keep the old one (their mount namespace
		// holds it); new ones get a fresh view.
		e.log.Warn("shared root lost; making it again", "dir", sr.dir, "image", img.Name())
		delete(e.roots, img.Name())
	}
	// Through the current client: img may come from one containerd lost
	// since (its cache outlives a reconnection).
	md := img.Metadata()
	diffIDs, err := md.RootFS(ctx, c.ContentStore(), platforms.Default())
	if err != nil {
		return "", fmt.Errorf("image %s layers: %w", img.Name(), err)
	}
	chain := identity.ChainID(diffIDs).String()
	sum := sha256.Sum256([]byte(e.cfg.StateDir + "\x00" + chain))
	name := hex.EncodeToString(sum[:8])
	dir := filepath.Join(e.instanceRootfsDir(), name)
	key := "sandpit-rootfs-" + e.cfg.Instance + "-" + name
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("shared root: %w", err)
	}
	sn := c.SnapshotService(e.cfg.Snapshotter)
	// An earlier runtime of this instance (crashed, or swept meanwhile)
	// may have left both.
	unix.Unmount(dir, unix.MNT_DETACH)
	if err := sn.Remove(ctx, key); err != nil && !errdefs.IsNotFound(err) {
		return "", fmt.Errorf("shared root: remove stale view %s: %w", key, err)
	}
	labels := map[string]string{
		LabelRootfsInstance:     e.cfg.Instance,
		LabelState:              e.cfg.StateDir,
		LabelRootfs:             dir,
		"containerd.io/gc.root": time.Now().UTC().Format(time.RFC3339),
	}
	mounts, err := sn.View(ctx, key, chain, snapshots.WithLabels(labels))
	if err != nil {
		return "", fmt.Errorf("shared root: view of %s: %w", img.Name(), err)
	}
	if err := mount.All(mounts, dir); err != nil {
		sn.Remove(context.WithoutCancel(ctx), key)
		return "", fmt.Errorf("shared root: mount %s: %w", dir, err)
	}
	// The mount is on the host, at a path mountinfo shows everyone, under
	// directories others may search: no setuid binary of the image may
	// give a local user root, no device node of it may be opened. (In a
	// sandbox no_new_privs disables setuid already, and /dev is its own.)
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		sn.Remove(context.WithoutCancel(ctx), key)
		return "", fmt.Errorf("shared root: remount %s ro,nosuid,nodev: %w", dir, err)
	}
	mnt, err := mountID(dir)
	if err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		sn.Remove(context.WithoutCancel(ctx), key)
		return "", fmt.Errorf("shared root: %s: %w", dir, err)
	}
	e.roots[img.Name()] = sharedRoot{key: key, dir: dir, mnt: mnt}
	return dir, nil
}

// instanceRootfsDir is this runtime's directory under RootfsDir: named for
// the instance and its state dir, so that two runtimes never share one.
func (e *Engine) instanceRootfsDir() string {
	sum := sha256.Sum256([]byte(e.cfg.StateDir))
	return filepath.Join(e.cfg.RootfsDir, sanitize(e.cfg.Instance)+"-"+hex.EncodeToString(sum[:4]))
}

// ownsRootDir says whether dir, a shared root's mount point, is one this
// runtime's identity makes: <any rootfs dir>/<instanceRootfsDir's name>/<name>.
func (e *Engine) ownsRootDir(dir string) bool {
	dir = filepath.Clean(dir)
	return filepath.IsAbs(dir) && filepath.Base(filepath.Dir(dir)) == filepath.Base(e.instanceRootfsDir())
}

func sanitize(s string) string {
	return strings.Map(func(c rune) rune {
		if c == '-' || c == '_' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			return c
		}
		return '_'
	}, s)
}

// releaseRoots unmounts and removes the shared roots (Close: every sandbox
// is gone).
func (e *Engine) releaseRoots(ctx context.Context, c *containerd.Client) {
	e.rootMu.Lock()
	roots := e.roots
	e.roots = map[string]sharedRoot{}
	e.rootMu.Unlock()
	for _, sr := range roots {
		if err := unmountRoot(sr.dir); err != nil {
			e.log.Warn("shared root left mounted; the janitor retries", "dir", sr.dir, "err", err)
			continue
		}
		if c != nil {
			if err := c.SnapshotService(e.cfg.Snapshotter).Remove(ctx, sr.key); err != nil && !errdefs.IsNotFound(err) {
				e.log.Warn("shared root view not removed; the janitor retries", "key", sr.key, "err", err)
			}
		}
	}
	os.Remove(e.instanceRootfsDir())
}

// forgetRoots drops the cache after a sweep removed the views.
func (e *Engine) forgetRoots() {
	e.rootMu.Lock()
	e.roots = map[string]sharedRoot{}
	e.rootMu.Unlock()
}

// unmountRoot detaches a shared root and removes its mount point. Only a
// directory under a rootfs dir that is no longer a mount point is removed,
// and only with rmdir.
func unmountRoot(dir string) error {
	for unix.Unmount(dir, unix.MNT_DETACH) == nil {
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// isSharedRoot says whether a snapshot is a shared root view, and where it
// is mounted.
func isSharedRoot(info snapshots.Info) (string, bool) {
	dir, ok := info.Labels[LabelRootfs]
	return dir, ok && filepath.IsAbs(dir)
}
