package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/runtime/engine"
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
	if _, err := r.image(ctx, lang.Image); err != nil {
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
		out, err = r.runCold(ctx, id, lang, req, view, deadline)
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
		_, err = r.eng.Lost(err)
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
func (r *Runtime) runCold(ctx context.Context, id string, lang *LanguageSpec, req sandpit.Request, view sandpit.View, deadline time.Time) (*stepOutput, error) {
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
		return r.initRun(ctx, id, dir, lang, req, view, deadline, &made)
	}
	return r.steps(ctx, id, dir, lang, req, view, deadline, &made)
}

// initRun runs req in one sandbox under a shell as PID 1. A program that
// needs compiling goes through buildScript (compile, then run, in the same
// sandbox, reporting as the waiter of a pooled sandbox does); any other is
// the shell's child directly — `python3 main.py` itself.
func (r *Runtime) initRun(ctx context.Context, id, dir string, lang *LanguageSpec, req sandpit.Request, view sandpit.View, deadline time.Time, made *[]*sandbox) (*stepOutput, error) {
	cwd := "/tmp"
	mounts := envBinds(req)
	if view != nil {
		cwd = sandpit.WorkspaceDir
		mounts = append(mounts, engine.Bind(view.Dir(), sandpit.WorkspaceDir, true, true))
	}
	direct := len(lang.Compile) == 0
	var (
		mode     string
		spec     engine.Spec
		capBytes = r.cfg.OutputBytes
	)
	if direct {
		spec = r.initSpec(dir, initProcess(cwd, "stdin", lang.runArgv(req)...), mounts...)
	} else {
		mode = "build"
		spec = r.initSpec(dir, coldBuildProcess(cwd, lang, req), mounts...)
		capBytes += markerBytes
	}
	stdin := engine.FixedStdin(deadlineLine(deadline), req.Stdin)
	t0 := time.Now()
	sb, err := r.create(ctx, lang.Image, id, dir, spec, stdin, capBytes)
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
func envBinds(req sandpit.Request) []engine.Mount {
	switch {
	case req.Install != nil:
		return []engine.Mount{
			engine.Bind(req.Install.Artifacts, sandpit.ArtifactsDir, false, false),
			engine.Bind(req.Install.Layer, sandpit.EnvBuildDir, true, false),
		}
	case req.Env != "":
		// Executable: a compiled extension is mmapped PROT_EXEC.
		return []engine.Mount{engine.Bind(req.Env, sandpit.EnvDir, false, true)}
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
func (r *Runtime) steps(ctx context.Context, id, dir string, lang *LanguageSpec, req sandpit.Request, view sandpit.View, deadline time.Time, made *[]*sandbox) (*stepOutput, error) {
	cwd := "/tmp"
	binds := []engine.Mount{engine.Bind(filepath.Join(dir, "src"), sandpit.SourceDir, false, false)}
	if view != nil {
		cwd = sandpit.WorkspaceDir
		binds = append(binds, engine.Bind(view.Dir(), sandpit.WorkspaceDir, true, true))
	}
	binds = append(binds, envBinds(req)...)
	run := func(cid string, stdin []byte, spec engine.Spec) (*stepOutput, error) {
		t0 := time.Now()
		sb, err := r.create(ctx, lang.Image, cid, dir, spec, engine.FixedStdin(stdin), r.cfg.OutputBytes)
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
		spec := engine.Spec{
			Args:   lang.argv(lang.Compile, req.Path),
			Cwd:    cwd,
			Mounts: append([]engine.Mount{engine.Bind(filepath.Join(dir, "out"), sandpit.BuildDir, true, false)}, binds...),
			CPUs:   r.cfg.CompileCPUs,
		}
		out, err := run(id+"-build", nil, spec)
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

	spec := engine.Spec{Args: lang.runArgv(req), Cwd: cwd, Mounts: binds}
	if len(lang.Compile) > 0 {
		spec.Mounts = append(spec.Mounts, engine.Bind(filepath.Join(dir, "out"), sandpit.BuildDir, false, true))
	}
	return run(id, req.Stdin, spec)
}

// unenforced lists the limits a Result must report as not enforced.
func (r *Runtime) unenforced() []string {
	u, _ := r.eng.Limits()
	return u
}
