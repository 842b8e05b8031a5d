package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/images"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/internal/instance"
	"github.com/sandpit-dev/sandpit/oci"
	"github.com/sandpit-dev/sandpit/runtime"
	"github.com/sandpit-dev/sandpit/store/ledger"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// containerdFlags say which containerd to use and how sandboxes run there.
func containerdFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "address", Usage: "containerd socket (default: the system daemon if it answers, else sandpit's private one, started on demand)", EnvVars: []string{"SANDPIT_CONTAINERD_ADDRESS"}},
		&cli.StringFlag{Name: "namespace", Value: "sandpit", Usage: "containerd namespace for sandboxes and images", EnvVars: []string{"SANDPIT_NAMESPACE"}},
		&cli.StringFlag{Name: "instance", Usage: "this process's instance: it holds a lock on it for its life, labels its sandboxes with it and keeps its state under <state-dir>/instances/NAME (default: the first free of default, default-2, ...)", EnvVars: []string{"SANDPIT_INSTANCE"}},
		privateDirFlag(),
		privateRootFlag(),
		&cli.BoolFlag{Name: "no-start", Usage: "never start a private containerd"},
		&cli.StringFlag{Name: "runtime", Usage: "containerd runtime (shim): sandpit, sandpit's own (one shim per instance serving every sandbox, the default), or io.containerd.runc.v2 (a shim per sandbox; the default rootless)"},
		&cli.StringFlag{Name: "cgroup-parent", Usage: "cgroup under which each sandbox's cgroup is created (default: /<namespace>/<id>, containerd's)"},
		&cli.StringFlag{Name: "shim-cgroup", Usage: "cgroup the shims are moved into (default: where they start)"},
		&cli.StringFlag{Name: "rootfs-dir", Value: runtime.DefaultRootfsDir, Usage: "where each instance mounts its read-only image roots (must be searchable by others: sandboxes run as unprivileged host ids)"},
		&cli.StringFlag{Name: "shim-dir", Usage: "where containerd-shim-sandpit-v1, sandpit-shim and sandpit-shim-init are, for --runtime sandpit (default: beside this binary)", EnvVars: []string{"SANDPIT_SHIM_DIR"}},
		&cli.StringFlag{Name: "runc-binary", Value: "runc", Usage: "OCI runtime binary for --runtime io.containerd.runc.v2 (sandpit's own shim runs none and refuses any but runc); sandpit is tested with runc only, gVisor's runsc is not supported"},
		&cli.StringFlag{Name: "state-dir", Value: "/run/sandpit/state", Usage: "per-instance state: run files, FIFOs, workspace views, instance locks"},
		&cli.BoolFlag{Name: "userns", Value: true, Usage: "run sandboxes in a user namespace mapped to an unprivileged host range"},
		&cli.Int64Flag{Name: "memory-mb", Value: 512, Usage: "memory limit per sandbox (MiB, no swap)"},
		&cli.Int64Flag{Name: "pids", Value: 128, Usage: "process limit per sandbox"},
		&cli.Float64Flag{Name: "cpus", Value: 1, Usage: "CPU quota per sandbox"},
		&cli.Int64Flag{Name: "output-kb", Value: 64, Usage: "output kept per stream (KiB); the rest is counted and dropped"},
		&cli.BoolFlag{Name: "rootless", Usage: "containerd runs rootless (scripts/rootless.sh); detected when sandpit itself runs without real root", EnvVars: []string{"SANDPIT_ROOTLESS"}},
		&cli.BoolFlag{Name: "allow-unenforced-limits", Usage: "rootless on cgroup v1: run anyway with weaker rlimit fallbacks, listed in every result (default: refuse to run)"},
		catalogFlag(),
		&cli.StringFlag{Name: "preflight-deny-modules", Usage: "comma-separated Python modules whose import rejects the code before it runs (defence in depth, parsed in a sandbox)", Action: validatePreflight},
		&cli.StringFlag{Name: "preflight-deny-builtins", Usage: "comma-separated Python builtins (eval, exec, ...) whose use rejects the code before it runs", Action: validatePreflight},
	}
}

// address resolves the containerd socket, starting the private daemon when
// allowed and needed. The error, if any, is also returned so callers that can
// run without a daemon (serve) log it and go on.
func address(c *cli.Context) (string, error) {
	return runtime.Resolve(c.Context, c.String("address"), privateDaemon(c), !c.Bool("no-start"), slog.Default())
}

func privateDaemon(c *cli.Context) runtime.PrivateDaemon {
	return runtime.PrivateDaemon{Dir: c.String("private-dir"), Root: c.String("private-root")}
}

// connectImages connects to the images of the configured containerd.
func connectImages(c *cli.Context) (*images.Store, error) {
	addr, err := address(c)
	if err != nil {
		return nil, err
	}
	s, err := images.Connect(c.Context, addr, c.String("namespace"), 3*time.Second)
	if err != nil {
		return nil, &runtime.UnavailableError{Address: addr, Err: err}
	}
	return s, nil
}

