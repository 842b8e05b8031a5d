package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	coci "github.com/containerd/containerd/oci"
	"github.com/containerd/containerd/snapshots"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/images"
	"github.com/sandpit-dev/sandpit/internal/bench"
	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/oci"
	"github.com/sandpit-dev/sandpit/runtime"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure sandpit against bare python, runc run, ctr and docker on this host, side by side",
		Description: `Runs the same program (print(1); a C hello world) through every path
interleaved in one run, and prints medians, p90, min/max and ratios against the
host and against ` + "`runc run`" + ` of a bundle with sandpit's own isolation.
Needs root and containerd; cleans up everything it created. Example:
   sudo sandpit bench --n 30 --concurrency 1,8`,
		Flags: append(containerdFlags(),
			&cli.IntFlag{Name: "n", Value: 30, Usage: "measured rounds (each runs every comparator once)"},
			&cli.IntFlag{Name: "warmup", Value: 3, Usage: "unmeasured rounds first"},
			&cli.DurationFlag{Name: "gap", Value: 500 * time.Millisecond, Usage: "untimed pause before each latency run, as between an agent's calls (background cleanup and pool refills happen in it); 0: back to back"},
			&cli.StringFlag{Name: "concurrency", Value: "1,8", Usage: "1 measures latency; each N>1 measures throughput with N concurrent clients"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
			&cli.StringSliceFlag{Name: "only", Usage: "comparators to run, e.g. host-python,runc-run,sandpit-cold"},
			&cli.StringSliceFlag{Name: "language", Value: cli.NewStringSlice("python", "c"), Usage: "python (all comparators) and/or c (compile and run: host gcc against sandpit)"},
			&cli.StringFlag{Name: "host-python", Value: "/usr/bin/python3", Usage: "the host interpreter (the python3 on PATH may be a slow shim)"},
			&cli.StringFlag{Name: "docker-image", Value: "python:3.11-slim", Usage: "image for docker-run and podman-run"},
			&cli.DurationFlag{Name: "budget", Value: 15 * time.Minute, Usage: "stop starting rounds after this long"},
		),
		Action: runBench,
	}
}

// The benchmark programs and what they must print.
var benchPrograms = map[string]struct{ code, want string }{
	"python": {"print(1)", "1\n"},
	"c":      {"#include <stdio.h>\nint main(void) { puts(\"1\"); return 0; }\n", "1\n"},
}

// benchRun is one `sandpit bench`: what it started, to be torn down.
type benchRun struct {
	c         *cli.Context
	addr      string
	dir       string // everything the bench writes: <state-dir>/bench
	prefix    string // instance label prefix
	instances []string
	closers   []func(context.Context) error
	report    bench.Report
	seq       atomic.Int64
}

func runBench(c *cli.Context) error {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	concurrency, err := parseInts(c.String("concurrency"))
	if err != nil {
		return fmt.Errorf("--concurrency: %w", err)
	}
	langs := c.StringSlice("language")
	for _, l := range langs {
		if _, ok := benchPrograms[l]; !ok {
			return fmt.Errorf("--language %q: bench knows python and c", l)
		}
	}
	b := &benchRun{c: c, dir: filepath.Join(c.String("state-dir"), "bench"), prefix: "bench"}
	if c.IsSet("instance") {
		b.prefix = c.String("instance")
	}
	b.report = bench.Report{
		Command: "sandpit " + strings.Join(os.Args[1:], " "),
		Program: `python: print(1); c: puts("1") compiled with the c language's gcc flags, then run`,
		Machine: bench.Describe(), // load before anything starts
		Warmup:  c.Int("warmup"),
		GapMS:   c.Duration("gap").Milliseconds(),
	}
	b.addr, err = address(c)
	if err != nil {
		return err
	}
	defer b.close()

	comps, err := b.comparators(ctx, langs)
	if err != nil {
		return err
	}
	opt := bench.Options{N: c.Int("n"), Warmup: c.Int("warmup"), Budget: c.Duration("budget"), Gap: c.Duration("gap")}
	if slices.Contains(concurrency, 1) {
		b.report.Latency = bench.MeasureLatency(ctx, comps, opt)
	}
	var python []bench.Comparator
	for _, cmp := range comps {
		if cmp.Group == "python" {
			python = append(python, cmp)
		}
	}
	for _, n := range concurrency {
		if n > 1 && len(python) > 0 && ctx.Err() == nil {
			b.report.Throughput = append(b.report.Throughput, bench.MeasureThroughput(ctx, python, n, max(opt.N, 4*n), opt)...)
		}
	}
	b.close()
	b.report.Machine.LoadAfter = bench.LoadAverage()
	if c.Bool("json") {
		err = b.report.WriteJSON(c.App.Writer)
	} else {
		err = b.report.WriteTable(c.App.Writer)
	}
	switch {
	case err != nil:
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted: the report covers what ran before")
	case len(b.report.Leftovers) > 0:
		return fmt.Errorf("the bench left %d things behind", len(b.report.Leftovers))
	}
	return nil
}

