package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd"
	"github.com/containerd/containerd/errdefs"
	coci "github.com/containerd/containerd/oci"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/oci"
)

// Run executes req in fresh sandboxes (one per step: compile, then run) and
// returns what happened. A program that fails, times out or runs out of
// memory is a Result with a nil error; an error means the request was invalid
// (ErrInvalidRequest, ErrUnknownLanguage) or the host could not run it
// (ErrUnavailable, ErrImageMissing, or an internal failure).
func (r *Runtime) Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	if req.Session != "" {
		return r.runSession(ctx, req)
	}
	lang, err := r.Lookup(req.Language)
	if err != nil {
		return nil, err
	}
	if err := r.validate(req); err != nil {
		return nil, err
	}
	if err := r.admit(ctx, lang, req); err != nil {
		return nil, err
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = sandpit.DefaultTimeout
	}
	ctx = r.nsctx(ctx)
	client, err := r.connect(ctx)
	if err != nil {
		return nil, err
	}
	img, err := r.image(ctx, client, lang.Image)
	if err != nil {
		if isUnavailable(err) {
			r.dropClient(client)
			return nil, &UnavailableError{Address: r.cfg.Address, Err: err}
		}
		return nil, err
	}

	id := req.ID
	if id == "" {
		id = newRunID()
	}
	started := time.Now()
	res := &sandpit.Result{ID: id, Language: lang.Name, Started: started.UTC(), Limits: r.Limits(timeout)}

	var view sandpit.View
	if req.Workspace != nil {
		view, err = req.Workspace.Open(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
	}
	// The run's time starts once its view is ready: opening it records the
	// undo state, which can take long, and is reported apart (review M8).
	tOpen := time.Since(started)
	res.WorkspaceOpenMS = tOpen.Milliseconds()
	started = time.Now()
	deadline := started.Add(timeout)

	if p := r.pooled[lang.Name]; p != nil {
		defer p.refill()
	}
	var out *stepOutput
	ran := false
	yield := r.tenants.begin(req.Tenant, time.Now())
	defer r.tenants.end(req.Tenant)
	// An install step's mounts are not a pooled sandbox's: it runs cold.
	if w := r.claimWarmFor(lang, req, yield); w != nil {
		out, err = r.runWarm(ctx, w, lang, req, view, deadline)
		r.log.Debug("warm run", "id", id, "view_open", tOpen, "run", time.Since(started))
		if view != nil {
			if derr := detachWorkspace(w); derr != nil && err == nil {
				err = fmt.Errorf("detach workspace: %w", derr)
			}
		}
		r.background(func() { r.destroyWarm(w) })
		ran = !errors.Is(err, errWarmLost)
		if !ran {
			r.log.Warn("warm pool: a claimed sandbox never started the request; running it cold", "id", id, "sandbox", w.sb.id, "err", err)
			// Nothing of the request ran: its time starts now.
			deadline = time.Now().Add(timeout)
		}
	}
	if !ran {
		out, err = r.runCold(ctx, client, img, id, lang, req, view, deadline)
	}
	if view != nil {
		if g, ok := view.(interface{ WritersGone() }); ok && err == nil {
			// The run's sandbox exited, its init and with it every process
			// of its pid namespace: the workspace may keep the view for the
			// next run. After an error it may still be alive (a dead shim,
			// no exit after SIGKILL): the view is released (review L3).
			g.WritersGone()
		}
		// Changes land whatever the status; a failed merge is a server error.
		changes, cerr := view.Close(context.WithoutCancel(ctx))
		if cerr != nil && err == nil {
			err = fmt.Errorf("workspace write-back: %w", cerr)
		}
		res.Files = changes
	}
	if err != nil {
		if isUnavailable(err) && !errors.Is(err, ErrShimDied) {
			r.dropClient(client)
			return nil, &UnavailableError{Address: r.cfg.Address, Err: err}
		}
		return nil, err
	}
	res.Duration = time.Since(started)
	res.DurationMS = res.Duration.Milliseconds()
	res.Status, res.ExitCode = out.status, out.exitCode
	res.Stdout, res.StdoutTruncated, res.StdoutBytes = out.stdout.result()
	res.Stderr, res.StderrTruncated, res.StderrBytes = out.stderr.result()
	res.Usage = out.usage
	res.Usage.WallMS = res.DurationMS
	return res, nil
}

// claimWarmFor returns a pooled sandbox for req, or nil to run cold; yield
// leaves the last started one to another tenant.
func (r *Runtime) claimWarmFor(lang *LanguageSpec, req sandpit.Request, yield bool) *warm {
	p := r.pooled[lang.Name]
	if p == nil || req.Install != nil {
		return nil
	}
	return p.claim(yield)
}

