// Package ctrd is sandpit's containerd engine (runtime/engine.Engine): it
// is the only package that holds a containerd client. It makes each
// sandbox from the hardening profile of package oci plus what the
// orchestration asks (engine.Spec), on a shared read-only root per image,
// under runc's shim or sandpit's own, and removes it — task, container,
// FIFOs — whatever the program did. What a crashed server left is removed
// by Sweep, which the first connection runs.
//
// It also owns what is containerd's business on the host: a private daemon
// (PrivateDaemon), its state on tmpfs, cgroup placement and rootless
// delegation, and the OCI runtime binary's checks.
package ctrd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/namespaces"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/oci"
	"github.com/sandpit-dev/sandpit/runtime/engine"
)

// Label keys on every container and snapshot the engine creates.
const (
	// LabelInstance is the runtime instance that owns it. Names are unique
	// only within one state dir: the janitor's key is this and LabelState
	// together (OwnerFilter).
	LabelInstance = "sandpit.instance"
	LabelRun      = "sandpit.run" // the sandbox id
	// LabelState is the instance's state dir (absolute): with
	// LabelInstance it says whose a sandbox is, and a janitor finds the
	// sandboxes of dead instances under its state root by it.
	LabelState = "sandpit.state"
)

// Errors of the engine, as package engine classes them.
var (
	ErrUnavailable         = engine.ErrUnavailable
	ErrImageMissing        = engine.ErrImageMissing
	ErrLimitsUnenforceable = engine.ErrLimitsUnenforceable
	ErrShimDied            = engine.ErrShimDied
)

// Config configures an Engine; runtime.Config says what each field means.
// Zero fields take defaults (Defaults).
type Config struct {
	Address      string
	Namespace    string
	Instance     string
	RuntimeName  string
	RuncBinary   string
	RuncRoot     string
	ShimDir      string
	CgroupParent string
	ShimCgroup   string
	RootfsDir    string
	Snapshotter  string
	StateDir     string

	// Profile is the hardening every sandbox gets (limits, user namespace,
	// the sandbox user).
	Profile oci.Profile
	// Limits is Profile.Limits, for the rootless fallback's rlimits.
	Limits                oci.Limits
	Rootless              bool
	AllowUnenforcedLimits bool
	DialTimeout           time.Duration

	// OnLost is called when sandboxes made earlier may be gone (containerd
	// or the shim went away): the orchestration drops what it pooled.
	OnLost func()
	// OnSweep is called after each sweep of this engine's sandboxes.
	OnSweep func() error

	Logger *slog.Logger
}