// comparators starts everything the requested comparators need. One that
// cannot run here is listed in the report as unavailable, with the reason.
func (b *benchRun) comparators(ctx context.Context, langs []string) ([]bench.Comparator, error) {
	only := b.c.StringSlice("only")
	want := func(name string) bool { return len(only) == 0 || slices.Contains(only, name) }
	var comps []bench.Comparator
	add := func(group, name string, role bench.Role, run func(context.Context) error, err error) {
		if err != nil {
			b.report.Unavailable = append(b.report.Unavailable, bench.Unavailable{Name: name, Reason: fmt.Sprintf("%s: %v", group, err)})
			return
		}
		comps = append(comps, bench.Comparator{Name: name, Group: group, Role: role, Run: run})
	}

	client, err := dial(b.c)
	if err != nil {
		return nil, err
	}
	b.closers = append(b.closers, func(context.Context) error { return client.Close() })
	v := b.report.Machine.Versions
	if ver, err := client.Version(ctx); err == nil {
		v["containerd"] = ver.Version
	}
	v["runc"] = bench.CommandVersion(ctx, b.c.String("runc-binary"), "--version")
	v["python"] = b.c.String("host-python") + " " + bench.CommandVersion(ctx, b.c.String("host-python"), "--version")
	v["gcc"] = bench.CommandVersion(ctx, "gcc", "--version")
	v["sandpit"] = version

	// In-process runtimes configured like serve's: without and with a pool.
	inproc := map[string]*runtime.Runtime{}
	for _, name := range []string{"sandpit-cold", "sandpit-warm"} {
		if !want(name) {
			continue
		}
		cfg := runtimeConfig(b.c, b.addr)
		suffix := strings.TrimPrefix(name, "sandpit-")
		cfg.Instance, cfg.StateDir = b.instance(suffix), filepath.Join(b.dir, suffix)
		cfg.Pool = runtime.PoolConfig{}
		if name == "sandpit-warm" {
			cfg.Pool = runtime.PoolConfig{Size: 2, IdleTimeout: 5 * time.Minute}
		}
		rt, err := runtime.New(cfg)
		if err != nil {
			return nil, err
		}
		b.closers = append(b.closers, func(context.Context) error { return rt.Close() })
		inproc[name] = rt
	}
	servers, err := b.mcpServers(ctx, want)
	if err != nil {
		return nil, err
	}

	for _, lang := range langs {
		prog := benchPrograms[lang]
		if lang == "python" {
			if want("host-python") {
				add(lang, "host-python", bench.RoleHost, b.hostPython(prog.code, prog.want), nil)
			}
			if want("runc-run") {
				run, err := b.runcRun(ctx, client, prog.code, prog.want)
				add(lang, "runc-run", bench.RoleRunc, run, err)
			}
		} else if want("host-gcc") {
			run, err := b.hostGCC(prog.code, prog.want)
			add(lang, "host-gcc", bench.RoleHost, run, err)
		}
		for _, name := range []string{"sandpit-cold", "sandpit-warm"} {
			if rt := inproc[name]; rt != nil {
				add(lang, name, "", sandpitRun(rt, lang, prog.code, prog.want), nil)
			}
		}
		for _, s := range servers {
			add(lang, s.name, "", mcpRun(s.client, lang, prog.code, prog.want), s.err)
		}
		if lang != "python" {
			continue
		}
		if want("ctr-run") {
			run, err := b.ctrRun(ctx, prog.want)
			add(lang, "ctr-run", "", run, err)
		}
		for _, engine := range []string{"docker", "podman"} {
			if want(engine + "-run") {
				run, err := engineRun(ctx, engine, b.c.String("docker-image"), prog.want)
				add(lang, engine+"-run", "", run, err)
			}
		}
	}
	if len(comps) == 0 {
		return nil, errors.New("nothing to measure (check --only)")
	}
	return comps, nil
}

