// Package runtime runs programs in single-use sandboxes through containerd.
// It is the only package that holds a containerd client.
//
// The guarantee: every sandbox Run creates is labelled with the runtime's
// instance and state dir, gets the spec built by package oci, and is
// deleted — task, container, snapshot, FIFOs and per-run files — before Run
// returns, whatever the program did. What a crashed server left behind is removed by Sweep,
// which New's first connection runs.
package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/namespaces"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/images"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/oci"
)

// Label keys on every container and snapshot sandpit creates.
const (
	// LabelInstance is the runtime instance that owns it. Names are unique
	// only within one state dir: the janitor's key is this and LabelState
	// together (OwnerFilter).
	LabelInstance = "sandpit.instance"
	LabelRun      = "sandpit.run" // the run id
	// LabelState is the instance's state dir (absolute): with
	// LabelInstance it says whose a sandbox is, and a janitor finds the
	// sandboxes of dead instances under its state root by it.
	LabelState = "sandpit.state"
)

// Config configures a Runtime. Zero fields take the defaults in Defaults.
type Config struct {
	Address     string // containerd socket
	Namespace   string // containerd namespace
	Instance    string // label value that, with StateDir, scopes the janitor; one per server
	RuntimeName string // containerd runtime: io.containerd.runc.v2, or sandpit (RuntimeSandpit: a shim of its own)
	RuncBinary  string // OCI runtime binary name or path (runc, runsc…)
	RuncRoot    string // private runc state root
	// ShimDir holds sandpit's shim programs (containerd-shim-sandpit-v1,
	// sandpit-shim) for RuntimeSandpit; default: beside this executable.
	ShimDir string
	// CgroupParent, when set, is the cgroup every sandbox's cgroup is
	// created under (<parent>/<id>) instead of /<namespace>/<id>; ShimCgroup
	// is where shims go (see cgroupparent.go). Not for rootless daemons.
	CgroupParent string
	ShimCgroup   string
	// RootfsDir holds the runtime's shared read-only roots, one per image
	// (rootfs.go); default DefaultRootfsDir.
	RootfsDir   string
	Snapshotter string
	StateDir    string // per-run files and FIFOs

	Languages []LanguageSpec
	Limits    oci.Limits
	// CompileCPUs is the CPU quota of a compile step (compilers are
	// CPU-bound and trusted more than the program they build).
	CompileCPUs float64
	// UserNS maps sandbox ids into an unprivileged host range; nil runs
	// without a user namespace.
	UserNS      *oci.IDMap
	OutputBytes int64 // cap per stream
	// Pool keeps sandboxes started ahead of requests (see pool.go).
	Pool PoolConfig
	// Sessions bounds the sandboxes that outlive a call (see session.go).
	Sessions SessionConfig
	// NoInit runs each program as its sandbox's first process (PID 1)
	// instead of under a shell that runs waiter.py, and so without a pool.
	// Images without python3 always run that way. For comparisons only: a
	// program that is PID 1 loses signals it has no handler for.
	NoInit bool
	// Rootless says containerd runs rootless (rootlesskit). Where cgroup
	// limits cannot be enforced then, every run is refused with
	// ErrLimitsUnenforceable unless AllowUnenforcedLimits accepts rlimit
	// fallbacks, reported in each Result (see rootless.go).
	Rootless              bool
	AllowUnenforcedLimits bool
	// Preflight, when set, checks Python code against a policy inside a
	// sandbox before it runs (defence in depth; see preflight.go).
	Preflight *PreflightPolicy
	// DialTimeout bounds how long a call waits for containerd to answer.
	DialTimeout time.Duration

	Logger *slog.Logger
}