// runCold creates the run's sandboxes on the request path.
func (r *Runtime) runCold(ctx context.Context, client *containerd.Client, img containerd.Image, id string, lang *LanguageSpec, req sandpit.Request, view sandpit.View, deadline time.Time) (*stepOutput, error) {
	r.setLive(id, true)
	var made []*sandbox
	useInit := r.hasInit(lang.Image)
	dir, err := r.prepareRunDir(id, lang, req, !useInit)
	var alive *os.File // the liveness FIFO's writer, for the init (init.go)
	if err == nil && useInit {
		alive, err = makeAlive(filepath.Join(dir, "src"))
	}
	// Deleting sandboxes costs tens of milliseconds each: do it after the
	// result is returned. The run dir (sources, FIFOs) goes last.
	defer r.background(func() {
		cctx := context.WithoutCancel(ctx)
		for _, sb := range made {
			r.destroy(cctx, sb)
		}
		if alive != nil {
			alive.Close()
		}
		os.RemoveAll(dir)
		r.setLive(id, false)
	})
	if err != nil {
		return nil, err
	}
	if useInit {
		return r.initRun(ctx, client, img, id, dir, lang, req, view, deadline, &made)
	}
	return r.steps(ctx, client, img, id, dir, lang, req, view, deadline, &made)
}

// initRun runs req in one sandbox under a shell as PID 1. A program that
// needs compiling goes through buildScript (compile, then run, in the same
// sandbox, reporting as the waiter of a pooled sandbox does); any other is
// the shell's child directly — `python3 main.py` itself.
func (r *Runtime) initRun(ctx context.Context, c *containerd.Client, img containerd.Image, id, dir string, lang *LanguageSpec, req sandpit.Request, view sandpit.View, deadline time.Time, made *[]*sandbox) (*stepOutput, error) {
	cwd := "/tmp"
	var ws coci.SpecOpts
	if view != nil {
		cwd = sandpit.WorkspaceDir
		ws = oci.WithBind(view.Dir(), sandpit.WorkspaceDir, true, true)
	}
	env := envBinds(req)
	direct := len(lang.Compile) == 0
	var (
		mode     string
		stdin    *stdinFeed
		opts     []coci.SpecOpts
		capBytes = r.cfg.OutputBytes
	)
	if direct {
		process := initProcess(cwd, "stdin", lang.runArgv(req)...)
		stdin, opts = fixedStdin(deadlineLine(deadline), req.Stdin), r.initOpts(dir, process, append(env, ws)...)
	} else {
		mode = "build"
		stdin, opts = fixedStdin(deadlineLine(deadline), req.Stdin), r.initOpts(dir, coldBuildProcess(cwd, lang, req), append(env, ws)...)
		capBytes += markerBytes
	}
	t0 := time.Now()
	sb, err := r.create(ctx, c, img, id, filepath.Join(dir, "fifo"), stdin, capBytes, opts)
	if err != nil {
		return nil, err
	}
	*made = append(*made, sb)
	tCreate := time.Since(t0)
	watchOutput(sb, req.Output, mode)
	r.watchUsage(sb, req.WatchUsage)
	if err := r.start(ctx, sb); err != nil {
		return nil, err
	}
	out, err := r.await(ctx, sb, deadline)
	r.log.Debug("sandbox run", "id", id, "create", tCreate, "total", time.Since(t0))
	if err != nil {
		return nil, err
	}
	if direct {
		return out, nil
	}
	if !r.finishInit(out, mode) {
		stderr, _, _ := out.stderr.result()
		return nil, fmt.Errorf("sandbox init (python3 in image %s) did not start (exit %d): %.500s", lang.Image, out.exitCode, stderr)
	}
	return out, nil
}

func (r *Runtime) setLive(id string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.live[id] = true
	} else {
		delete(r.live, id)
	}
}

// envBinds binds a request's package layer, or an install step's
// artifacts and layer being built.
func envBinds(req sandpit.Request) []coci.SpecOpts {
	switch {
	case req.Install != nil:
		return []coci.SpecOpts{
			oci.WithBind(req.Install.Artifacts, sandpit.ArtifactsDir, false, false),
			oci.WithBind(req.Install.Layer, sandpit.EnvBuildDir, true, false),
		}
	case req.Env != "":
		// Executable: a compiled extension is mmapped PROT_EXEC.
		return []coci.SpecOpts{oci.WithBind(req.Env, sandpit.EnvDir, false, true)}
	}
	return nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir() && filepath.IsAbs(p)
}

