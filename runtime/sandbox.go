package runtime

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/leases"
	coci "github.com/containerd/containerd/oci"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/oci"
)

// sandbox is one single-use container with its task, created but maybe not
// yet started (a pooled sandbox is started ahead of its request).
type sandbox struct {
	id        string
	container containerd.Container
	task      containerd.Task
	exitC     <-chan containerd.ExitStatus
	// done closes once the exit status was received (by await) or the
	// sandbox destroyed. exitC delivers its status once and is then
	// closed, so nothing but await may receive from it.
	done     chan struct{}
	doneOnce sync.Once
	stdin    *stdinFeed
	stdout   *cappedBuffer
	stderr   *cappedBuffer
	shim     *shimProc // RuntimeSandpit: the shim serving it
}

// create makes the container and its task, wired to fresh capped output
// buffers and to stdin, and subscribes to its exit. On error nothing is left.
//
// A cancelled ctx returns at once, but the creation itself is never
// cancelled half-way: containerd goes on with a request its client gave up
// on, so a task cancelled mid-create could be made after we looked, and
// run on with its container record undeletable ("cannot delete running
// task"; a CI failure when a client disconnected). The creation finishes
// in the background and what it made is destroyed.
func (r *Runtime) create(ctx context.Context, c *containerd.Client, img containerd.Image, cid, fifoDir string, stdin *stdinFeed, stdoutCap int64, extra []coci.SpecOpts) (*sandbox, error) {
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
	detached := context.WithoutCancel(ctx)
	r.background(func() {
		sb, err := r.createWhole(detached, c, img, cid, fifoDir, stdin, stdoutCap, extra)
		mu.Lock()
		gone := abandoned
		if !gone {
			done <- made{sb, err}
		}
		mu.Unlock()
		if gone && sb != nil {
			r.destroy(detached, sb)
		}
	})
	select {
	case m := <-done:
		return m.sb, m.err
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		select {
		case m := <-done: // made meanwhile: the caller's await kills it
			return m.sb, m.err
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

// createWhole is create's work, under a context that is not cancelled.
func (r *Runtime) createWhole(cleanupCtx context.Context, c *containerd.Client, img containerd.Image, cid, fifoDir string, stdin *stdinFeed, stdoutCap int64, extra []coci.SpecOpts) (_ *sandbox, retErr error) {
	// The creation's calls are bounded; the task's wait, which lasts as
	// long as the sandbox, and the clean-up are not.
	ctx, cancel := context.WithTimeout(cleanupCtx, createTimeout)
	defer cancel()
	labels := map[string]string{LabelInstance: r.cfg.Instance, LabelRun: cid, LabelState: r.cfg.StateDir}
	specOpts := append([]coci.SpecOpts{oci.WithHardening(oci.Profile{
		Limits: r.cfg.Limits,
		UserNS: r.cfg.UserNS,
		UID:    sandpit.SandboxUID,
		GID:    sandpit.SandboxGID,
	})}, extra...)
	specOpts = append(specOpts, r.withCgroupParent())
	specOpts = append(specOpts, r.fallbackOpts()...) // after the process options it wraps
	rtOpts, shim, err := r.runtimeOpts(ctx)
	if err != nil {
		return nil, err
	}
	root, err := r.rootfsOpts(ctx, c, img)
	if err != nil {
		return nil, err
	}
	// From here until the task exists, the sandbox's move into its
	// cgroups is coming: keep that move fast (cgwarm.go).
	release := r.warmer.hold()
	defer release()
	container, err := c.NewContainer(leases.WithLease(ctx, noLease), cid,
		rtOpts,
		containerd.WithContainerLabels(labels),
		containerd.WithNewSpec(append(specOpts, root)...),
	)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	sb := &sandbox{id: cid, container: container, stdin: stdin, done: make(chan struct{}),
		stdout: newCappedBuffer(stdoutCap), stderr: newCappedBuffer(r.cfg.OutputBytes), shim: shim}
	defer func() {
		if retErr != nil {
			r.destroy(cleanupCtx, sb)
		}
	}()
	inner := cio.NewCreator(cio.WithStreams(stdin, sb.stdout, sb.stderr), cio.WithFIFODir(fifoDir))
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
				stdin.hold(f)
			}
		}
		return set, nil
	}
	sb.task, err = container.NewTask(ctx, creator)
	release()
	if err != nil {
		return nil, fmt.Errorf("create sandbox task: %w", shimLost(shim, err))
	}
	sb.exitC, err = sb.task.Wait(cleanupCtx)
	if err != nil {
		return nil, fmt.Errorf("wait sandbox task: %w", err)
	}
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

// start starts the task and closes its stdin once the feed is drained: the
// shim keeps the stdin FIFO open, so the program sees EOF only when we close
// it explicitly, after the copier has delivered every byte.
//
// The start itself is not cancelled: a start cut off mid-call came back as
// the shim's "unknown" error after shimLost's wait for a dead shim (2 s); a
// cancelled run's sandbox starts and await kills it at once.
func (r *Runtime) start(ctx context.Context, sb *sandbox) error {
	if err := sb.task.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start sandbox task: %w", shimLost(sb.shim, err))
	}
	cleanupCtx := context.WithoutCancel(ctx)
	go func() {
		select {
		case <-sb.stdin.drained:
			sb.stdin.release()
			if err := sb.task.CloseIO(cleanupCtx, containerd.WithStdinCloser); err != nil && !errdefs.IsNotFound(err) {
				r.log.Debug("close sandbox stdin", "id", sb.id, "err", err)
			}
		case <-sb.done:
		}
	}()
	return nil
}

