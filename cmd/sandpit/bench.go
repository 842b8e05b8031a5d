package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/internal/bench"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure sandpit against bare python, runc run, ctr and docker on this host, side by side",
		Description: `Runs the same program (print(1); a C hello world) through every path
interleaved in one run, and prints medians, p90, min/max and ratios against the
host and against ` + "`runc run`" + ` of a bundle with sandpit's own isolation.
Needs root and containerd; cleans up everything it created. Example:
   sudo sandpit bench --n 30 --concurrency 1,8

With --http it measures ` + "`sandpit serve --listen`" + ` instead, with real
Streamable HTTP clients on loopback: warm run_code over HTTP against over
stdio (http-latency), many clients at once (http-concurrent), one tenant
while another runs flat out (http-fair), run_code under a flood of
unauthenticated requests (http-flood), and the server's memory with many
idle sessions open (http-idle); --only picks parts. Example:
   sudo sandpit bench --http --n 30

With --cluster-kubeconfig K (a running API server: scripts/k8s.sh up DIR)
--http also measures a cluster on this host (http-cluster): two node agents
and a front door (namespace sandpit; the bench applies the SandpitWorkspace
CRD): run_code through the front door against straight to the node,
placing a tenant, 8 tenants flat out with 2 nodes and with 1, and failover
after a node is SIGKILLed. Without it http-cluster is skipped. Example:
   sudo sandpit bench --http --only http-cluster --cluster-kubeconfig K`,
		Flags: append(containerdFlags(),
			&cli.IntFlag{Name: "n", Value: 30, Usage: "measured rounds (each runs every comparator once)"},
			&cli.IntFlag{Name: "warmup", Value: 3, Usage: "unmeasured rounds first"},
			&cli.DurationFlag{Name: "gap", Value: 500 * time.Millisecond, Usage: "untimed pause before each latency run, as between an agent's calls (background cleanup and pool refills happen in it); 0: back to back"},
			&cli.StringFlag{Name: "concurrency", Value: "1,8", Usage: "1 measures latency; each N>1 measures throughput with N concurrent clients"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
			&cli.StringSliceFlag{Name: "only", Usage: "comparators to run, e.g. host-python,runc-run,sandpit-cold"},
			&cli.StringSliceFlag{Name: "language", Value: cli.NewStringSlice("python", "c", "pydata", "session"), Usage: "python (all comparators), c (compile and run: host gcc against sandpit), pydata (python importing pandas and matplotlib.pyplot, against the host python with the same Debian packages), session (x += 1 in a session, over MCP and in-process, against a python REPL on the host) and/or session-df (a pandas DataFrame of 10^3 and 10^6 rows kept in a session and re-used, against rebuilding it; with the sessions' memory in the notes) and/or packages (print(1) in a workspace with a 50-wheel package layer against one without, from a local index; install_packages of 20 cached wheels in the notes)"},
			&cli.StringFlag{Name: "host-python", Value: "/usr/bin/python3", Usage: "the host interpreter (the python3 on PATH may be a slow shim)"},
			&cli.StringFlag{Name: "docker-image", Value: "python:3.11-slim", Usage: "image for docker-run and podman-run"},
			&cli.DurationFlag{Name: "budget", Value: 15 * time.Minute, Usage: "stop starting rounds after this long"},
			&cli.BoolFlag{Name: "cpu", Value: true, Usage: "measure CPU per run: every sandpit path runs in a cgroup of its own (server, shims, sandboxes)"},
			&cli.IntFlag{Name: "burst", Value: 20, Usage: "calls back to back, no gap, as an agent's burst (python; 0: none)"},
			&cli.IntFlag{Name: "burst-rounds", Value: 3, Usage: "bursts per comparator"},
			&cli.DurationFlag{Name: "burst-pause", Value: 3 * time.Second, Usage: "untimed pause before each burst"},
			&cli.BoolFlag{Name: "http", Usage: "measure serve --listen (MCP over HTTP) instead: parts " + strings.Join(bench.HTTPParts, ", ") + " (--only picks some)"},
			&cli.IntFlag{Name: "http-clients", Value: 50, Usage: "--http: clients at once in http-concurrent"},
			&cli.IntFlag{Name: "http-calls", Value: 20, Usage: "--http: run_code calls each of those clients makes"},
			&cli.IntFlag{Name: "http-idle", Value: 1000, Usage: "--http: initialized sessions held open in http-idle"},
			&cli.IntFlag{Name: "flood-rate", Value: 10000, Usage: "--http: unauthenticated requests per second in http-flood"},
			&cli.IntFlag{Name: "flood-connections", Value: 64, Usage: "--http: keep-alive connections the flood uses"},
			&cli.DurationFlag{Name: "load-time", Value: 10 * time.Second, Usage: "--http: how long the flood (and tenant A's load in http-fair) lasts; the quiet phases before and after last as long"},
			&cli.IntFlag{Name: "fair-clients", Value: 8, Usage: "--http: tenant A's clients running flat out in http-fair"},
			&cli.StringFlag{Name: "cluster-kubeconfig", Usage: "--http: the kubeconfig of a running Kubernetes API server for http-cluster (two node agents and a front door on this host; without it http-cluster is skipped)"},
			&cli.IntFlag{Name: "cluster-clients", Value: 8, Usage: "--http: tenants (one client each) running flat out in http-cluster's throughput, for --load-time with 2 nodes and with 1"},
		),
		Action: runBench,
	}
}