// Defaults fills zero fields.
func (c *Config) Defaults() {
	if c.Address == "" {
		c.Address = SystemAddress
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
	// The state dir is half of the engine's identity (OwnerFilter): the
	// same relative path from two working directories is two engines.
	if abs, err := filepath.Abs(c.StateDir); err == nil {
		c.StateDir = abs
	}
	if c.RootfsDir == "" {
		c.RootfsDir = DefaultRootfsDir
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 3 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Engine runs sandboxes through containerd. It is safe for concurrent use.
type Engine struct {
	cfg Config
	log *slog.Logger

	// dialMu serialises dialling and the first sweep; it is never taken
	// with mu held, and mu is never held across containerd calls.
	dialMu    sync.Mutex
	mu        sync.Mutex
	client    *containerd.Client
	swept     bool
	images    map[string]containerd.Image
	labels    map[string]map[string]string // by image ref: its config's labels
	version   string
	bg        sync.WaitGroup // removals running off the request path
	closing   chan struct{}  // closed by Close: background retries stop
	closeOnce sync.Once
	cgroups   *cgroupFS
	warmer    *migrationWarmer // keeps cgroup moves fast while sandboxes are created (cgwarm.go)
	delegMu   sync.Mutex
	deleg     *delegation           // rootless only: where sandbox cgroups go (rootless.go)
	shimMu    sync.Mutex            // guards shim; never held across a containerd call
	shim      *shimProc             // RuntimeSandpit: the running shim (shimproc.go)
	rootMu    sync.Mutex            // guards roots; held while a root is made
	roots     map[string]sharedRoot // by image name: the shared roots (rootfs.go)
}

var _ engine.Engine = (*Engine)(nil)

// New validates the configuration. It does not connect: containerd may come
// up later, and every call reports clearly when it is not there.
func New(cfg Config) (*Engine, error) {
	cfg.Defaults()
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
	return &Engine{cfg: cfg, log: cfg.Logger, images: map[string]containerd.Image{}, labels: map[string]map[string]string{},
		cgroups: newCgroupFS(), warmer: &migrationWarmer{log: cfg.Logger}, closing: make(chan struct{}), roots: map[string]sharedRoot{}}, nil
}

// Config returns the configuration in effect, defaults filled.
func (e *Engine) Config() Config { return e.cfg }

// Settle waits until sandboxes being removed off the request path are gone.
func (e *Engine) Settle() { e.bg.Wait() }

// Close waits for background removals, stops the shim, releases the shared
// roots and the containerd connection. Callers remove their sandboxes
// first.
func (e *Engine) Close() error {
	e.Closing()
	e.bg.Wait()
	e.stopShim() // after every sandbox is deleted
	cctx, cancel := context.WithTimeout(e.nsctx(context.Background()), e.cfg.DialTimeout)
	e.releaseRoots(cctx, e.currentClient())
	cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.client != nil {
		err := e.client.Close()
		e.client = nil
		return err
	}
	return nil
}

// Closing tells the engine its owner is closing: removals waiting for
// containerd to come back give up (the janitor of the next connection
// removes what they could not), so a shutdown does not wait a minute for a
// daemon that is gone. Close calls it too.
func (e *Engine) Closing() { e.closeOnce.Do(func() { close(e.closing) }) }

func (e *Engine) nsctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, e.cfg.Namespace)
}

// connect returns a live client, dialling (and sweeping, the first time) as
// needed. It never waits longer than DialTimeout for an absent daemon. The
// first sweep runs before any caller gets the client, so it cannot remove a
// sandbox created meanwhile; mu is not held during it.
func (e *Engine) connect(ctx context.Context) (*containerd.Client, error) {
	if c := e.currentClient(); c != nil {
		return c, nil
	}
	e.dialMu.Lock()
	defer e.dialMu.Unlock()
	if c := e.currentClient(); c != nil {
		return c, nil // another caller dialled while we waited
	}
	if _, err := os.Stat(e.cfg.Address); err != nil {
		return nil, &engine.UnavailableError{Address: e.cfg.Address, Err: errors.New("socket does not exist")}
	}
	dctx, cancel := context.WithTimeout(ctx, e.cfg.DialTimeout)
	defer cancel()
	c, err := containerd.New(e.cfg.Address,
		containerd.WithDefaultNamespace(e.cfg.Namespace),
		containerd.WithTimeout(e.cfg.DialTimeout),
	)
	if err != nil {
		return nil, &engine.UnavailableError{Address: e.cfg.Address, Err: err}
	}
	v, err := c.Version(dctx)
	if err != nil {
		c.Close()
		return nil, &engine.UnavailableError{Address: e.cfg.Address, Err: err}
	}
	e.mu.Lock()
	first := !e.swept
	e.swept = true
	e.mu.Unlock()
	if first {
		if err := e.sweep(e.nsctx(ctx), c); err != nil {
			e.log.Warn("janitor: sweeping leftovers failed", "err", err)
		}
	}
	e.mu.Lock()
	e.client, e.version = c, v.Version
	e.mu.Unlock()
	return c, nil
}

func (e *Engine) currentClient() *containerd.Client {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.client
}

// Ping dials when needed and returns containerd's version.
func (e *Engine) Ping(ctx context.Context) (string, error) {
	if _, err := e.connect(e.nsctx(ctx)); err != nil {
		return "", err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.version, nil
}

// Lost reports whether err means containerd went away (not a shim: the
// daemon is still there then); if so the client is dropped, so the next
// call redials, and the error to return is an UnavailableError.
func (e *Engine) Lost(err error) (bool, error) {
	if !isUnavailable(err) || errors.Is(err, ErrShimDied) {
		return false, err
	}
	e.dropClient(e.currentClient())
	var ue *engine.UnavailableError
	if errors.As(err, &ue) {
		return true, err
	}
	return true, &engine.UnavailableError{Address: e.cfg.Address, Err: err}
}

// dropClient forgets a client whose daemon went away, so the next call redials.
func (e *Engine) dropClient(c *containerd.Client) {
	e.mu.Lock()
	dropped := e.client == c && c != nil
	if dropped {
		e.client.Close()
		e.client = nil
		// What the lost daemon held (sandboxes whose waits broke, pooled
		// ones made through the closed client) is swept at the next
		// connection, before anything new is created.
		e.swept = false
	}
	e.mu.Unlock()
	if dropped {
		e.log.Warn("containerd went away; reconnecting on the next call", "address", e.cfg.Address)
		if e.cfg.OnLost != nil {
			e.cfg.OnLost()
		}
	}
}

// Image resolves ref, unpacking it for the snapshotter when needed, and
// caches it.
func (e *Engine) Image(ctx context.Context, ref string) (engine.Image, error) {
	ctx = e.nsctx(ctx)
	c, err := e.connect(ctx)
	if err != nil {
		return engine.Image{}, err
	}
	if _, err := e.image(ctx, c, ref); err != nil {
		if isUnavailable(err) {
			e.dropClient(c)
			return engine.Image{}, &engine.UnavailableError{Address: e.cfg.Address, Err: err}
		}
		return engine.Image{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return engine.Image{Ref: ref, Labels: e.labels[ref]}, nil
}

func (e *Engine) image(ctx context.Context, c *containerd.Client, ref string) (containerd.Image, error) {
	e.mu.Lock()
	img, ok := e.images[ref]
	e.mu.Unlock()
	if ok {
		return img, nil
	}
	img, err := c.GetImage(ctx, ref)
	if err != nil {
		return nil, sandpit.WithHint(fmt.Errorf("image %s: %w", ref, errors.Join(ErrImageMissing, err)),
			"run `sandpit images build`; `sandpit serve` builds it by itself on first use, which takes a few minutes")
	}
	unpacked, err := img.IsUnpacked(ctx, e.cfg.Snapshotter)
	if err != nil || !unpacked {
		if err := img.Unpack(ctx, e.cfg.Snapshotter); err != nil {
			return nil, sandpit.WithHint(fmt.Errorf("image %s is not unpacked for %s: %w", ref, e.cfg.Snapshotter, errors.Join(ErrImageMissing, err)),
				"run `sandpit images build --force`")
		}
	}
	spec, err := img.Spec(ctx)
	if err != nil {
		return nil, sandpit.WithHint(fmt.Errorf("image %s: read its config: %w", ref, errors.Join(ErrImageMissing, err)),
			"run `sandpit images build --force`")
	}
	e.mu.Lock()
	e.images[ref] = img
	e.labels[ref] = spec.Config.Labels
	e.mu.Unlock()
	return img, nil
}

// Limits reports whether runs must be refused and which limits are not
// enforced (rootless.go).
func (e *Engine) Limits() (unenforced []string, refuse error) {
	f := e.fallback()
	return f.unenforced, f.err
}

func (e *Engine) runcOptions() containerd.NewContainerOpts {
	return containerd.WithRuntime(e.cfg.RuntimeName, &options.Options{
		BinaryName: e.cfg.RuncBinary,
		Root:       e.cfg.RuncRoot,
		ShimCgroup: e.cfg.ShimCgroup,
	})
}

// background runs removals off the request path; Close waits for them.
func (e *Engine) background(fn func()) {
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		fn()
	}()
}