// runtimeConfig builds the runtime configuration from flags; the caller
// sets Instance and StateDir (see newRuntime).
func runtimeConfig(c *cli.Context, addr string) runtime.Config {
	cfg := runtime.Config{
		Address:      addr,
		Namespace:    c.String("namespace"),
		RuntimeName:  c.String("runtime"),
		RuncBinary:   c.String("runc-binary"),
		ShimDir:      c.String("shim-dir"),
		CgroupParent: c.String("cgroup-parent"),
		ShimCgroup:   c.String("shim-cgroup"),
		RootfsDir:    c.String("rootfs-dir"),
		Languages:    runtime.Languages(mustCatalog(c)),
		Limits: oci.Limits{
			MemoryBytes: c.Int64("memory-mb") << 20,
			PidsMax:     c.Int64("pids"),
			CPUs:        c.Float64("cpus"),
		},
		OutputBytes: c.Int64("output-kb") << 10,
		// Only serve defines these; elsewhere they read as zero: no pool.
		Pool:     runtime.PoolConfig{Size: c.Int("pool"), MaxSize: c.Int("pool-max"), Created: c.Int("pool-created"), IdleTimeout: c.Duration("pool-idle")},
		Sessions: runtime.SessionConfig{Max: c.Int("max-sessions"), Idle: c.Duration("session-idle"), MaxAge: c.Duration("session-max-age"), PerTenant: c.Int("tenant-max-sessions")},
		Logger:   slog.Default(),
	}
	if c.IsSet("max-sessions") && c.Int("max-sessions") == 0 {
		cfg.Sessions.Max = -1 // off
	}
	cfg.Rootless = c.Bool("rootless") || host.IsRootless()
	if cfg.RuntimeName == "" {
		// sandpit's shim creates sandboxes as root; a rootless daemon's go
		// through runc's shim.
		cfg.RuntimeName = runtime.RuntimeSandpit
		if cfg.Rootless {
			cfg.RuntimeName = "io.containerd.runc.v2"
		}
	}
	cfg.AllowUnenforcedLimits = c.Bool("allow-unenforced-limits")
	cfg.Preflight, _ = runtime.ParsePreflightPolicy(c.String("preflight-deny-modules"), c.String("preflight-deny-builtins")) // validated by the flags' Action
	switch {
	case !c.Bool("userns"):
	case cfg.Rootless:
		// Inside rootlesskit's user namespace (0 = the user running sandpit,
		// 1..65536 = their subordinate ids) sandboxes get a namespace of
		// their own in which the sandbox user is that user, as podman's
		// keep-id does: what a run writes in the workspace is theirs on the
		// host, and everything else maps to subordinate ids.
		owner := uint32(0)
		cfg.UserNS = &oci.IDMap{HostBase: 0, Size: 65536, Owner: &owner}
	default:
		m := oci.DefaultIDMap()
		cfg.UserNS = &m
	}
	return cfg
}

// newRuntime resolves containerd and builds the runtime of instance in. A
// daemon that cannot be reached is not fatal: the runtime reports it on
// every call.
func newRuntime(c *cli.Context, in *instance.Instance) (*runtime.Runtime, error) {
	addr, err := address(c)
	if err != nil {
		slog.Warn("containerd unavailable; runs will fail until it is", "err", err)
	}
	cfg := runtimeConfig(c, addr)
	cfg.Instance, cfg.StateDir = in.Name(), in.Dir()
	if c.String("listen") != "" {
		// Over HTTP each tenant's sessions are recorded in its data dir:
		// the next server (after a restart, or the node a workspace moves
		// to) says which were lost.
		where := "the server of instance " + in.Name()
		if n := c.String("cluster-node"); n != "" {
			where = "node " + n
		}
		data := c.String("data-dir")
		cfg.Sessions.Ledger = ledger.New(func(tenant string) string { return filepath.Join(data, "tenants", tenant, "sessions") }, where)
	}
	return runtime.New(cfg)
}

// stateOnTmpfs puts the default state dir on a tmpfs where /run is on disk
// (see runtime.StateOnTmpfs); failing that, sandpit runs as it is, slower.
// A state dir given with --state-dir is used as it is: its owner (a test, the
// bench's servers) may remove it, which a mount of sandpit's would prevent.
func stateOnTmpfs(c *cli.Context) {
	if c.IsSet("state-dir") {
		return
	}
	if _, err := runtime.StateOnTmpfs(c.String("state-dir"), slog.Default()); err != nil {
		slog.Warn("the state dir stays on disk", "dir", c.String("state-dir"), "err", err)
	}
}

// instanceRoot holds every instance's state and lock. It is absolute:
// an instance's dir is half of its identity (runtime.OwnerFilter), and the
// janitor compares it with the state labels of sandboxes.
func instanceRoot(c *cli.Context) string {
	root := filepath.Join(c.String("state-dir"), "instances")
	if abs, err := filepath.Abs(root); err == nil {
		return abs
	}
	return root
}