// runBench turns flags into a bench.SuiteConfig; the suite lives in
// internal/bench.
func runBench(c *cli.Context) error {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	concurrency, err := parseInts(c.String("concurrency"))
	if err != nil {
		return fmt.Errorf("--concurrency: %w", err)
	}
	addr, err := address(c)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The runtime flags this bench was given, so serve measures the same sandbox.
	var serveArgs []string
	for _, f := range []string{"namespace", "runtime", "runc-binary", "shim-dir", "rootfs-dir", "userns", "memory-mb", "pids", "cpus", "output-kb"} {
		serveArgs = append(serveArgs, fmt.Sprintf("--%s=%v", f, c.Value(f)))
	}
	if c.String("catalog") != "" { // the same languages on the same images
		serveArgs = append(serveArgs, "--catalog="+c.String("catalog"))
	}
	// Labels and dirs of this bench alone: two benches on one host (or one
	// beside a test) must never sweep each other's sandboxes.
	stateOnTmpfs(c) // as serve's: its servers' and runc's dirs are made under it
	prefix := fmt.Sprintf("bench-%d", os.Getpid())
	if c.IsSet("instance") {
		prefix = c.String("instance")
	}
	cfg := bench.SuiteConfig{
		Runtime:     runtimeConfig(c, addr),
		Dir:         filepath.Join(c.String("state-dir"), prefix),
		Prefix:      prefix,
		Only:        c.StringSlice("only"),
		Languages:   c.StringSlice("language"),
		HostPython:  c.String("host-python"),
		DockerImage: c.String("docker-image"),
		Concurrency: concurrency,
		NoCPU:       !c.Bool("cpu"),
		Burst:       c.Int("burst"),
		BurstRounds: c.Int("burst-rounds"),
		BurstPause:  c.Duration("burst-pause"),
		Options:     bench.Options{N: c.Int("n"), Warmup: c.Int("warmup"), Budget: c.Duration("budget"), Gap: c.Duration("gap")},
		ServeBinary: self,
		ServeArgs:   serveArgs,
		Version:     version,
		Command:     "sandpit " + strings.Join(os.Args[1:], " "),
	}
	var report *bench.Report
	if c.Bool("http") {
		report, err = bench.RunHTTP(ctx, bench.HTTPConfig{
			Suite:       cfg,
			Parts:       c.StringSlice("only"),
			Clients:     c.Int("http-clients"),
			Calls:       c.Int("http-calls"),
			Idle:        c.Int("http-idle"),
			FloodRate:   c.Int("flood-rate"),
			FloodConns:  c.Int("flood-connections"),
			LoadTime:    c.Duration("load-time"),
			FairClients: c.Int("fair-clients"),

			ClusterKubeconfig: c.String("cluster-kubeconfig"),
			ClusterClients:    c.Int("cluster-clients"),
		})
	} else {
		report, err = bench.Run(ctx, cfg)
	}
	if report != nil {
		var werr error
		if c.Bool("json") {
			werr = report.WriteJSON(c.App.Writer)
		} else {
			werr = report.WriteTable(c.App.Writer)
		}
		if err == nil {
			err = werr
		}
	}
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("interrupted: the report covers what ran before")
	}
	return err
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