// finish marks the sandbox's exit as received.
func (sb *sandbox) finish() { sb.doneOnce.Do(func() { close(sb.done) }) }

// killGrace bounds how long we wait for a killed task to be reaped: long
// enough for a loaded host, short enough that a kill the kernel never
// completes does not hold a request for good. 5 s was not: at load 20, with
// eight hostile sandboxes (fork and memory bombs) killed at once beside
// other containerds starting, none of the eight exits reached the server
// within 5 s, even that of a `sleep 600` (TestAttackParallel, a fresh
// clone's suite under stress-ng), and each run became a server error
// instead of a timeout.
const killGrace = 30 * time.Second

// killGiveUp bounds the wait for a killed run's exit, past killGrace's
// warning: a run whose program was killed has its status (timeout,
// cancelled), and at load 26 on two cores three of eight killed hostile
// sandboxes' exits took longer than 30 s to arrive (TestAttackParallel, a
// fresh clone's suite under stress-ng --cpu 2); such a run is slow to
// answer, not a server error.
const killGiveUp = 3 * time.Minute

// await waits for the task to exit, killing it at the deadline or when ctx
// is cancelled, then waits for its output to drain and reads its cgroup
// counters. It leaves the sandbox for destroy.
func (r *Runtime) await(ctx context.Context, sb *sandbox, deadline time.Time) (*stepOutput, error) {
	cleanupCtx := context.WithoutCancel(ctx)
	t0 := time.Now()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var (
		st       containerd.ExitStatus
		timedOut bool
	)
	select {
	case st = <-sb.exitC:
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
	}
	if timedOut || ctx.Err() != nil {
		// Killing init tears down the pid namespace and everything in it.
		if err := sb.task.Kill(cleanupCtx, syscall.SIGKILL, r.killOpts()...); err != nil && !errdefs.IsNotFound(err) {
			r.log.Warn("kill sandbox", "id", sb.id, "err", err)
		}
		select {
		case st = <-sb.exitC:
		case <-time.After(killGrace):
			r.log.Warn("a killed sandbox has not exited yet; still waiting", "id", sb.id, "after", killGrace, "load", host.LoadString())
			select {
			case st = <-sb.exitC:
			case <-time.After(killGiveUp - killGrace):
				return nil, fmt.Errorf("sandbox %s did not exit %s after SIGKILL", sb.id, killGiveUp)
			}
		}
	}
	sb.finish()
	if err := st.Error(); err != nil {
		return nil, fmt.Errorf("wait sandbox task: %w", shimLost(sb.shim, err))
	}
	// The shim closes the output FIFOs once the process's pipes are
	// drained; wait for our copiers so the buffers are complete. Bounded:
	// a grandchild that escaped the pid namespace teardown cannot exist, but
	// a stuck copier must not hang the request.
	ioDone := make(chan struct{})
	go func() { sb.task.IO().Wait(); close(ioDone) }()
	select {
	case <-ioDone:
	case <-time.After(killGrace):
		r.log.Warn("sandbox output did not drain", "id", sb.id)
	}
	tIO := time.Since(t0)
	out := &stepOutput{stdout: sb.stdout, stderr: sb.stderr, usage: r.usage(cleanupCtx, sb.task), exitCode: int(st.ExitCode())}
	r.log.Debug("sandbox exited", "id", sb.id, "exit_and_io", tIO, "metrics", time.Since(t0)-tIO, "exited_at", st.ExitTime().Sub(t0))
	switch {
	case timedOut:
		out.status = sandpit.StatusTimeout
	case ctx.Err() != nil:
		out.status = sandpit.StatusCancelled // killed above; what it wrote is kept
	case out.usage.OOMKilled:
		out.status = sandpit.StatusOOM
	case out.exitCode == 0:
		out.status = sandpit.StatusSuccess
	default:
		out.status = sandpit.StatusError
	}
	return out, nil
}