// Defaults fills zero fields.
func (c *Config) Defaults() {
	if c.Address == "" {
		c.Address = "/run/containerd/containerd.sock"
	}
	if c.Namespace == "" {
		c.Namespace = "sandpit"
	}
	if c.Instance == "" {
		c.Instance = "default"
	}
	if c.RuntimeName == "" {
		c.RuntimeName = "io.containerd.runc.v2"
	}
	if c.UsesShim() {
		c.shimDefaults()
	}
	if c.RuncBinary == "" {
		c.RuncBinary = "runc"
	}
	if c.RuncRoot == "" {
		c.RuncRoot = "/run/sandpit/runc"
	}
	if c.Snapshotter == "" {
		c.Snapshotter = "overlayfs"
	}
	if c.StateDir == "" {
		c.StateDir = "/run/sandpit/state"
	}
	// The state dir is half of the runtime's identity (OwnerFilter): the
	// same relative path from two working directories is two runtimes.
	if abs, err := filepath.Abs(c.StateDir); err == nil {
		c.StateDir = abs
	}
	if c.RootfsDir == "" {
		c.RootfsDir = DefaultRootfsDir
	}
	c.Limits = c.Limits.WithDefaults()
	if c.CompileCPUs <= 0 {
		c.CompileCPUs = 2
	}
	if c.OutputBytes <= 0 {
		c.OutputBytes = 64 << 10
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 3 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Runtime runs requests in fresh sandboxes. It is safe for concurrent use.
type Runtime struct {
	cfg   Config
	log   *slog.Logger
	langs map[string]*LanguageSpec

	tenants tenantActivity // who shares the warm pool (tenantshare.go)

	// dialMu serialises dialling and the first sweep; it is never taken
	// with mu held, and mu is never held across containerd calls.
	dialMu    sync.Mutex
	mu        sync.Mutex
	client    *containerd.Client
	swept     bool
	images    map[string]containerd.Image
	inits     map[string]bool // by image: whether it can run waiter.py
	version   string
	live      map[string]bool // run ids in progress, which Sweep must not touch
	bg        sync.WaitGroup  // cleanup running off the request path
	closing   chan struct{}   // closed by Close: background retries stop
	closeOnce sync.Once
	cgroups   *cgroupFS
	warmer    *migrationWarmer // keeps cgroup moves fast while sandboxes are created (cgwarm.go)
	delegMu   sync.Mutex
	deleg     *delegation      // rootless only: where sandbox cgroups go (rootless.go)
	pools     map[string]*pool // by image
	pooled    map[string]*pool // by language name
	sess      *sessions
	shimMu    sync.Mutex // guards shim; never held across a containerd call
	shim      *shimProc  // RuntimeSandpit: the running shim (shimproc.go)
	// cgroupMode is the host's cgroup layout, read once: it does not change
	// while the server runs, and reading mountinfo costs ~0.5 ms a run.
	cgroupMode host.CgroupMode
	rootMu     sync.Mutex            // guards roots; held while a root is made
	roots      map[string]sharedRoot // by image name: the shared roots (rootfs.go)
}

// New validates the configuration. It does not connect: containerd may come
// up later, and every Run reports clearly when it is not there.
func New(cfg Config) (*Runtime, error) {
	cfg.Defaults()
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	if err := cfg.Sessions.Validate(); err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	if len(cfg.Languages) == 0 {
		return nil, errors.New("no languages configured (use DefaultLanguages with the image ref)")
	}
	if cfg.UsesShim() {
		if err := cfg.CheckShim(); err != nil {
			return nil, err
		}
	}
	if err := cfg.CheckOCIBinary(); err != nil {
		return nil, err
	}
	if cfg.ShimCgroup != "" {
		if _, err := ensureCgroup(cfg.ShimCgroup); err != nil {
			return nil, fmt.Errorf("shim cgroup: %w", err)
		}
	}
	r := &Runtime{cfg: cfg, log: cfg.Logger, langs: map[string]*LanguageSpec{}, images: map[string]containerd.Image{}, inits: map[string]bool{}, live: map[string]bool{}, cgroups: newCgroupFS(), warmer: &migrationWarmer{log: cfg.Logger}, pools: map[string]*pool{}, pooled: map[string]*pool{}, closing: make(chan struct{}), roots: map[string]sharedRoot{}, cgroupMode: host.DetectCgroups()}
	for i := range cfg.Languages {
		l := &cfg.Languages[i]
		r.langs[l.Name] = l
		for _, a := range l.Aliases {
			r.langs[a] = l
		}
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "runs"), 0o711); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	r.startPools()
	r.sess = newSessions(r, cfg.Sessions)
	return r, nil
}

// Config returns the configuration in effect, defaults filled.
func (r *Runtime) Config() Config { return r.cfg }

// Settle waits until the sandboxes of finished runs are deleted (that
// happens after Run returns, off the request path).
func (r *Runtime) Settle() { r.bg.Wait() }

// Close waits for background cleanup and releases the containerd connection.
func (r *Runtime) Close() error {
	r.closeOnce.Do(func() { close(r.closing) })
	r.sess.closeAll()
	for _, p := range r.pools {
		p.close()
	}
	r.bg.Wait()
	r.stopShim() // after every sandbox is deleted
	cctx, cancel := context.WithTimeout(r.nsctx(context.Background()), r.cfg.DialTimeout)
	r.releaseRoots(cctx, r.currentClient())
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client != nil {
		err := r.client.Close()
		r.client = nil
		return err
	}
	return nil
}

func (r *Runtime) nsctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.cfg.Namespace)
}