func (r *Runtime) validate(req sandpit.Request) error {
	switch {
	case req.Code == "" && req.Path == "":
		return fmt.Errorf("%w: no code given", ErrInvalidRequest)
	case req.Code != "" && req.Path != "":
		return fmt.Errorf("%w: give code or path, not both", ErrInvalidRequest)
	case req.Path != "" && req.Workspace == nil:
		return fmt.Errorf("%w: path %q needs a workspace", ErrInvalidRequest, req.Path)
	case req.Path != "" && (path.IsAbs(req.Path) || strings.Contains(req.Path, "\x00") || !filepath.IsLocal(req.Path)):
		return fmt.Errorf("%w: path %q must be relative and inside the workspace", ErrInvalidRequest, req.Path)
	case req.Env != "" && req.Install != nil:
		return fmt.Errorf("%w: an install step builds a layer; it is not given one", ErrInvalidRequest)
	case req.Install != nil && req.Session != "":
		return fmt.Errorf("%w: an install step runs in a fresh sandbox, not a session", ErrInvalidRequest)
	case req.Env != "" && !isDir(req.Env):
		return fmt.Errorf("%w: package layer %s is not a directory", ErrInvalidRequest, req.Env)
	case req.Install != nil && (!isDir(req.Install.Artifacts) || !isDir(req.Install.Layer)):
		return fmt.Errorf("%w: an install step's artifacts and layer must be existing directories", ErrInvalidRequest)
	case req.ID != "" && !validRunID.MatchString(req.ID):
		return fmt.Errorf("%w: run id %q: use 1 to 64 lowercase letters, digits or '-'", ErrInvalidRequest, req.ID)
	}
	return nil
}

// Limits are the limits every run gets, with the given timeout.
func (r *Runtime) Limits(timeout time.Duration) sandpit.Limits {
	l := r.cfg.Limits
	return sandpit.Limits{
		MemoryBytes:    l.MemoryBytes,
		PidsMax:        l.PidsMax,
		CPUs:           l.CPUs,
		TmpfsBytes:     l.TmpfsBytes,
		FileSizeBytes:  l.FileSizeBytes,
		OpenFiles:      l.OpenFiles,
		OutputBytes:    r.cfg.OutputBytes,
		TimeoutSeconds: timeout.Seconds(),
		Unenforced:     r.unenforced(),
	}
}

// prepareRunDir writes the source into a per-run directory: src/ (bound
// read-only at sandpit.SourceDir), fifo/ and, for steps in separate sandboxes,
// out/ (sandpit.BuildDir; a sandbox under the init has a tmpfs there).
func (r *Runtime) prepareRunDir(id string, lang *LanguageSpec, req sandpit.Request, withOut bool) (string, error) {
	dir := filepath.Join(r.cfg.StateDir, "runs", id)
	subdirs := []string{"src", "fifo"}
	if withOut {
		subdirs = append(subdirs, "out")
	}
	for _, d := range subdirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return dir, fmt.Errorf("run dir: %w", err)
		}
	}
	if req.Path == "" {
		if err := os.WriteFile(filepath.Join(dir, "src", lang.File), []byte(req.Code), 0o644); err != nil {
			return dir, fmt.Errorf("run dir: %w", err)
		}
	}
	if withOut {
		// The compile step writes out/ as the sandbox user.
		uid, gid := r.SandboxOwner()
		if err := os.Chown(filepath.Join(dir, "out"), int(uid), int(gid)); err != nil {
			return dir, fmt.Errorf("run dir: %w", err)
		}
	}
	return dir, nil
}

// SandboxOwner is the host uid and gid the sandbox user appears as: files it
// must be able to write on the host must belong to them.
func (r *Runtime) SandboxOwner() (uid, gid uint32) {
	if m := r.cfg.UserNS; m != nil && m.Owner != nil {
		return *m.Owner, *m.Owner
	}
	if m := r.cfg.UserNS; m != nil {
		return m.HostBase + sandpit.SandboxUID, m.HostBase + sandpit.SandboxGID
	}
	return sandpit.SandboxUID, sandpit.SandboxGID
}

type stepOutput struct {
	status         sandpit.Status
	exitCode       int
	stdout, stderr *cappedBuffer
	usage          sandpit.Usage
}

