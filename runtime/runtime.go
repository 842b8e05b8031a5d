// Package runtime runs programs in single-use sandboxes: it is sandpit's
// orchestration — requests, languages, limits, pre-flight, output capping,
// the warm pool, sessions, usage — over a container engine
// (runtime/engine), which is containerd's (runtime/ctrd).
//
// The guarantee: every sandbox Run creates is made by the engine, labelled
// with the runtime's instance and state dir, with the spec built by
// package oci, and is deleted — task, container, snapshot, FIFOs and
// per-run files — once Run returns, whatever the program did. What a
// crashed server left behind is removed by Sweep, which the engine's first
// connection runs.
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

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/images"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/oci"
	"github.com/sandpit-dev/sandpit/runtime/ctrd"
	"github.com/sandpit-dev/sandpit/runtime/engine"
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
	// is where shims go (see ctrd/cgroupparent.go). Not for rootless daemons.
	CgroupParent string
	ShimCgroup   string
	// RootfsDir holds the runtime's shared read-only roots, one per image
	// (ctrd/rootfs.go); default DefaultRootfsDir.
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
	// fallbacks, reported in each Result (see ctrd/rootless.go).
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
	// The engine's fields take the engine's defaults (ctrd.Config.Defaults).
	e := c.engineConfig()
	e.Defaults()
	c.Address, c.Namespace, c.Instance, c.RuntimeName, c.RuncBinary, c.RuncRoot = e.Address, e.Namespace, e.Instance, e.RuntimeName, e.RuncBinary, e.RuncRoot
	c.ShimDir, c.Snapshotter, c.StateDir, c.RootfsDir = e.ShimDir, e.Snapshotter, e.StateDir, e.RootfsDir
	c.DialTimeout, c.Logger = e.DialTimeout, e.Logger
	c.Limits = c.Limits.WithDefaults()
	if c.CompileCPUs <= 0 {
		c.CompileCPUs = 2
	}
	if c.OutputBytes <= 0 {
		c.OutputBytes = 64 << 10
	}
}

// Runtime runs requests in fresh sandboxes. It is safe for concurrent use.
type Runtime struct {
	cfg   Config
	log   *slog.Logger
	langs map[string]*LanguageSpec

	// eng makes the sandboxes; ctrd is the same engine, for what only
	// containerd's does (OrphanStates, Settle).
	eng  engine.Engine
	ctrd *ctrd.Engine

	tenants tenantActivity // who shares the warm pool (tenantshare.go)

	mu        sync.Mutex
	inits     map[string]bool // by image: whether it can run waiter.py
	live      map[string]bool // run ids in progress, which Sweep must not touch
	bg        sync.WaitGroup  // cleanup running off the request path
	closing   chan struct{}   // closed by Close: background retries stop
	closeOnce sync.Once
	pools     map[string]*pool // by image
	pooled    map[string]*pool // by language name
	sess      *sessions
	// cgroupMode is the host's cgroup layout, read once: it does not change
	// while the server runs, and reading mountinfo costs ~0.5 ms a run.
	cgroupMode host.CgroupMode
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
	r := &Runtime{cfg: cfg, log: cfg.Logger, langs: map[string]*LanguageSpec{}, inits: map[string]bool{}, live: map[string]bool{}, pools: map[string]*pool{}, pooled: map[string]*pool{}, closing: make(chan struct{}), cgroupMode: host.DetectCgroups()}
	ecfg := cfg.engineConfig()
	ecfg.Profile = oci.Profile{Limits: cfg.Limits, UserNS: cfg.UserNS, UID: sandpit.SandboxUID, GID: sandpit.SandboxGID}
	ecfg.OnLost = r.flushPools
	ecfg.OnSweep = r.sweepRunDirs
	e, err := ctrd.New(ecfg)
	if err != nil {
		return nil, err
	}
	r.eng, r.ctrd = e, e
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
func (r *Runtime) Settle() {
	r.bg.Wait()
	r.ctrd.Settle()
}

// Close removes the sessions' and the pool's sandboxes, waits for
// background cleanup and releases the engine.
func (r *Runtime) Close() error {
	r.closeOnce.Do(func() { close(r.closing) })
	r.ctrd.Closing() // removals retrying against a lost daemon stop waiting
	r.sess.closeAll()
	for _, p := range r.pools {
		p.close()
	}
	r.bg.Wait()
	return r.eng.Close()
}

// flushPools drops every pooled sandbox: the engine lost them (containerd
// or the shim went away).
func (r *Runtime) flushPools() {
	for _, p := range r.pools {
		p.flush()
	}
}

// OrphanStates lists the state dirs under root of sandboxes in this
// runtime's containerd namespace (ctrd.Engine.OrphanStates).
func (r *Runtime) OrphanStates(ctx context.Context, root string) ([]string, error) {
	return r.ctrd.OrphanStates(ctx, root)
}

// Sweep removes every sandbox of this runtime's instance and state dir
// (what a crashed server left), and the per-run dirs no run in progress
// owns; it returns how many sandboxes it removed.
func (r *Runtime) Sweep(ctx context.Context) (int, error) { return r.eng.Sweep(ctx) }

// image resolves ref through the engine and notes whether its runs can go
// through sandpit's init: images sandpit builds record their python
// version; one that does not may have no python3 to run the init with.
func (r *Runtime) image(ctx context.Context, ref string) (engine.Image, error) {
	img, err := r.eng.Image(ctx, ref)
	if err != nil {
		return img, err
	}
	_, hasInit := img.Labels[images.LabelVersionPrefix+"python"]
	r.mu.Lock()
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
	if _, err := r.eng.Ping(ctx); err != nil {
		return out
	}
	for _, l := range r.cfg.Languages {
		if _, ok := out[l.Image]; ok {
			continue
		}
		img, err := r.image(ctx, l.Image)
		if err != nil {
			continue
		}
		out[l.Image] = img.Labels
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
