package main

import (
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/images"
	"github.com/sandpit-dev/sandpit/oci"
	"github.com/sandpit-dev/sandpit/runtime"
)

// containerdFlags say which containerd to use and how sandboxes run there.
func containerdFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "address", Usage: "containerd socket (default: the system daemon if it answers, else sandpit's private one, started on demand)", EnvVars: []string{"SANDPIT_CONTAINERD_ADDRESS"}},
		&cli.StringFlag{Name: "namespace", Value: "sandpit", Usage: "containerd namespace for sandboxes and images", EnvVars: []string{"SANDPIT_NAMESPACE"}},
		&cli.StringFlag{Name: "instance", Value: "default", Usage: "label scoping this server's sandboxes; the janitor removes only its own", EnvVars: []string{"SANDPIT_INSTANCE"}},
		privateDirFlag(),
		privateRootFlag(),
		&cli.BoolFlag{Name: "no-start", Usage: "never start a private containerd"},
		&cli.StringFlag{Name: "runtime", Value: "io.containerd.runc.v2", Usage: "containerd runtime (shim) name"},
		&cli.StringFlag{Name: "runc-binary", Value: "runc", Usage: "OCI runtime binary for the shim: runc, or runsc (gVisor) where installed"},
		&cli.StringFlag{Name: "state-dir", Value: "/run/sandpit/state", Usage: "per-run files and FIFOs"},
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

// runtimeConfig builds the runtime configuration from flags.
func runtimeConfig(c *cli.Context, addr string) runtime.Config {
	cfg := runtime.Config{
		Address:     addr,
		Namespace:   c.String("namespace"),
		Instance:    c.String("instance"),
		RuntimeName: c.String("runtime"),
		RuncBinary:  c.String("runc-binary"),
		StateDir:    c.String("state-dir"),
		Languages:   runtime.Languages(mustCatalog(c)),
		Limits: oci.Limits{
			MemoryBytes: c.Int64("memory-mb") << 20,
			PidsMax:     c.Int64("pids"),
			CPUs:        c.Float64("cpus"),
		},
		OutputBytes: c.Int64("output-kb") << 10,
		// Only serve defines these; elsewhere they read as zero: no pool.
		Pool:   runtime.PoolConfig{Size: c.Int("pool"), IdleTimeout: c.Duration("pool-idle")},
		Logger: slog.Default(),
	}
	cfg.Rootless = c.Bool("rootless") || runtime.IsRootless()
	cfg.AllowUnenforcedLimits = c.Bool("allow-unenforced-limits")
	cfg.Preflight, _ = runtime.ParsePreflightPolicy(c.String("preflight-deny-modules"), c.String("preflight-deny-builtins")) // validated by the flags' Action
	// Rootless, the daemon's own user namespace (rootlesskit's subuid map)
	// already maps sandboxes away from host ids; a nested map to the
	// sandbox range is impossible there.
	if c.Bool("userns") && !cfg.Rootless {
		m := oci.DefaultIDMap()
		cfg.UserNS = &m
	}
	return cfg
}

// newRuntime resolves containerd and builds the runtime. A daemon that cannot
// be reached is not fatal: the runtime reports it on every call.
func newRuntime(c *cli.Context) (*runtime.Runtime, error) {
	addr, err := address(c)
	if err != nil {
		slog.Warn("containerd unavailable; runs will fail until it is", "err", err)
	}
	return runtime.New(runtimeConfig(c, addr))
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
