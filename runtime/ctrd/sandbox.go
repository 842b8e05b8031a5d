package ctrd

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/leases"
	coci "github.com/containerd/containerd/oci"
	"github.com/containerd/typeurl/v2"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/oci"
	"github.com/sandpit-dev/sandpit/runtime/engine"
)

// sandbox is one container with its task.
type sandbox struct {
	e         *Engine
	id        string
	container containerd.Container
	task      containerd.Task
	exitC     chan engine.Exit
	stdin     *engine.Stdin
	shim      *shimProc // RuntimeSandpit: the shim serving it
	// stopped closes when the sandbox is removed: the stdin closer stops.
	stopped  chan struct{}
	stopOnce sync.Once
}

var _ engine.Sandbox = (*sandbox)(nil)

// Create makes the container and its task, wired to spec's stdio, and
// subscribes to its exit. On error nothing is left.
//
// A cancelled ctx returns at once, but the creation itself is never
// cancelled half-way: containerd goes on with a request its client gave up
// on, so a task cancelled mid-create could be made after we looked, and
// run on with its container record undeletable ("cannot delete running
// task"; a CI failure when a client disconnected). The creation finishes
// in the background and what it made is removed.
func (e *Engine) Create(ctx context.Context, spec engine.Spec) (engine.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	type made struct {
		sb  *sandbox
		err error
	}
	var (
		mu        sync.Mutex // orders the hand-over against abandoned
		abandoned bool
		done      = make(chan made, 1)
	)
	detached := e.nsctx(context.WithoutCancel(ctx))
	e.background(func() {
		sb, err := e.createWhole(detached, spec)
		mu.Lock()
		gone := abandoned
		if !gone {
			done <- made{sb, err}
		}
		mu.Unlock()
		if gone && sb != nil {
			sb.Remove(detached)
		}
	})
	select {
	case m := <-done:
		if m.err != nil {
			return nil, m.err
		}
		return m.sb, nil
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		select {
		case m := <-done: // made meanwhile: the caller kills it
			if m.err != nil {
				return nil, m.err
			}
			return m.sb, nil
		default:
			abandoned = true
			return nil, fmt.Errorf("create sandbox: %w", ctx.Err())
		}
	}
}

// createTimeout bounds a sandbox's creation, now that no caller's cancel
// cuts it short: a containerd that stopped answering must not hold a run,
// or a shutdown waiting for the creation, forever.
const createTimeout = 2 * time.Minute

// specOpts turns spec into containerd spec options over the hardening
// profile: the process, the mounts in order, the CPU quota, then the
// engine's own (cgroup placement, the rootless fallback after the process
// options it wraps).
func (e *Engine) specOpts(spec engine.Spec) []coci.SpecOpts {
	opts := []coci.SpecOpts{oci.WithHardening(e.cfg.Profile), oci.WithProcess(spec.Cwd, spec.Args...)}
	if len(spec.Annotations) > 0 {
		opts = append(opts, coci.WithAnnotations(spec.Annotations))
	}
	for _, m := range spec.Mounts {
		switch {
		case m.Tmpfs:
			opts = append(opts, oci.WithTmpfs(m.Destination, m.Size, m.Exec))
		case m.Slave:
			opts = append(opts, withSlaveBind(m.Source, m.Destination, m.Writable, m.Exec))
		default:
			opts = append(opts, oci.WithBind(m.Source, m.Destination, m.Writable, m.Exec))
		}
	}
	if spec.CPUs > 0 {
		opts = append(opts, oci.WithCPUs(spec.CPUs))
	}
	opts = append(opts, e.withCgroupParent())
	return append(opts, e.fallback().opts...)
}

// withSlaveBind binds a host dir receiving mounts made on the host side
// later (rslave propagation).
func withSlaveBind(src, dst string, writable, exec bool) coci.SpecOpts {
	return func(ctx context.Context, c coci.Client, ctr *containers.Container, s *coci.Spec) error {
		if err := oci.WithBind(src, dst, writable, exec)(ctx, c, ctr, s); err != nil {
			return err
		}
		m := &s.Mounts[len(s.Mounts)-1]
		for i, o := range m.Options {
			if o == "rprivate" {
				m.Options[i] = "rslave"
			}
		}
		return nil
	}
}