// destroy deletes the task (killing it if needed), the container and its
// snapshot. It is idempotent and logs rather than fails: the janitor removes
// whatever it could not.
func (r *Runtime) destroy(ctx context.Context, sb *sandbox) {
	sb.finish()
	sb.stdin.abort()
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
		r.removeAfterShimDied(ctx, sb.id)
		return
	}
	if !isUnavailable(failed) {
		r.log.Warn("sandbox not removed", "id", sb.id, "err", failed)
		return
	}
	// The client it was made with is gone (containerd restarted): remove it
	// by id through the current one, once containerd answers again.
	r.removeByID(ctx, sb.id)
}

// removeByID removes a sandbox through the current client, retrying while
// containerd is unavailable, for up to a minute or until the runtime
// closes; what it cannot remove, the janitor of the next connection does.
func (r *Runtime) removeByID(ctx context.Context, id string) {
	deadline := time.Now().Add(time.Minute)
	delay := 100 * time.Millisecond
	for {
		err := r.removeOnce(ctx, id)
		if err == nil {
			return
		}
		if !isUnavailable(err) || time.Now().After(deadline) {
			r.log.Warn("sandbox not removed; the janitor will", "id", id, "err", err)
			return
		}
		select {
		case <-time.After(delay):
		case <-r.closing:
			r.log.Warn("sandbox not removed before close; the janitor will", "id", id, "err", err)
			return
		}
		delay = min(2*delay, 5*time.Second)
	}
}

func (r *Runtime) removeOnce(ctx context.Context, id string) error {
	c, err := r.connect(ctx)
	if err != nil {
		return err
	}
	ctx = r.nsctx(ctx)
	ctr, err := c.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return r.removeContainer(ctx, ctr)
}

// background runs cleanup off the request path; Close waits for it.
func (r *Runtime) background(fn func()) {
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		fn()
	}()
}

// stdinFeed is a sandbox's standard input. A cold run knows its stdin when
// the task is created; a pooled sandbox gets it (after a request header)
// when a request claims it. drained closes once everything was read.
type stdinFeed struct {
	mu      sync.Mutex
	r       io.Reader
	pw      *io.PipeWriter
	drained chan struct{}
	once    sync.Once
	held    *os.File // see hold
}

// fixedStdin feeds the parts, then EOF.
func fixedStdin(parts ...[]byte) *stdinFeed {
	return &stdinFeed{r: bytes.NewReader(bytes.Join(parts, nil)), drained: make(chan struct{})}
}

// lateStdin feeds whatever is later passed to send.
func lateStdin() *stdinFeed {
	pr, pw := io.Pipe()
	return &stdinFeed{r: pr, pw: pw, drained: make(chan struct{})}
}

func (f *stdinFeed) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		f.once.Do(func() { close(f.drained) })
	}
	return n, err
}

// send writes the parts and ends the stream, in the background: the
// program may not read its stdin at all.
func (f *stdinFeed) send(parts ...[]byte) {
	go func() {
		for _, p := range parts {
			if _, err := f.pw.Write(p); err != nil {
				return
			}
		}
		f.pw.Close()
	}()
}

// abort ends a late stream without data (a pooled sandbox being discarded).
func (f *stdinFeed) abort() {
	if f.pw != nil {
		f.pw.Close()
	}
	f.release()
}

// hold keeps an extra writer open on the stdin FIFO until release.
func (f *stdinFeed) hold(w *os.File) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = w
}

// release closes the held writer, once everything was written: the program
// can then see EOF.
func (f *stdinFeed) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held != nil {
		f.held.Close()
		f.held = nil
	}
}
