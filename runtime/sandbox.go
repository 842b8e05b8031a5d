package runtime

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/runtime/engine"
)

// sandbox is one single-use sandbox as the orchestration sees it: the
// engine's handle, its stdin, and the capped buffers its output goes to.
// It is created but maybe not yet started (a pooled sandbox is started
// ahead of its request).
type sandbox struct {
	id    string
	h     engine.Sandbox
	exitC <-chan engine.Exit
	// done closes once the exit status was received (by await) or the
	// sandbox destroyed. exitC delivers its status once, so nothing but
	// await (or a session's watcher) may receive from it.
	done     chan struct{}
	doneOnce sync.Once
	stdin    *engine.Stdin
	stdout   *cappedBuffer
	stderr   *cappedBuffer
}

// create has the engine make a sandbox of image from spec, wired to fresh
// capped output buffers and to stdin, its pipes in dir/fifo. On error
// nothing is left; a cancelled ctx returns at once (the engine removes
// what it was making).
func (r *Runtime) create(ctx context.Context, image, id, dir string, spec engine.Spec, stdin *engine.Stdin, stdoutCap int64) (*sandbox, error) {
	sb := &sandbox{id: id, stdin: stdin, done: make(chan struct{}),
		stdout: newCappedBuffer(stdoutCap), stderr: newCappedBuffer(r.cfg.OutputBytes)}
	spec.ID, spec.Image, spec.IODir = id, image, filepath.Join(dir, "fifo")
	spec.Stdin, spec.Stdout, spec.Stderr = stdin, sb.stdout, sb.stderr
	h, err := r.eng.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	sb.h, sb.exitC = h, h.Exited()
	return sb, nil
}

// start starts the sandbox's first process.
func (r *Runtime) start(ctx context.Context, sb *sandbox) error { return sb.h.Start(ctx) }

// finish marks the sandbox's exit as received.
func (sb *sandbox) finish() { sb.doneOnce.Do(func() { close(sb.done) }) }

// killGrace is engine.KillGrace: how long a killed sandbox's exit is
// waited for before a warning.
const killGrace = engine.KillGrace

// killGiveUp bounds the wait for a killed run's exit, past killGrace's
// warning: a run whose program was killed has its status (timeout,
// cancelled), and at load 26 on two cores three of eight killed hostile
// sandboxes' exits took longer than 30 s to arrive (TestAttackParallel, a
// fresh clone's suite under stress-ng --cpu 2); such a run is slow to
// answer, not a server error.
const killGiveUp = 3 * time.Minute

// await waits for the sandbox to exit, killing it at the deadline or when
// ctx is cancelled, then waits for its output to drain and reads its
// counters. It leaves the sandbox for destroy.
func (r *Runtime) await(ctx context.Context, sb *sandbox, deadline time.Time) (*stepOutput, error) {
	cleanupCtx := context.WithoutCancel(ctx)
	t0 := time.Now()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var (
		st       engine.Exit
		timedOut bool
	)
	select {
	case st = <-sb.exitC:
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
	}
	if timedOut || ctx.Err() != nil {
		if err := sb.h.Kill(cleanupCtx); err != nil {
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
	if st.Err != nil {
		return nil, st.Err
	}
	// Wait for the output copiers so the buffers are complete. Bounded: a
	// grandchild that escaped the pid namespace teardown cannot exist, but
	// a stuck copier must not hang the request.
	ioDone := make(chan struct{})
	go func() { sb.h.WaitIO(); close(ioDone) }()
	select {
	case <-ioDone:
	case <-time.After(killGrace):
		r.log.Warn("sandbox output did not drain", "id", sb.id)
	}
	tIO := time.Since(t0)
	out := &stepOutput{stdout: sb.stdout, stderr: sb.stderr, usage: sb.h.Usage(cleanupCtx), exitCode: st.Code}
	r.log.Debug("sandbox exited", "id", sb.id, "exit_and_io", tIO, "metrics", time.Since(t0)-tIO, "exited_at", st.At.Sub(t0))
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

// destroy has the engine remove the sandbox. It is idempotent and logs
// rather than fails: the janitor removes whatever it could not.
func (r *Runtime) destroy(ctx context.Context, sb *sandbox) {
	sb.finish()
	sb.h.Remove(ctx)
}

// background runs cleanup off the request path; Close waits for it.
func (r *Runtime) background(fn func()) {
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		fn()
	}()
}
