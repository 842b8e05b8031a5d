package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	coci "github.com/containerd/containerd/oci"
	"github.com/containerd/containerd/snapshots"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/images"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/internal/instance"
	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/oci"
	"github.com/sandpit-dev/sandpit/runtime"
)

// SuiteConfig is one `sandpit bench`: what to compare, and how this host's
// sandpit is configured (the flags it was given, so every path measures the
// same sandbox).
type SuiteConfig struct {
	// Runtime is the configuration in-process runtimes and the runc-run
	// bundle use (Address filled in); instances and state dirs are the
	// suite's own.
	Runtime runtime.Config
	// Dir holds everything the suite writes; removed at the end.
	Dir string
	// Prefix starts every instance label the suite uses.
	Prefix string
	// Only, when set, names the comparators to run.
	Only []string
	// Languages to measure: python (every comparator) and/or c.
	Languages   []string
	HostPython  string // the host interpreter
	DockerImage string // for docker-run and podman-run
	Concurrency []int  // 1: latency; N>1: throughput with N clients
	// Burst calls back to back (0: none), BurstRounds times per
	// comparator, after BurstPause; python comparators only, engines
	// (ctr, docker, podman) left out.
	Burst       int
	BurstRounds int
	BurstPause  time.Duration
	Options     Options
	// Serve starts `sandpit serve` for the MCP comparators: the binary and
	// the arguments (the runtime flags; the suite adds its own instance,
	// state dir, stores and pool flags).
	ServeBinary string
	ServeArgs   []string
	// NoCPU skips CPU accounting: paths run in no cgroup of the bench's.
	NoCPU   bool
	Version string // sandpit's version, for the report
	Command string // the command line, for the report
}

// Programs are the benchmark programs, by group: the language they run as
// and what they must print. pydata is python importing the data stack: in a
// sandbox on the data-science image (the default python image), on the host
// with the same Debian packages installed (apt-get install python3-pandas
// python3-matplotlib), so that the ratio is the sandbox's cost, not the
// libraries'.
var Programs = map[string]struct{ lang, code, want string }{
	"python": {"python", "print(1)", "1\n"},
	"c":      {"c", "#include <stdio.h>\nint main(void) { puts(\"1\"); return 0; }\n", "1\n"},
	"pydata": {"python", "import pandas, matplotlib.pyplot\nprint(1)", "1\n"},
	// Sessions (session.go): a call in a session that exists already.
	"session":    {"python", "x += 1", ""},
	"session-df": {"python", "df.shape", ""},
	// A workspace with a package layer (packages.go): print(1).
	"packages": {"python", "print(1)", "1\n"},
}

// suite is one run of the comparators: what it started, to be torn down.
type suite struct {
	cfg       SuiteConfig
	addr      string
	dir       string
	prefix    string
	instances []string
	closers   []func(context.Context) error
	report    Report
	seq       atomic.Int64
	cgroups   *Cgroups // nil: CPU per run is not measured

	sessOnce   sync.Once
	sessClient *client.Client
	sessErr    error
}

