package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/errdefs"
	coci "github.com/containerd/containerd/oci"
	"github.com/containerd/containerd/snapshots"
	"github.com/containerd/typeurl/v2"

	"github.com/sandpit-dev/sandpit/oci"
)

// Run executes req in fresh sandboxes (one per step: compile, then run) and
// returns what happened. A program that fails, times out or runs out of
// memory is a Result with a nil error; an error means the request was invalid
// (ErrInvalidRequest, ErrUnknownLanguage) or the host could not run it
// (ErrUnavailable, ErrImageMissing, or an internal failure).
func (r *Runtime) Run(ctx context.Context, req Request) (*Result, error) {
	lang, err := r.Lookup(req.Language)
	if err != nil {
		return nil, err
	}
	if err := r.validate(req); err != nil {
		return nil, err
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
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

	id := newRunID()
	started := time.Now()
	res := &Result{ID: id, Language: lang.Name, Started: started.UTC(), Limits: r.Limits(timeout)}

	r.setLive(id, true)
	defer r.setLive(id, false)
	dir, err := r.prepareRunDir(id, lang, req)
	defer os.RemoveAll(dir)
	if err != nil {
		return nil, err
	}

	var view View
	if req.Workspace != nil {
		view, err = req.Workspace.Open(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
	}
	deadline := started.Add(timeout)

	out, err := r.steps(ctx, client, img, id, dir, lang, req, view, deadline)
	if view != nil {
		// Changes land whatever the status; a failed merge is a server error.
		changes, cerr := view.Close(context.WithoutCancel(ctx))
		if cerr != nil && err == nil {
			err = fmt.Errorf("workspace write-back: %w", cerr)
		}
		res.Files = changes
	}
	if err != nil {
		if isUnavailable(err) {
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

func (r *Runtime) setLive(id string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.live[id] = true
	} else {
		delete(r.live, id)
	}
}

func (r *Runtime) validate(req Request) error {
	switch {
	case req.Code == "" && req.Path == "":
		return fmt.Errorf("%w: no code given", ErrInvalidRequest)
	case req.Code != "" && req.Path != "":
		return fmt.Errorf("%w: give code or path, not both", ErrInvalidRequest)
	case req.Path != "" && req.Workspace == nil:
		return fmt.Errorf("%w: path %q needs a workspace", ErrInvalidRequest, req.Path)
	case req.Path != "" && (path.IsAbs(req.Path) || strings.Contains(req.Path, "\x00") || !filepath.IsLocal(req.Path)):
		return fmt.Errorf("%w: path %q must be relative and inside the workspace", ErrInvalidRequest, req.Path)
	}
	return nil
}

// Limits are the limits every run gets, with the given timeout.
func (r *Runtime) Limits(timeout time.Duration) Limits {
	l := r.cfg.Limits
	return Limits{
		MemoryBytes:    l.MemoryBytes,
		PidsMax:        l.PidsMax,
		CPUs:           l.CPUs,
		TmpfsBytes:     l.TmpfsBytes,
		FileSizeBytes:  l.FileSizeBytes,
		OpenFiles:      l.OpenFiles,
		OutputBytes:    r.cfg.OutputBytes,
		TimeoutSeconds: timeout.Seconds(),
	}
}

// prepareRunDir writes the source into a per-run directory:
// src/ (bound read-only at oci.SourceDir), out/ (oci.BuildDir) and fifo/.
func (r *Runtime) prepareRunDir(id string, lang *LanguageSpec, req Request) (string, error) {
	dir := filepath.Join(r.cfg.StateDir, "runs", id)
	for _, d := range []string{"src", "out", "fifo"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return dir, fmt.Errorf("run dir: %w", err)
		}
	}
	if req.Path == "" {
		if err := os.WriteFile(filepath.Join(dir, "src", lang.File), []byte(req.Code), 0o644); err != nil {
			return dir, fmt.Errorf("run dir: %w", err)
		}
	}
	// The compile step writes out/ as the sandbox user.
	uid, gid := r.SandboxOwner()
	if err := os.Chown(filepath.Join(dir, "out"), int(uid), int(gid)); err != nil {
		return dir, fmt.Errorf("run dir: %w", err)
	}
	return dir, nil
}

// SandboxOwner is the host uid and gid the sandbox user appears as: files it
// must be able to write on the host must belong to them.
func (r *Runtime) SandboxOwner() (uid, gid uint32) {
	if m := r.cfg.UserNS; m != nil {
		return m.HostBase + oci.SandboxUID, m.HostBase + oci.SandboxGID
	}
	return oci.SandboxUID, oci.SandboxGID
}

type stepOutput struct {
	status         Status
	exitCode       int
	stdout, stderr *cappedBuffer
	usage          Usage
}

// steps runs the compile step (when the language has one) and then the
// program, each in its own sandbox, sharing the run directory.
func (r *Runtime) steps(ctx context.Context, c *containerd.Client, img containerd.Image, id, dir string, lang *LanguageSpec, req Request, view View, deadline time.Time) (*stepOutput, error) {
	cwd := "/tmp"
	binds := []coci.SpecOpts{oci.WithBind(filepath.Join(dir, "src"), oci.SourceDir, false, false)}
	if view != nil {
		cwd = oci.WorkspaceDir
		binds = append(binds, oci.WithBind(view.Dir(), oci.WorkspaceDir, true, true))
	}
	source := path.Join(oci.SourceDir, lang.File)
	if req.Path != "" {
		source = path.Join(oci.WorkspaceDir, req.Path)
	}
	replaceSource := func(argv []string) []string {
		out := make([]string, len(argv))
		for i, a := range argv {
			if a == path.Join(oci.SourceDir, lang.File) {
				a = source
			}
			out[i] = a
		}
		return out
	}

	if len(lang.Compile) > 0 {
		opts := append([]coci.SpecOpts{
			oci.WithProcess(cwd, replaceSource(lang.Compile)...),
			oci.WithBind(filepath.Join(dir, "out"), oci.BuildDir, true, false),
			oci.WithCPUs(r.cfg.CompileCPUs),
		}, binds...)
		out, err := r.step(ctx, c, img, id+"-build", dir, nil, opts, deadline)
		if err != nil {
			return nil, err
		}
		if out.status != StatusSuccess {
			if out.status == StatusError {
				out.status = StatusCompileError
			}
			return out, nil
		}
	}

	argv := append(replaceSource(lang.Run), req.Args...)
	opts := append([]coci.SpecOpts{oci.WithProcess(cwd, argv...)}, binds...)
	if len(lang.Compile) > 0 {
		opts = append(opts, oci.WithBind(filepath.Join(dir, "out"), oci.BuildDir, false, true))
	}
	return r.step(ctx, c, img, id, dir, req.Stdin, opts, deadline)
}

// eofReader signals done once its data has been read to the end.
type eofReader struct {
	r    *bytes.Reader
	done chan struct{}
	once sync.Once
}

func newEOFReader(b []byte) *eofReader {
	return &eofReader{r: bytes.NewReader(b), done: make(chan struct{})}
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.once.Do(func() { close(e.done) })
	}
	return n, err
}

// killGrace bounds how long we wait for a killed task to be reaped.
const killGrace = 5 * time.Second

// step runs one sandbox to completion and deletes it.
func (r *Runtime) step(ctx context.Context, c *containerd.Client, img containerd.Image, cid, dir string, stdin []byte, extra []coci.SpecOpts, deadline time.Time) (_ *stepOutput, retErr error) {
	// Cleanup must run even when the caller's context is cancelled.
	cleanupCtx := context.WithoutCancel(ctx)
	t0 := time.Now()
	var tCreate, tTask, tStart, tExit time.Duration
	defer func() {
		r.log.Debug("sandbox step", "id", cid, "create", tCreate, "task", tTask, "start", tStart, "run", tExit, "total", time.Since(t0))
	}()
	labels := map[string]string{LabelInstance: r.cfg.Instance, LabelRun: cid}

	specOpts := append([]coci.SpecOpts{oci.WithHardening(oci.Profile{
		Limits: r.cfg.Limits,
		UserNS: r.cfg.UserNS,
		UID:    oci.SandboxUID,
		GID:    oci.SandboxGID,
	})}, extra...)
	container, err := c.NewContainer(ctx, cid,
		containerd.WithSnapshotter(r.cfg.Snapshotter),
		containerd.WithNewSnapshotView(cid, img, snapshots.WithLabels(labels)),
		r.runcOptions(),
		containerd.WithContainerLabels(labels),
		containerd.WithNewSpec(specOpts...),
	)
	if err != nil {
		// A half-created container may have left its snapshot.
		r.removeSnapshot(cleanupCtx, c, cid)
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	defer func() {
		if err := container.Delete(cleanupCtx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			r.log.Warn("delete sandbox container", "id", cid, "err", err)
			if retErr == nil {
				retErr = fmt.Errorf("delete sandbox: %w", err)
			}
		}
	}()

	tCreate = time.Since(t0)
	out := &stepOutput{stdout: newCappedBuffer(r.cfg.OutputBytes), stderr: newCappedBuffer(r.cfg.OutputBytes)}
	in := newEOFReader(stdin)
	creator := cio.NewCreator(
		cio.WithStreams(in, out.stdout, out.stderr),
		cio.WithFIFODir(filepath.Join(dir, "fifo")),
	)
	task, err := container.NewTask(ctx, creator)
	if err != nil {
		return nil, fmt.Errorf("create sandbox task: %w", err)
	}
	defer func() {
		if _, err := task.Delete(cleanupCtx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			r.log.Warn("delete sandbox task", "id", cid, "err", err)
			if retErr == nil {
				retErr = fmt.Errorf("delete sandbox task: %w", err)
			}
		}
	}()

	tTask = time.Since(t0)
	exitC, err := task.Wait(cleanupCtx)
	if err != nil {
		return nil, fmt.Errorf("wait sandbox task: %w", err)
	}
	if err := task.Start(ctx); err != nil {
		return nil, fmt.Errorf("start sandbox task: %w", err)
	}
	tStart = time.Since(t0)
	// The shim keeps the stdin FIFO open: the program sees EOF only once we
	// close it explicitly, after the copier has delivered every byte.
	go func() {
		select {
		case <-in.done:
			if err := task.CloseIO(cleanupCtx, containerd.WithStdinCloser); err != nil && !errdefs.IsNotFound(err) {
				r.log.Debug("close sandbox stdin", "id", cid, "err", err)
			}
		case <-exitC:
		}
	}()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var (
		st       containerd.ExitStatus
		timedOut bool
	)
	select {
	case st = <-exitC:
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
		// The caller gave up (client cancelled): kill and report it as an error.
	}
	if timedOut || ctx.Err() != nil {
		// Killing init tears down the pid namespace and everything in it.
		if err := task.Kill(cleanupCtx, syscall.SIGKILL, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
			r.log.Warn("kill sandbox", "id", cid, "err", err)
		}
		select {
		case st = <-exitC:
		case <-time.After(killGrace):
			return nil, fmt.Errorf("sandbox %s did not exit %s after SIGKILL", cid, killGrace)
		}
	}
	tExit = time.Since(t0)
	if err := st.Error(); err != nil {
		return nil, fmt.Errorf("wait sandbox task: %w", err)
	}
	out.usage = r.usage(cleanupCtx, task)
	out.exitCode = int(st.ExitCode())
	switch {
	case timedOut:
		out.status = StatusTimeout
	case ctx.Err() != nil:
		return nil, fmt.Errorf("run cancelled: %w", ctx.Err())
	case out.usage.OOMKilled:
		out.status = StatusOOM
	case out.exitCode == 0:
		out.status = StatusSuccess
	default:
		out.status = StatusError
	}
	return out, nil
}

// usage reads the sandbox's cgroup counters; it must run before the task is
// deleted, which removes the cgroup. OOM is read from the cgroup's oom_kill
// count, because exit code 137 is ambiguous (a timeout kill gives it too) and
// a task whose child was OOM-killed can still exit 0.
func (r *Runtime) usage(ctx context.Context, task containerd.Task) Usage {
	var u Usage
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

func (r *Runtime) removeSnapshot(ctx context.Context, c *containerd.Client, key string) {
	if err := c.SnapshotService(r.cfg.Snapshotter).Remove(ctx, key); err != nil && !errdefs.IsNotFound(err) {
		r.log.Warn("remove sandbox snapshot", "key", key, "err", err)
	}
}

// isUnavailable reports whether err means the daemon went away.
func isUnavailable(err error) bool {
	return errdefs.IsUnavailable(err) || errors.Is(err, ErrUnavailable) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) && strings.Contains(err.Error(), "sock")
}
