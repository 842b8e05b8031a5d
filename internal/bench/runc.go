package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/leases"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/namespaces"
	coci "github.com/containerd/containerd/oci"
	"github.com/containerd/containerd/snapshots"
	"github.com/opencontainers/image-spec/identity"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/oci"
)

// RuncConfig describes the `runc run` baseline: the image's root filesystem
// mounted read-only from a containerd snapshot view, and a spec built from
// the same options a sandpit sandbox gets.
type RuncConfig struct {
	Client      *containerd.Client // the context passed to NewRunc carries its namespace
	Image       string
	Snapshotter string
	Binary      string // runc
	// Dir is the baseline's private directory (rootfs mount point, runc
	// root, bundles, sources). NewRunc clears what an interrupted earlier
	// run left there; Close removes it.
	Dir string
	// Key names the rootfs view snapshot; Labels go on it so that a leak
	// check by label finds it.
	Key    string
	Labels map[string]string
	// Source files, bound read-only at sandpit.SourceDir as sandpit binds a
	// run's source.
	Source map[string]string
	// Spec options after which only the rootfs and cgroup path are set:
	// oci.WithHardening(...) and oci.WithProcess(...).
	Spec []coci.SpecOpts
}

// Runc runs one bundle's program with `runc run`, each time as a new
// container with its own id and cgroup.
type Runc struct {
	cfg    RuncConfig
	ns     string
	spec   *coci.Spec
	rootfs string
	root   string // runc --root
	seq    atomic.Int64
	done   func(context.Context) error // ends the lease on the view
}

// NewRunc mounts the image's snapshot view and builds the spec.
func NewRunc(ctx context.Context, cfg RuncConfig) (_ *Runc, retErr error) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	if err := searchable(filepath.Dir(cfg.Dir)); err != nil {
		return nil, err
	}
	r := &Runc{cfg: cfg, ns: ns, rootfs: filepath.Join(cfg.Dir, "rootfs"), root: filepath.Join(cfg.Dir, "runc")}
	if err := r.clear(ctx); err != nil {
		return nil, fmt.Errorf("clear an earlier run's runc baseline: %w", err)
	}
	defer func() {
		if retErr != nil {
			r.Close(context.WithoutCancel(ctx))
		}
	}()
	// The sandbox's root must be able to traverse every directory on the
	// way to its rootfs and sources (it is an unprivileged host id under a
	// user namespace).
	for _, d := range []string{r.rootfs, filepath.Join(cfg.Dir, "runs"), filepath.Join(cfg.Dir, "src")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	for name, text := range cfg.Source {
		if err := os.WriteFile(filepath.Join(cfg.Dir, "src", name), []byte(text), 0o644); err != nil {
			return nil, err
		}
	}

	img, err := cfg.Client.GetImage(ctx, cfg.Image)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", cfg.Image, err)
	}
	if ok, err := img.IsUnpacked(ctx, cfg.Snapshotter); err != nil || !ok {
		if err := img.Unpack(ctx, cfg.Snapshotter); err != nil {
			return nil, fmt.Errorf("unpack %s: %w", cfg.Image, err)
		}
	}
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return nil, fmt.Errorf("image %s layers: %w", cfg.Image, err)
	}
	// The lease keeps garbage collection off the view; it expires by itself
	// if this process is killed.
	lctx, done, err := cfg.Client.WithLease(ctx, leases.WithExpiration(time.Hour))
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	r.done = done
	mounts, err := cfg.Client.SnapshotService(cfg.Snapshotter).View(lctx, cfg.Key, identity.ChainID(diffIDs).String(), snapshots.WithLabels(cfg.Labels))
	if err != nil {
		return nil, fmt.Errorf("snapshot view: %w", err)
	}
	if err := mount.All(mounts, r.rootfs); err != nil {
		return nil, fmt.Errorf("mount rootfs: %w", err)
	}

	opts := append(append([]coci.SpecOpts(nil), cfg.Spec...),
		oci.WithBind(filepath.Join(cfg.Dir, "src"), sandpit.SourceDir, false, false))
	spec, err := coci.GenerateSpec(ctx, cfg.Client, &containers.Container{ID: "bench"}, opts...)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	spec.Root = &specs.Root{Path: r.rootfs, Readonly: true}
	r.spec = spec
	return r, nil
}

// Run runs the program once in a new container and returns its stdout.
// Like containerd, it writes the bundle's config.json per container (whose
// cgroup path is /<namespace>/<id>); the rootfs mount is shared.
func (r *Runc) Run(ctx context.Context) ([]byte, error) {
	id := fmt.Sprintf("bench-%d-%d", os.Getpid(), r.seq.Add(1))
	bundle := filepath.Join(r.cfg.Dir, "runs", id)
	if err := os.Mkdir(bundle, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(bundle)
	spec := *r.spec
	linux := *spec.Linux
	linux.CgroupsPath = "/" + r.ns + "/" + id
	spec.Linux = &linux
	b, err := json.Marshal(&spec)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.cfg.Binary, "--root", r.root, "run", "--bundle", bundle, id)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			r.runc(context.WithoutCancel(ctx), "delete", "--force", id)
		}
		return nil, fmt.Errorf("runc run: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Close deletes any container still known to runc, unmounts the rootfs,
// removes the view and the directory.
func (r *Runc) Close(ctx context.Context) error {
	err := r.clear(ctx)
	if r.done != nil {
		err = errors.Join(err, r.done(ctx))
		r.done = nil
	}
	return err
}

// clear removes the baseline's containers, mount, snapshot and directory.
func (r *Runc) clear(ctx context.Context) error {
	var errs []error
	if out, err := r.runc(ctx, "list", "--quiet"); err == nil {
		for _, id := range strings.Fields(out) {
			if _, err := r.runc(ctx, "delete", "--force", id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := mount.UnmountAll(r.rootfs, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("unmount %s: %w", r.rootfs, err))
	}
	if err := r.cfg.Client.SnapshotService(r.cfg.Snapshotter).Remove(ctx, r.cfg.Key); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("remove snapshot %s: %w", r.cfg.Key, err))
	}
	if len(errs) == 0 {
		// Never delete under a rootfs that may still be mounted.
		if err := os.RemoveAll(r.cfg.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// searchable checks that every directory from dir up is searchable by
// others: under a user namespace the sandbox's root is an unprivileged host
// uid, and runc's init must reach the rootfs as that uid.
func searchable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err == nil && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is mode %o: the sandbox's root (an unprivileged host uid under the user namespace) cannot reach a rootfs below it (hint: chmod o+x %s, or point --state-dir elsewhere)", d, fi.Mode().Perm(), d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func (r *Runc) runc(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.cfg.Binary, append([]string{"--root", r.root}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("runc %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