// createWhole is Create's work, under a context that is not cancelled.
func (e *Engine) createWhole(cleanupCtx context.Context, spec engine.Spec) (_ *sandbox, retErr error) {
	// The creation's calls are bounded; the task's wait, which lasts as
	// long as the sandbox, and the clean-up are not.
	ctx, cancel := context.WithTimeout(cleanupCtx, createTimeout)
	defer cancel()
	c, err := e.connect(ctx)
	if err != nil {
		return nil, err
	}
	img, err := e.image(ctx, c, spec.Image)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{LabelInstance: e.cfg.Instance, LabelRun: spec.ID, LabelState: e.cfg.StateDir}
	rtOpts, shim, err := e.runtimeOpts(ctx)
	if err != nil {
		return nil, err
	}
	root, err := e.rootfsOpts(ctx, c, img)
	if err != nil {
		return nil, err
	}
	// From here until the task exists, the sandbox's move into its
	// cgroups is coming: keep that move fast (cgwarm.go).
	release := e.warmer.hold()
	defer release()
	container, err := c.NewContainer(leases.WithLease(ctx, noLease), spec.ID,
		rtOpts,
		containerd.WithContainerLabels(labels),
		containerd.WithNewSpec(append(e.specOpts(spec), root)...),
	)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	stdin := spec.Stdin
	if stdin == nil {
		stdin = engine.FixedStdin()
	}
	sb := &sandbox{e: e, id: spec.ID, container: container, stdin: stdin, shim: shim,
		exitC: make(chan engine.Exit, 1), stopped: make(chan struct{})}
	defer func() {
		if retErr != nil {
			sb.Remove(cleanupCtx)
		}
	}()
	inner := cio.NewCreator(cio.WithStreams(stdin, spec.Stdout, spec.Stderr), cio.WithFIFODir(spec.IODir))
	creator := func(id string) (cio.IO, error) {
		set, err := inner(id)
		if err != nil {
			return nil, err
		}
		// Hold a writer on the stdin FIFO from before the shim opens its
		// reader: otherwise the shim's first read can come before any writer
		// has finished opening, read EOF, and close the program's stdin with
		// our data never delivered. O_RDWR opens a FIFO without blocking.
		if p := set.Config().Stdin; p != "" {
			if f, err := os.OpenFile(p, os.O_RDWR, 0); err == nil {
				stdin.Hold(f)
			}
		}
		return set, nil
	}
	sb.task, err = container.NewTask(ctx, creator)
	release()
	if err != nil {
		return nil, fmt.Errorf("create sandbox task: %w", shimLost(shim, err))
	}
	exitC, err := sb.task.Wait(cleanupCtx)
	if err != nil {
		return nil, fmt.Errorf("wait sandbox task: %w", err)
	}
	go func() {
		st, ok := <-exitC
		if !ok {
			return
		}
		x := engine.Exit{Code: int(st.ExitCode()), At: st.ExitTime()}
		if err := st.Error(); err != nil {
			x.Err = fmt.Errorf("wait sandbox task: %w", shimLost(shim, err))
		}
		sb.exitC <- x
	}()
	return sb, nil
}

// noLease is the lease NewContainer is given so that it does not make one:
// without a lease in its context, the client creates a lease before the
// container record and deletes it after — two more database writes on
// every sandbox's path (2–3 ms here) and a deletion that schedules
// containerd's garbage collection. A container record needs none: it is
// itself a root of that collection, and sandbox roots are not snapshots
// (rootfs.go). No lease of this name exists, so anything that did try to
// attach a resource to it would fail with "lease does not exist", not leak.
const noLease = "sandpit-container-records-need-no-lease"

func (sb *sandbox) ID() string                 { return sb.id }
func (sb *sandbox) Exited() <-chan engine.Exit { return sb.exitC }

// Start starts the task and closes its stdin once the feed is drained: the
// shim keeps the stdin FIFO open, so the program sees EOF only when we close
// it explicitly, after the copier has delivered every byte.
//
// The start itself is not cancelled: a start cut off mid-call came back as
// the shim's "unknown" error after shimLost's wait for a dead shim (2 s); a
// cancelled run's sandbox starts and the caller kills it at once.
func (sb *sandbox) Start(ctx context.Context) error {
	ctx = sb.e.nsctx(context.WithoutCancel(ctx))
	if err := sb.task.Start(ctx); err != nil {
		return fmt.Errorf("start sandbox task: %w", shimLost(sb.shim, err))
	}
	go func() {
		select {
		case <-sb.stdin.Drained():
			sb.stdin.Release()
			if err := sb.task.CloseIO(ctx, containerd.WithStdinCloser); err != nil && !errdefs.IsNotFound(err) {
				sb.e.log.Debug("close sandbox stdin", "id", sb.id, "err", err)
			}
		case <-sb.stopped:
		}
	}()
	return nil
}