func (b *benchRun) instance(name string) string {
	inst := b.prefix + "-" + name
	b.instances = append(b.instances, inst)
	return inst
}

func (b *benchRun) hostPython(code, want string) func(context.Context) error {
	py := b.c.String("host-python")
	return func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, py, "-c", code).Output()
		if err != nil {
			return fmt.Errorf("%s: %w", py, err)
		}
		return bench.CheckOutput(string(out), want)
	}
}

// hostGCC compiles and runs the program on the host with the same gcc
// command line the c language uses in the sandbox.
func (b *benchRun) hostGCC(code, want string) (func(context.Context) error, error) {
	if _, err := exec.LookPath("gcc"); err != nil {
		return nil, errors.New("gcc is not installed on the host")
	}
	dir := filepath.Join(b.dir, "host-c")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b.closers = append(b.closers, func(context.Context) error { return os.RemoveAll(dir) })
	var lang runtime.LanguageSpec
	for _, l := range runtime.DefaultLanguages("") {
		if l.Name == "c" {
			lang = l
		}
	}
	src := filepath.Join(dir, lang.File)
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		prog := filepath.Join(dir, fmt.Sprintf("prog-%d", b.seq.Add(1)))
		defer os.Remove(prog)
		argv := slices.Clone(lang.Compile)
		for i, a := range argv {
			switch a {
			case filepath.Join(sandpit.SourceDir, lang.File):
				argv[i] = src
			case filepath.Join(sandpit.BuildDir, "prog"):
				argv[i] = prog
			}
		}
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("gcc: %w: %s", err, out)
		}
		out, err := exec.CommandContext(ctx, prog).Output()
		if err != nil {
			return err
		}
		return bench.CheckOutput(string(out), want)
	}, nil
}

// runcRun prepares a bundle with the isolation a sandpit sandbox gets
// (same hardening profile, limits, user namespace and source bind) on a
// read-only view of the same image.
func (b *benchRun) runcRun(ctx context.Context, client *containerd.Client, code, want string) (func(context.Context) error, error) {
	cfg := runtimeConfig(b.c, b.addr)
	cfg.Defaults()
	inst := b.instance("runc")
	python := runtime.DefaultLanguages(images.DefaultRef)[0]
	r, err := bench.NewRunc(nsContext(ctx, cfg.Namespace), bench.RuncConfig{
		Client:      client,
		Image:       python.Image,
		Snapshotter: cfg.Snapshotter,
		Binary:      cfg.RuncBinary,
		Dir:         filepath.Join(b.dir, "runc"),
		Key:         inst + "-rootfs",
		Labels:      map[string]string{runtime.LabelInstance: inst},
		Source:      map[string]string{python.File: code},
		Spec: []coci.SpecOpts{
			oci.WithHardening(oci.Profile{Limits: cfg.Limits, UserNS: cfg.UserNS, UID: sandpit.SandboxUID, GID: sandpit.SandboxGID}),
			oci.WithProcess("/tmp", python.Run...),
		},
	})
	if err != nil {
		return nil, err
	}
	b.closers = append(b.closers, func(ctx context.Context) error { return r.Close(nsContext(ctx, cfg.Namespace)) })
	return func(ctx context.Context) error {
		out, err := r.Run(ctx)
		if err != nil {
			return err
		}
		return bench.CheckOutput(string(out), want)
	}, nil
}

func sandpitRun(rt *runtime.Runtime, lang, code, want string) func(context.Context) error {
	return func(ctx context.Context) error {
		res, err := rt.Run(ctx, sandpit.Request{Language: lang, Code: code})
		if err != nil {
			return err
		}
		if res.Status != sandpit.StatusSuccess {
			return fmt.Errorf("status %s (exit %d): %s", res.Status, res.ExitCode, res.Stderr)
		}
		return bench.CheckOutput(res.Stdout, want)
	}
}

// benchServer is one `sandpit serve` driven over stdio by a real MCP client.
type benchServer struct {
	name   string
	client *client.Client
	err    error // why it could not start
}

func (s *benchServer) close() error { return s.client.Close() }

// mcpServers starts this binary's `serve`: with the warm pool on and off
// when serve has a pool flag, else once as it is configured by default.
func (b *benchRun) mcpServers(ctx context.Context, want func(string) bool) ([]*benchServer, error) {
	variants := []struct {
		name string
		args []string
	}{{"sandpit-mcp", nil}}
	if warm, cold, ok := poolArgs(); ok {
		variants = []struct {
			name string
			args []string
		}{{"sandpit-mcp-warm", warm}, {"sandpit-mcp-cold", cold}}
	}
	var out []*benchServer
	for _, v := range variants {
		if !want(v.name) {
			continue
		}
		s := &benchServer{name: v.name}
		s.client, s.err = b.startServer(ctx, v.name, v.args)
		if s.err == nil {
			b.closers = append(b.closers, func(context.Context) error { return s.close() })
		}
		out = append(out, s)
	}
	return out, nil
}