// connect returns a live client, dialling (and sweeping, the first time) as
// needed. It never waits longer than DialTimeout for an absent daemon. The
// first sweep runs before any caller gets the client, so it cannot remove a
// sandbox created meanwhile; mu is not held during it (the sweep takes mu
// to ask which runs are live).
func (r *Runtime) connect(ctx context.Context) (*containerd.Client, error) {
	if c := r.currentClient(); c != nil {
		return c, nil
	}
	r.dialMu.Lock()
	defer r.dialMu.Unlock()
	if c := r.currentClient(); c != nil {
		return c, nil // another caller dialled while we waited
	}
	if _, err := os.Stat(r.cfg.Address); err != nil {
		return nil, &UnavailableError{Address: r.cfg.Address, Err: errors.New("socket does not exist")}
	}
	dctx, cancel := context.WithTimeout(ctx, r.cfg.DialTimeout)
	defer cancel()
	c, err := containerd.New(r.cfg.Address,
		containerd.WithDefaultNamespace(r.cfg.Namespace),
		containerd.WithTimeout(r.cfg.DialTimeout),
	)
	if err != nil {
		return nil, &UnavailableError{Address: r.cfg.Address, Err: err}
	}
	v, err := c.Version(dctx)
	if err != nil {
		c.Close()
		return nil, &UnavailableError{Address: r.cfg.Address, Err: err}
	}
	r.mu.Lock()
	first := !r.swept
	r.swept = true
	r.mu.Unlock()
	if first {
		if err := r.sweep(r.nsctx(ctx), c); err != nil {
			r.log.Warn("janitor: sweeping leftovers failed", "err", err)
		}
	}
	r.mu.Lock()
	r.client, r.version = c, v.Version
	r.mu.Unlock()
	return c, nil
}

func (r *Runtime) currentClient() *containerd.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.client
}

// dropClient forgets a client whose daemon went away, so the next call redials.
func (r *Runtime) dropClient(c *containerd.Client) {
	r.mu.Lock()
	dropped := r.client == c && c != nil
	if dropped {
		r.client.Close()
		r.client = nil
		// What the lost daemon held (sandboxes whose waits broke, pooled
		// ones made through the closed client) is swept at the next
		// connection, before anything new is created.
		r.swept = false
	}
	r.mu.Unlock()
	if dropped {
		r.log.Warn("containerd went away; reconnecting on the next call", "address", r.cfg.Address)
		for _, p := range r.pools {
			p.flush()
		}
	}
}