// Run measures every requested comparator, interleaved, and returns the
// report. Everything the suite created is removed before it returns; what
// could not be is listed in Report.Leftovers (an error too).
func Run(ctx context.Context, cfg SuiteConfig) (*Report, error) {
	for _, l := range cfg.Languages {
		if _, ok := Programs[l]; !ok {
			return nil, fmt.Errorf("language %q: the bench knows python, c, pydata, session, session-df and packages", l)
		}
	}
	cfg.Runtime.Defaults()
	b := &suite{cfg: cfg, addr: cfg.Runtime.Address, dir: cfg.Dir, prefix: cfg.Prefix}
	if b.prefix == "" {
		b.prefix = "bench"
	}
	b.report = Report{
		Command: cfg.Command,
		Program: `python: print(1); c: puts("1") compiled with the c language's gcc flags, then run; pydata: import pandas, matplotlib.pyplot; print(1); ` +
			`session: x += 1 in a session that exists; session-df: df.shape of a DataFrame kept in a session, against rebuilding it in a fresh run; packages: print(1) with a 50-wheel package layer against none`,
		Machine: Describe(), // load before anything starts
		Warmup:  cfg.Options.Warmup,
		GapMS:   cfg.Options.Gap.Milliseconds(),
	}
	defer b.close()

	if cfg.NoCPU {
		b.report.Notes = append(b.report.Notes, "CPU per run not measured (--cpu=false)")
	} else if cg, err := NewCgroups(fmt.Sprintf("%s-%d", b.prefix, os.Getpid())); err != nil {
		b.report.Notes = append(b.report.Notes, "CPU per run not measured: "+err.Error())
	} else {
		b.cgroups = cg
		b.closers = append(b.closers, func(context.Context) error { return cg.Remove() })
	}
	comps, err := b.comparators(ctx, cfg.Languages)
	if err != nil {
		return nil, err
	}
	opt := cfg.Options
	if b.cgroups != nil {
		shared := NewSharedCPU(b.addr)
		opt.Shared = shared.Read
		if shared.Containerd() == 0 {
			b.report.Notes = append(b.report.Notes, "containerd's pid is unknown: its CPU is not in the CPU per run")
		}
	}
	if slices.Contains(cfg.Concurrency, 1) {
		b.report.Latency = MeasureLatency(ctx, comps, opt)
	}
	var python []Comparator
	for _, cmp := range comps {
		if cmp.Group == "python" {
			python = append(python, cmp)
		}
	}
	if cfg.Burst > 0 && ctx.Err() == nil {
		var burst []Comparator
		for _, c := range python {
			if !strings.HasSuffix(c.Name, "-run") || c.Role == RoleRunc {
				burst = append(burst, c)
			}
		}
		b.report.Burst = MeasureBurst(ctx, burst, cfg.Burst, max(cfg.BurstRounds, 1), cfg.BurstPause, opt)
		b.report.BurstCalls = cfg.Burst
	}
	for _, n := range cfg.Concurrency {
		if n > 1 && len(python) > 0 && ctx.Err() == nil {
			b.report.Throughput = append(b.report.Throughput, MeasureThroughput(ctx, python, n, max(opt.N, 4*n), opt)...)
		}
	}
	b.close()
	b.report.Machine.LoadAfter = LoadAverage()
	if len(b.report.Leftovers) > 0 {
		return &b.report, fmt.Errorf("the bench left %d things behind", len(b.report.Leftovers))
	}
	return &b.report, nil
}

// dial connects to the suite's containerd.
func (b *suite) dial() (*containerd.Client, error) {
	c, err := containerd.New(b.addr, containerd.WithDefaultNamespace(b.cfg.Runtime.Namespace), containerd.WithTimeout(3*time.Second))
	if err != nil {
		return nil, &runtime.UnavailableError{Address: b.addr, Err: err}
	}
	return c, nil
}