// acquireInstance takes --instance, or the first free of default,
// default-2, ... when none is given: two MCP clients launching
// scripts/serve.sh each get their own, and never touch each other's
// sandboxes.
func acquireInstance(c *cli.Context) (*instance.Instance, error) {
	stateOnTmpfs(c)
	root := instanceRoot(c)
	if name := c.String("instance"); name != "" {
		in, err := instance.Acquire(root, name)
		var busy *instance.BusyError
		if errors.As(err, &busy) {
			return nil, sandpit.WithHint(err, "another sandpit process uses it; give this one another --instance, or leave --instance out to get a free one")
		}
		return in, err
	}
	in, err := instance.AcquireFree(root, "default", 64)
	if err != nil {
		return nil, err
	}
	if in.Name() != "default" {
		slog.Info("instance default is held by another sandpit process; using "+in.Name(), "instance", in.Name())
	}
	return in, nil
}

// sweepDead removes what dead instances under the state dir left: their
// sandboxes (also those whose state dir is gone, found by label), run
// files and workspace views, then their dirs. It returns how many
// sandboxes it removed. Live instances are never touched: each one swept is
// held (its lock taken) while it is swept.
func sweepDead(c *cli.Context, addr string) (int, error) {
	root := instanceRoot(c)
	dead, err := instance.Dead(root)
	if err != nil {
		return 0, err
	}
	base := runtimeConfig(c, addr)
	base.Pool = runtime.PoolConfig{} // it only lists
	base.Instance = fmt.Sprintf("janitor-%d", os.Getpid())
	base.StateDir = filepath.Join(c.String("state-dir"), base.Instance)
	if probe, err := runtime.New(base); err == nil {
		states, err := probe.OrphanStates(c.Context, root)
		probe.Close()
		os.RemoveAll(base.StateDir)
		if err != nil {
			slog.Warn("janitor: cannot list sandboxes of dead instances", "err", err)
		}
		have := map[string]bool{}
		for _, in := range dead {
			have[in.Name()] = true
		}
		for _, st := range states {
			if filepath.Dir(st) != root || have[filepath.Base(st)] {
				continue
			}
			if in, err := instance.Acquire(root, filepath.Base(st)); err == nil {
				dead = append(dead, in)
			}
		}
	}
	var errs []error
	removed := 0
	for _, in := range dead {
		n, err := sweepInstance(c, addr, in)
		removed += n
		if err != nil {
			errs = append(errs, err)
			continue
		}
		slog.Info("janitor: removed a dead instance", "instance", in.Name(), "sandboxes", n)
	}
	return removed, errors.Join(errs...)
}

// sweepInstance removes everything of an instance the caller holds but did
// not run (its previous owner died): sandboxes, run files, workspace views,
// and then its dir.
func sweepInstance(c *cli.Context, addr string, in *instance.Instance) (int, error) {
	cfg := runtimeConfig(c, addr)
	cfg.Instance, cfg.StateDir, cfg.Pool = in.Name(), in.Dir(), runtime.PoolConfig{}
	rt, err := runtime.New(cfg)
	if err != nil {
		in.Release()
		return 0, fmt.Errorf("instance %s: %w", in.Name(), err)
	}
	n, err := rt.Sweep(c.Context)
	rt.Close()
	if err == nil {
		err = sweepInstanceViews(in.Dir())
	}
	if err != nil {
		in.Release()
		return n, fmt.Errorf("instance %s: %w", in.Name(), err)
	}
	return n, in.Remove()
}

// sweepInstanceViews unmounts and removes the run views under a dead
// instance's dir: its stdio workspace's, and each HTTP tenant's
// (tenants.go).
func sweepInstanceViews(dir string) error {
	errs := []error{workspace.SweepViews(filepath.Join(dir, "workspace"), slog.Default())}
	ents, err := os.ReadDir(filepath.Join(dir, "tenants"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range ents {
		if e.IsDir() {
			errs = append(errs, workspace.SweepViews(filepath.Join(dir, "tenants", e.Name()), slog.Default()))
		}
	}
	return errors.Join(errs...)
}

// catalogFlag names a catalog file read on top of the built-in one
// (images/catalog.toml): languages, images and which image runs which.
func catalogFlag() cli.Flag {
	return &cli.StringFlag{Name: "catalog", Usage: "TOML file of languages and image recipes read on top of the built-in catalog (see `sandpit images catalog`)", EnvVars: []string{images.EnvCatalog},
		Action: func(c *cli.Context, file string) error {
			_, err := images.LoadCatalog(file)
			return err
		}}
}

// mustCatalog is the catalog in effect; the flag's Action validated it.
func mustCatalog(c *cli.Context) *images.Catalog {
	cat, err := images.LoadCatalog(c.String("catalog"))
	if err != nil {
		panic(err) // the flag's Action rejected this file already
	}
	return cat
}

// validatePreflight rejects a pre-flight list that is not Python names at
// start-up: a security setting is never warned about and ignored.
func validatePreflight(c *cli.Context, _ string) error {
	_, err := runtime.ParsePreflightPolicy(c.String("preflight-deny-modules"), c.String("preflight-deny-builtins"))
	return err
}