func (r *Runtime) image(ctx context.Context, c *containerd.Client, ref string) (containerd.Image, error) {
	r.mu.Lock()
	img, ok := r.images[ref]
	r.mu.Unlock()
	if ok {
		return img, nil
	}
	img, err := c.GetImage(ctx, ref)
	if err != nil {
		return nil, sandpit.WithHint(fmt.Errorf("image %s: %w", ref, errors.Join(ErrImageMissing, err)),
			"run `sandpit images build`; `sandpit serve` builds it by itself on first use, which takes a few minutes")
	}
	unpacked, err := img.IsUnpacked(ctx, r.cfg.Snapshotter)
	if err != nil || !unpacked {
		if err := img.Unpack(ctx, r.cfg.Snapshotter); err != nil {
			return nil, sandpit.WithHint(fmt.Errorf("image %s is not unpacked for %s: %w", ref, r.cfg.Snapshotter, errors.Join(ErrImageMissing, err)),
				"run `sandpit images build --force`")
		}
	}
	// Images sandpit builds record their python version; one that does not
	// may have no python3 to run the init with.
	spec, err := img.Spec(ctx)
	if err != nil {
		return nil, sandpit.WithHint(fmt.Errorf("image %s: read its config: %w", ref, errors.Join(ErrImageMissing, err)),
			"run `sandpit images build --force`")
	}
	_, hasInit := spec.Config.Labels[images.LabelVersionPrefix+"python"]
	r.mu.Lock()
	r.images[ref] = img
	r.inits[ref] = hasInit
	r.mu.Unlock()
	return img, nil
}

// hasInit reports whether runs on image go through sandpit's init
// (waiter.py); it is known once image was resolved.
func (r *Runtime) hasInit(image string) bool {
	if r.cfg.NoInit {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inits[image]
}

// Lookup resolves a language name or alias, case-insensitively.
func (r *Runtime) Lookup(name string) (*LanguageSpec, error) {
	l, ok := r.langs[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		var names []string
		for _, l := range r.cfg.Languages {
			names = append(names, l.Name)
		}
		return nil, fmt.Errorf("%w %q: supported languages are %s", ErrUnknownLanguage, name, strings.Join(names, ", "))
	}
	return l, nil
}

// Languages lists the configured languages with the versions recorded in
// their images, when the images can be read.
func (r *Runtime) Languages() []sandpit.Language {
	out := make([]sandpit.Language, 0, len(r.cfg.Languages))
	versions := r.imageVersions()
	for _, l := range r.cfg.Languages {
		v := versions[l.Image][images.LabelVersionPrefix+l.Name]
		if v == "" {
			v = "unknown (image not built yet)"
		}
		out = append(out, sandpit.Language{Name: l.Name, Image: l.Image, Version: v, Description: l.Description, Aliases: l.Aliases,
			Libraries: libraries(versions[l.Image], l.Name)})
	}
	return out
}

func (r *Runtime) imageVersions() map[string]map[string]string {
	out := map[string]map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.DialTimeout)
	defer cancel()
	ctx = r.nsctx(ctx)
	c, err := r.connect(ctx)
	if err != nil {
		return out
	}
	for _, l := range r.cfg.Languages {
		if _, ok := out[l.Image]; ok {
			continue
		}
		img, err := r.image(ctx, c, l.Image)
		if err != nil {
			continue
		}
		cfg, err := img.Spec(ctx)
		if err != nil {
			continue
		}
		out[l.Image] = cfg.Config.Labels
	}
	return out
}

func newRunID() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

func (r *Runtime) runcOptions() containerd.NewContainerOpts {
	return containerd.WithRuntime(r.cfg.RuntimeName, &options.Options{
		BinaryName: r.cfg.RuncBinary,
		Root:       r.cfg.RuncRoot,
		ShimCgroup: r.cfg.ShimCgroup,
	})
}