// comparators starts everything the requested comparators need. One that
// cannot run here is listed in the report as unavailable, with the reason.
func (b *suite) comparators(ctx context.Context, langs []string) ([]Comparator, error) {
	only := b.cfg.Only
	want := func(name string) bool { return len(only) == 0 || slices.Contains(only, name) }
	var comps []Comparator
	acct := map[string]func(*Comparator){} // by name: how its CPU is accounted
	add := func(group, name string, role Role, run func(context.Context) error, err error) {
		if err != nil {
			b.report.Unavailable = append(b.report.Unavailable, Unavailable{Name: name, Reason: fmt.Sprintf("%s: %v", group, err)})
			return
		}
		c := Comparator{Name: name, Group: group, Role: role, Run: run}
		if f := acct[name]; f != nil {
			f(&c)
		}
		comps = append(comps, c)
	}

	client, err := b.dial()
	if err != nil {
		return nil, err
	}
	b.closers = append(b.closers, func(context.Context) error { return client.Close() })
	v := b.report.Machine.Versions
	if ver, err := client.Version(ctx); err == nil {
		v["containerd"] = ver.Version
	}
	v["runc"] = CommandVersion(ctx, b.cfg.Runtime.RuncBinary, "--version")
	v["python"] = b.cfg.HostPython + " " + CommandVersion(ctx, b.cfg.HostPython, "--version")
	v["gcc"] = CommandVersion(ctx, "gcc", "--version")
	v["sandpit"] = b.cfg.Version

	// In-process runtimes configured like serve's: without and with a pool.
	inproc := map[string]*runtime.Runtime{}
	for _, name := range []string{"sandpit-cold", "sandpit-warm"} {
		if !want(name) {
			continue
		}
		cfg := b.cfg.Runtime
		suffix := strings.TrimPrefix(name, "sandpit-")
		cfg.Instance, cfg.StateDir = b.instance(suffix), filepath.Join(b.dir, suffix)
		cfg.Pool = runtime.PoolConfig{}
		if name == "sandpit-warm" {
			cfg.Pool = runtime.PoolConfig{Size: 2, Created: 2, IdleTimeout: 5 * time.Minute} // serve's defaults
		}
		grp, err := b.group(name)
		if err != nil {
			return nil, err
		}
		if grp != nil {
			cfg.CgroupParent, cfg.ShimCgroup = grp.Sandboxes, grp.Procs
		}
		rt, err := runtime.New(cfg)
		if err != nil {
			return nil, err
		}
		b.closers = append(b.closers, func(context.Context) error { return rt.Close() })
		inproc[name] = rt
		acct[name] = func(c *Comparator) {
			c.Containerd, c.Settle = true, rt.Settle
			if grp != nil {
				c.CPU = grp.CPU
			}
		}
	}
	servers, err := b.mcpServers(ctx, want)
	if err != nil {
		return nil, err
	}

	for _, group := range langs {
		if sessionGroups[group] {
			b.sessionComparators(ctx, group, want, add)
			continue
		}
		if group == "packages" {
			b.packageComparators(ctx, group, want, add)
			continue
		}
		lang, prog := Programs[group].lang, Programs[group]
		if lang == "python" {
			if want("host-python") {
				run := b.hostPython(prog.code, prog.want)
				var err error
				if group == "pydata" {
					if err = run(ctx); err != nil {
						err = fmt.Errorf("%w (install the same Debian packages on the host: apt-get install python3-pandas python3-matplotlib)", err)
					}
				}
				add(group, "host-python", RoleHost, run, err)
			}
			if want("runc-run") && group == "python" {
				run, err := b.runcRun(ctx, client, prog.code, prog.want)
				add(group, "runc-run", RoleRunc, run, err)
			}
		} else if want("host-gcc") {
			run, err := b.hostGCC(prog.code, prog.want)
			add(group, "host-gcc", RoleHost, run, err)
		}
		for _, name := range []string{"sandpit-cold", "sandpit-warm"} {
			if rt := inproc[name]; rt != nil {
				add(group, name, "", sandpitRun(rt, lang, prog.code, prog.want), nil)
			}
		}
		for _, s := range servers {
			acct[s.name] = func(c *Comparator) {
				c.Containerd = true
				if s.group != nil {
					c.CPU = s.group.CPU
				}
			}
			add(group, s.name, "", mcpRun(s.client, lang, prog.code, prog.want), s.err)
		}
		if group != "python" {
			continue
		}
		if want("ctr-run") {
			run, err := b.ctrRun(ctx, prog.want)
			acct["ctr-run"] = func(c *Comparator) { c.NoCPU = true } // its shims are containerd's children
			add(lang, "ctr-run", "", run, err)
		}
		for _, engine := range []string{"docker", "podman"} {
			if want(engine + "-run") {
				run, err := engineRun(ctx, engine, b.cfg.DockerImage, prog.want)
				add(lang, engine+"-run", "", run, err)
			}
		}
	}
	if len(comps) == 0 {
		return nil, errors.New("nothing to measure (check --only)")
	}
	return comps, nil
}

func (b *suite) instance(name string) string {
	inst := b.prefix + "-" + name
	b.instances = append(b.instances, inst)
	return inst
}

func (b *suite) hostPython(code, want string) func(context.Context) error {
	py := b.cfg.HostPython
	return func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, py, "-c", code).Output()
		if err != nil {
			return fmt.Errorf("%s: %w", py, err)
		}
		return CheckOutput(string(out), want)
	}
}