// steps runs, for an image without sandpit's init, the compile step (when
// the language has one) and then the program, each in its own sandbox,
// sharing the run directory. Every sandbox it creates is appended to *made
// for the caller to destroy.
func (r *Runtime) steps(ctx context.Context, c *containerd.Client, img containerd.Image, id, dir string, lang *LanguageSpec, req sandpit.Request, view sandpit.View, deadline time.Time, made *[]*sandbox) (*stepOutput, error) {
	cwd := "/tmp"
	binds := []coci.SpecOpts{oci.WithBind(filepath.Join(dir, "src"), sandpit.SourceDir, false, false)}
	if view != nil {
		cwd = sandpit.WorkspaceDir
		binds = append(binds, oci.WithBind(view.Dir(), sandpit.WorkspaceDir, true, true))
	}
	binds = append(binds, envBinds(req)...)
	fifos := filepath.Join(dir, "fifo")
	run := func(cid string, stdin []byte, opts []coci.SpecOpts) (*stepOutput, error) {
		t0 := time.Now()
		sb, err := r.create(ctx, c, img, cid, fifos, fixedStdin(stdin), r.cfg.OutputBytes, opts)
		if err != nil {
			return nil, err
		}
		*made = append(*made, sb)
		if cid == id {
			watchOutput(sb, req.Output, "") // the program's step, not the compiler's
		}
		tCreate := time.Since(t0)
		if err := r.start(ctx, sb); err != nil {
			return nil, err
		}
		tStart := time.Since(t0)
		out, err := r.await(ctx, sb, deadline)
		r.log.Debug("sandbox step", "id", cid, "create", tCreate, "start", tStart, "total", time.Since(t0))
		return out, err
	}

	if len(lang.Compile) > 0 {
		opts := append([]coci.SpecOpts{
			oci.WithProcess(cwd, lang.argv(lang.Compile, req.Path)...),
			oci.WithBind(filepath.Join(dir, "out"), sandpit.BuildDir, true, false),
			oci.WithCPUs(r.cfg.CompileCPUs),
		}, binds...)
		out, err := run(id+"-build", nil, opts)
		if err != nil {
			return nil, err
		}
		if out.status != sandpit.StatusSuccess {
			if out.status == sandpit.StatusError {
				out.status = sandpit.StatusCompileError
			}
			return out, nil
		}
	}

	opts := append([]coci.SpecOpts{oci.WithProcess(cwd, lang.runArgv(req)...)}, binds...)
	if len(lang.Compile) > 0 {
		opts = append(opts, oci.WithBind(filepath.Join(dir, "out"), sandpit.BuildDir, false, true))
	}
	return run(id, req.Stdin, opts)
}

// usage reads the sandbox's cgroup counters; it must run before the task is
// deleted, which removes the cgroup. OOM is read from the cgroup's oom_kill
// count, because exit code 137 is ambiguous (a timeout kill gives it too) and
// a task whose child was OOM-killed can still exit 0.
func (r *Runtime) usage(ctx context.Context, task containerd.Task) sandpit.Usage {
	var u sandpit.Usage
	f := r.fallback()
	if !f.killAll {
		return u // no cgroup of its own: the counters would be a parent's
	}
	// containerd's default spec puts the sandbox at /<namespace>/<id>;
	// rootless, that path is relative to the daemon's delegated cgroup.
	if u, ok := r.cgroups.usage(f.cgroupParent + r.cgroupPath(task.ID())); ok {
		return u
	}
	m, err := task.Metrics(ctx)
	if err != nil {
		r.log.Debug("sandbox metrics unavailable", "err", err)
		return u
	}
	data, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		r.log.Debug("sandbox metrics undecodable", "err", err)
		return u
	}
	switch s := data.(type) {
	case *v1.Metrics:
		if s.CPU != nil && s.CPU.Usage != nil {
			u.CPUUserMS = int64(s.CPU.Usage.User / 1e6)
			u.CPUSystemMS = int64(s.CPU.Usage.Kernel / 1e6)
		}
		if s.Memory != nil && s.Memory.Usage != nil {
			u.MemoryPeakBytes = s.Memory.Usage.Max
		}
		if s.MemoryOomControl != nil {
			u.OOMKilled = s.MemoryOomControl.OomKill > 0
		}
		if s.Pids != nil {
			u.PidsCurrent = s.Pids.Current
		}
	case *v2.Metrics:
		if s.CPU != nil {
			u.CPUUserMS = int64(s.CPU.UserUsec / 1000)
			u.CPUSystemMS = int64(s.CPU.SystemUsec / 1000)
		}
		if s.Memory != nil {
			// cgroup v2 metrics of this containerd carry no peak (memory.peak);
			// current usage after exit is the best figure available.
			u.MemoryPeakBytes = s.Memory.Usage
		}
		if s.MemoryEvents != nil {
			u.OOMKilled = s.MemoryEvents.OomKill > 0
		}
		if s.Pids != nil {
			u.PidsCurrent = s.Pids.Current
		}
	}
	return u
}

// clientClosed: a call through a client Close already closed (dropClient).
func clientClosed(err error) bool {
	return status.Code(err) == codes.Canceled && strings.Contains(err.Error(), "client connection is closing")
}

// isUnavailable reports whether err means the daemon went away.
func isUnavailable(err error) bool {
	if err == nil {
		return false
	}
	// A stream (a task's wait) broken by the daemon going away comes back
	// as a raw gRPC status, not converted by errdefs.
	if code := status.Code(errors.Unwrap(err)); code == codes.Unavailable || status.Code(err) == codes.Unavailable {
		return true
	}
	return errdefs.IsUnavailable(err) || errors.Is(err, ErrUnavailable) || clientClosed(err) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) && strings.Contains(err.Error(), "sock")
}