// Kill kills the sandbox: with its own cgroup every process in it (the
// cgroup is frozen first), else its init, which takes down its pid
// namespace and everything in it.
func (sb *sandbox) Kill(ctx context.Context) error {
	err := sb.task.Kill(sb.e.nsctx(context.WithoutCancel(ctx)), syscall.SIGKILL, sb.e.killOpts()...)
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("kill sandbox: %w", err)
	}
	return nil
}

// WaitIO waits for the output copiers: the shim closes the output FIFOs
// once the process's pipes are drained.
func (sb *sandbox) WaitIO() { sb.task.IO().Wait() }

// Meter opens the sandbox's cgroup counters; nil when it has no cgroup of
// its own.
func (sb *sandbox) Meter() engine.Meter {
	f := sb.e.fallback()
	if !f.killAll {
		return nil
	}
	return sb.e.cgroups.open(f.cgroupParent + sb.e.cgroupPath(sb.id))
}

// Usage reads the sandbox's cgroup counters; it must run before the task is
// deleted, which removes the cgroup. OOM is read from the cgroup's oom_kill
// count, because exit code 137 is ambiguous (a timeout kill gives it too) and
// a task whose child was OOM-killed can still exit 0.
func (sb *sandbox) Usage(ctx context.Context) sandpit.Usage {
	var u sandpit.Usage
	e := sb.e
	f := e.fallback()
	if !f.killAll {
		return u // no cgroup of its own: the counters would be a parent's
	}
	// containerd's default spec puts the sandbox at /<namespace>/<id>;
	// rootless, that path is relative to the daemon's delegated cgroup.
	if u, ok := e.cgroups.usage(f.cgroupParent + e.cgroupPath(sb.id)); ok {
		return u
	}
	m, err := sb.task.Metrics(e.nsctx(ctx))
	if err != nil {
		e.log.Debug("sandbox metrics unavailable", "err", err)
		return u
	}
	data, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		e.log.Debug("sandbox metrics undecodable", "err", err)
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

// Remove deletes the task (killing it if needed), the container and its
// snapshot. It is idempotent and logs rather than fails: the janitor removes
// whatever it could not.
func (sb *sandbox) Remove(ctx context.Context) {
	e := sb.e
	ctx = e.nsctx(context.WithoutCancel(ctx))
	sb.stopOnce.Do(func() { close(sb.stopped) })
	sb.stdin.Abort()
	var failed error
	if sb.task != nil {
		if _, err := sb.task.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			failed = fmt.Errorf("delete sandbox task: %w", err)
		}
	}
	if err := sb.container.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) && failed == nil {
		failed = fmt.Errorf("delete sandbox container: %w", err)
	}
	if failed == nil {
		return
	}
	if sb.shim != nil && sb.shim.exited() {
		e.removeAfterShimDied(ctx, sb.id)
		return
	}
	if !isUnavailable(failed) {
		e.log.Warn("sandbox not removed", "id", sb.id, "err", failed)
		return
	}
	// The client it was made with is gone (containerd restarted): remove it
	// by id through the current one, once containerd answers again.
	e.removeByID(ctx, sb.id)
}

// removeByID removes a sandbox through the current client, retrying while
// containerd is unavailable, for up to a minute or until the engine
// closes; what it cannot remove, the janitor of the next connection does.
func (e *Engine) removeByID(ctx context.Context, id string) {
	deadline := time.Now().Add(time.Minute)
	delay := 100 * time.Millisecond
	for {
		err := e.removeOnce(ctx, id)
		if err == nil {
			return
		}
		if !isUnavailable(err) || time.Now().After(deadline) {
			e.log.Warn("sandbox not removed; the janitor will", "id", id, "err", err)
			return
		}
		select {
		case <-time.After(delay):
		case <-e.closing:
			e.log.Warn("sandbox not removed before close; the janitor will", "id", id, "err", err)
			return
		}
		delay = min(2*delay, 5*time.Second)
	}
}

func (e *Engine) removeOnce(ctx context.Context, id string) error {
	c, err := e.connect(ctx)
	if err != nil {
		return err
	}
	ctx = e.nsctx(ctx)
	ctr, err := c.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return e.removeContainer(ctx, ctr)
}