// hostGCC compiles and runs the program on the host with the same gcc
// command line the c language uses in the sandbox.
func (b *suite) hostGCC(code, want string) (func(context.Context) error, error) {
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
		return CheckOutput(string(out), want)
	}, nil
}

// runcRun prepares a bundle with the isolation a sandpit sandbox gets
// (same hardening profile, limits, user namespace and source bind) on a
// read-only view of the same image.
func (b *suite) runcRun(ctx context.Context, client *containerd.Client, code, want string) (func(context.Context) error, error) {
	cfg := b.cfg.Runtime
	cfg.Defaults()
	inst := b.instance("runc")
	python := b.python()
	r, err := NewRunc(namespaces.WithNamespace(ctx, cfg.Namespace), RuncConfig{
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
	b.closers = append(b.closers, func(ctx context.Context) error { return r.Close(namespaces.WithNamespace(ctx, cfg.Namespace)) })
	return func(ctx context.Context) error {
		out, err := r.Run(ctx)
		if err != nil {
			return err
		}
		return CheckOutput(string(out), want)
	}, nil
}

// python is the python language sandpit runs, on its image: runc-run and
// ctr-run use the same image.
func (b *suite) python() runtime.LanguageSpec {
	for _, l := range b.cfg.Runtime.Languages {
		if l.Name == "python" {
			return l
		}
	}
	return runtime.DefaultLanguages(images.DefaultRef)[0]
}

// runTimeout bounds one benchmark run: far above any sane latency (a
// loaded host takes seconds to import pandas), so a slow run is measured,
// not failed.
const runTimeout = 60 * time.Second

func sandpitRun(rt *runtime.Runtime, lang, code, want string) func(context.Context) error {
	return func(ctx context.Context) error {
		res, err := rt.Run(ctx, sandpit.Request{Language: lang, Code: code, Timeout: runTimeout})
		if err != nil {
			return err
		}
		if res.Status != sandpit.StatusSuccess {
			return fmt.Errorf("status %s (exit %d): %s", res.Status, res.ExitCode, res.Stderr)
		}
		return CheckOutput(res.Stdout, want)
	}
}

// benchServer is one `sandpit serve` driven over stdio by a real MCP client.
type benchServer struct {
	name   string
	client *client.Client
	group  *Group // its cgroup, nil when CPU is not measured
	err    error  // why it could not start
}

func (s *benchServer) close() error { return s.client.Close() }

// mcpServers starts `sandpit serve` twice, with the warm pool on and off.
func (b *suite) mcpServers(ctx context.Context, want func(string) bool) ([]*benchServer, error) {
	variants := []struct {
		name string
		args []string
	}{{"sandpit-mcp-warm", []string{"--pool=2"}}, {"sandpit-mcp-cold", []string{"--pool=0"}}}
	var out []*benchServer
	for _, v := range variants {
		if !want(v.name) {
			continue
		}
		s := &benchServer{name: v.name}
		s.group, s.err = b.group(v.name)
		if s.err == nil {
			s.client, s.err = b.startServer(ctx, v.name, v.args, s.group)
		}
		if s.err == nil {
			b.closers = append(b.closers, func(context.Context) error { return s.close() })
		}
		out = append(out, s)
	}
	return out, nil
}

func (b *suite) startServer(ctx context.Context, name string, extra []string, grp *Group) (*client.Client, error) {
	if b.cfg.ServeBinary == "" {
		return nil, errors.New("no sandpit binary to serve from")
	}
	dir := filepath.Join(b.dir, name)
	args := []string{"--log-level", "warn", "serve",
		"--address", b.addr, "--no-start", "--build-images=false",
		"--instance", b.instance(strings.TrimPrefix(name, "sandpit-")), "--state-dir", dir,
		// Persistent stores go to scratch places, never the operator's (and
		// not to <state-dir>/workspace, where serve keeps the per-run views).
		"--workspace", filepath.Join(dir, "agent-files"),
		"--snapshot-dir", filepath.Join(dir, "snapshots"),
		"--history-db", filepath.Join(dir, "history.db"),
	}
	args = append(append(args, b.cfg.ServeArgs...), extra...)
	// mcp-go's Close sends SIGTERM 2 s after it closes the server's stdin
	// and SIGKILL 3 s later; a loaded host's shutdown (every pooled sandbox
	// destroyed, every view unmounted) takes longer, and a killed server
	// leaves them behind. A shell in front takes the signals; the server,
	// its stdin closed, shuts down as any client's EOF asks, and the
	// closer below waits for it to release its instance.
	script := `exec 3<&0; "$0" "$@" <&3 3<&- & trap '' TERM; wait`
	if grp != nil {
		// The server, its shims and its sandboxes in the server's cgroup:
		// the shell enters it first.
		args = append(args, "--cgroup-parent", grp.Sandboxes, "--shim-cgroup", grp.Procs)
		script = grp.enter() + script
	}
	args = append([]string{"-c", script, b.cfg.ServeBinary}, args...)
	cl, err := client.NewStdioMCPClientWithOptions("/bin/sh", os.Environ(), args, transport.WithCommandStderrWriter(os.Stderr))
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	b.closers = append(b.closers, func(context.Context) error { return os.RemoveAll(dir) })
	inst := b.instance(strings.TrimPrefix(name, "sandpit-"))
	b.closers = append(b.closers, func(ctx context.Context) error {
		// Runs after the client's Close (closers run in reverse).
		for instance.Holder(filepath.Join(dir, "instances"), inst) != 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s still holds its instance after its client closed: %w", name, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	})
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var init mcpgo.InitializeRequest
	init.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcpgo.Implementation{Name: "sandpit-bench", Version: b.cfg.Version}
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
		req.Params.Arguments = map[string]any{"language": lang, "code": code, "timeout_seconds": runTimeout.Seconds()}
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
		return CheckOutput(out.Stdout, want)
	}
}

// ctrRun runs the image with containerd's own CLI, labelled so that the
// leak check and the final sweep see its containers.
func (b *suite) ctrRun(ctx context.Context, want string) (func(context.Context) error, error) {
	if _, err := exec.LookPath("ctr"); err != nil {
		return nil, errors.New("ctr is not installed")
	}
	inst := b.instance("ctr")
	ns := b.cfg.Runtime.Namespace
	if err := b.sweep(ctx, inst); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		id := fmt.Sprintf("%s-%d-%d", inst, os.Getpid(), b.seq.Add(1))
		out, err := exec.CommandContext(ctx, "ctr", "--address", b.addr, "-n", ns, "run", "--rm", "--read-only",
			"--label", runtime.LabelInstance+"="+inst, b.python().Image, id, "python3", "-c", "print(1)").Output()
		if err != nil {
			return fmt.Errorf("ctr run: %w", errorOutput(err))
		}
		return CheckOutput(string(out), want)
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
		return CheckOutput(string(out), want)
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
func (b *suite) close() {
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
func (b *suite) leftovers(ctx context.Context) []string {
	var out []string
	cl, err := b.dial()
	if err != nil {
		return []string{"leak check: " + err.Error()}
	}
	defer cl.Close()
	ctx = namespaces.WithNamespace(ctx, b.cfg.Runtime.Namespace)
	cfg := b.cfg.Runtime
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
	mounts, _ := host.MountsUnder(b.dir)
	for _, m := range mounts {
		out = append(out, "mount "+m)
	}
	return out
}

// sweep removes every sandbox labelled with instance.
func (b *suite) sweep(ctx context.Context, instance string) error {
	cfg := b.cfg.Runtime
	cfg.Instance, cfg.StateDir = instance, filepath.Join(b.dir, "sweep")
	rt, err := runtime.New(cfg)
	if err != nil {
		return err
	}
	defer rt.Close()
	_, err = rt.Sweep(ctx)
	return err
}

// group is comparator name's cgroup, or nil when CPU is not measured.
func (b *suite) group(name string) (*Group, error) {
	if b.cgroups == nil {
		return nil, nil
	}
	return b.cgroups.Group(name)
}