// poolArgs are serve's arguments for a pool on and off, when serve has a
// pool flag: a boolean --pool, or a size (--pool or --pool-size).
func poolArgs() (warm, cold []string, ok bool) {
	for _, f := range serveCommand().Flags {
		name := f.Names()[0]
		if name != "pool" && name != "pool-size" {
			continue
		}
		switch f := f.(type) {
		case *cli.BoolFlag:
			return []string{"--" + name + "=true"}, []string{"--" + name + "=false"}, true
		case *cli.IntFlag:
			return []string{fmt.Sprintf("--%s=%d", name, max(f.Value, 2))}, []string{"--" + name + "=0"}, true
		}
	}
	return nil, nil, false
}

func (b *benchRun) startServer(ctx context.Context, name string, extra []string) (*client.Client, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.dir, name)
	args := []string{"--log-level", "warn", "serve",
		"--address", b.addr, "--no-start", "--build-images=false",
		"--instance", b.instance(strings.TrimPrefix(name, "sandpit-")), "--state-dir", dir,
	}
	// The runtime flags this bench was given, so both measure the same sandbox.
	for _, f := range []string{"namespace", "runtime", "runc-binary", "userns", "memory-mb", "pids", "cpus", "output-kb"} {
		args = append(args, fmt.Sprintf("--%s=%v", f, b.c.Value(f)))
	}
	// Persistent stores go to scratch places, never the operator's (and not
	// to <state-dir>/workspace, where serve keeps the per-run views).
	has := map[string]bool{}
	for _, f := range serveCommand().Flags {
		has[f.Names()[0]] = true
	}
	for flag, path := range map[string]string{"workspace": "agent-files", "snapshot-dir": "snapshots", "history-db": "history.db"} {
		if has[flag] {
			args = append(args, "--"+flag, filepath.Join(dir, path))
		}
	}
	args = append(args, extra...)
	cl, err := client.NewStdioMCPClientWithOptions(self, os.Environ(), args, transport.WithCommandStderrWriter(os.Stderr))
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	b.closers = append(b.closers, func(context.Context) error { return os.RemoveAll(dir) })
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var init mcpgo.InitializeRequest
	init.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcpgo.Implementation{Name: "sandpit-bench", Version: version}
	if _, err := cl.Initialize(ictx, init); err != nil {
		cl.Close()
		return nil, fmt.Errorf("initialize %s: %w", name, err)
	}
	return cl, nil
}

func mcpRun(cl *client.Client, lang, code, want string) func(context.Context) error {
	return func(ctx context.Context) error {
		var req mcpgo.CallToolRequest
		req.Params.Name = "run_code"
		req.Params.Arguments = map[string]any{"language": lang, "code": code}
		res, err := cl.CallTool(ctx, req)
		if err != nil {
			return err
		}
		if res.IsError {
			var msg []string
			for _, c := range res.Content {
				if t, ok := c.(mcpgo.TextContent); ok {
					msg = append(msg, t.Text)
				}
			}
			return fmt.Errorf("run_code: %s", strings.Join(msg, " "))
		}
		raw, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return err
		}
		var out mcp.RunCodeResult
		if err := json.Unmarshal(raw, &out); err != nil {
			return fmt.Errorf("run_code result: %w", err)
		}
		if out.Status != sandpit.StatusSuccess {
			return fmt.Errorf("status %s (exit %d): %s", out.Status, out.ExitCode, out.Stderr)
		}
		return bench.CheckOutput(out.Stdout, want)
	}
}

// ctrRun runs the image with containerd's own CLI, labelled so that the
// leak check and the final sweep see its containers.
func (b *benchRun) ctrRun(ctx context.Context, want string) (func(context.Context) error, error) {
	if _, err := exec.LookPath("ctr"); err != nil {
		return nil, errors.New("ctr is not installed")
	}
	inst := b.instance("ctr")
	ns := b.c.String("namespace")
	if err := b.sweep(ctx, inst); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		id := fmt.Sprintf("%s-%d-%d", inst, os.Getpid(), b.seq.Add(1))
		out, err := exec.CommandContext(ctx, "ctr", "--address", b.addr, "-n", ns, "run", "--rm", "--read-only",
			"--label", runtime.LabelInstance+"="+inst, images.DefaultRef, id, "python3", "-c", "print(1)").Output()
		if err != nil {
			return fmt.Errorf("ctr run: %w", errorOutput(err))
		}
		return bench.CheckOutput(string(out), want)
	}, nil
}

// engineRun is docker or podman with the flags the seeds used, when the
// engine answers and has the image.
func engineRun(ctx context.Context, engine, image, want string) (func(context.Context) error, error) {
	if _, err := exec.LookPath(engine); err != nil {
		return nil, fmt.Errorf("%s is not installed", engine)
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := exec.CommandContext(ictx, engine, "info").Output(); err != nil {
		return nil, fmt.Errorf("the %s engine does not answer (`%s info`: %v)", engine, engine, errorOutput(err))
	}
	if err := exec.CommandContext(ictx, engine, "image", "inspect", image).Run(); err != nil {
		return nil, fmt.Errorf("image %s is not present (`%s pull %s`, or pick one with --docker-image)", image, engine, image)
	}
	return func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, engine, "run", "--rm", "--network", "none", "--read-only", "--cap-drop", "ALL",
			"--security-opt", "no-new-privileges", "--memory", "512m", "--pids-limit", "128", image, "python3", "-c", "print(1)").Output()
		if err != nil {
			return fmt.Errorf("%s run: %w", engine, errorOutput(err))
		}
		return bench.CheckOutput(string(out), want)
	}, nil
}

// errorOutput adds a failed command's last stderr line to its error.
func errorOutput(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		lines := strings.Split(strings.TrimSpace(string(ee.Stderr)), "\n")
		return fmt.Errorf("%w: %s", err, lines[len(lines)-1])
	}
	return err
}

// close stops everything the bench started (in reverse), then records what
// is left with the bench's labels or mounts, then sweeps it anyway. It runs
// once; later calls do nothing.
func (b *benchRun) close() {
	if b.closers == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := len(b.closers) - 1; i >= 0; i-- {
		if err := b.closers[i](ctx); err != nil {
			b.report.Leftovers = append(b.report.Leftovers, "cleanup: "+err.Error())
		}
	}
	b.closers = nil
	left := b.leftovers(ctx)
	b.report.Leftovers = append(b.report.Leftovers, left...)
	for _, inst := range b.instances {
		if err := b.sweep(ctx, inst); err != nil {
			slog.Warn("bench: sweep", "instance", inst, "err", err)
		}
	}
	for _, l := range left {
		if strings.HasPrefix(l, "mount ") {
			return // never delete below a mount
		}
	}
	os.RemoveAll(b.dir)
}

// leftovers lists containers and snapshots carrying one of the bench's
// instance labels, and mounts under its directory.
func (b *benchRun) leftovers(ctx context.Context) []string {
	var out []string
	cl, err := dial(b.c)
	if err != nil {
		return []string{"leak check: " + err.Error()}
	}
	defer cl.Close()
	ctx = nsContext(ctx, b.c.String("namespace"))
	cfg := runtimeConfig(b.c, b.addr)
	cfg.Defaults()
	for _, inst := range b.instances {
		filter := fmt.Sprintf("labels.%q==%q", runtime.LabelInstance, inst)
		ctrs, err := cl.Containers(ctx, filter)
		if err != nil {
			out = append(out, "leak check: "+err.Error())
		}
		for _, c := range ctrs {
			out = append(out, "container "+c.ID())
		}
		err = cl.SnapshotService(cfg.Snapshotter).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
			out = append(out, "snapshot "+info.Name)
			return nil
		}, filter)
		if err != nil {
			out = append(out, "leak check: "+err.Error())
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], b.dir+"/") {
				out = append(out, "mount "+f[4])
			}
		}
	}
	return out
}

// sweep removes every sandbox labelled with instance.
func (b *benchRun) sweep(ctx context.Context, instance string) error {
	cfg := runtimeConfig(b.c, b.addr)
	cfg.Instance, cfg.StateDir = instance, filepath.Join(b.dir, "sweep")
	rt, err := runtime.New(cfg)
	if err != nil {
		return err
	}
	defer rt.Close()
	_, err = rt.Sweep(ctx)
	return err
}

func nsContext(ctx context.Context, ns string) context.Context {
	return namespaces.WithNamespace(ctx, ns)
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
