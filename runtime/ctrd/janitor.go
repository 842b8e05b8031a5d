package ctrd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/snapshots"
	"github.com/containerd/ttrpc"

	"github.com/sandpit-dev/sandpit/runtime/engine"
)

// Sweep removes every container, task and snapshot labelled with this
// engine's instance and state dir (OwnerFilter), then calls
// Config.OnSweep (the orchestration's per-run dirs). It is what makes a
// restart after a crash clean: a killed server leaves its sandboxes
// RUNNING. Other containerd users, and other sandpit instances — also
// those of the same name under another state dir — keep theirs. It returns
// how many sandboxes it removed.
func (e *Engine) Sweep(ctx context.Context) (int, error) {
	ctx = e.nsctx(ctx)
	e.mu.Lock()
	e.swept = true // this sweep replaces the automatic one at first connect
	e.mu.Unlock()
	c, err := e.connect(ctx)
	if err != nil {
		return 0, err
	}
	return e.sweepCount(ctx, c)
}

func (e *Engine) sweep(ctx context.Context, c *containerd.Client) error {
	n, err := e.sweepCount(ctx, c)
	if n > 0 {
		e.log.Info("janitor: removed sandboxes left by an earlier server", "count", n, "instance", e.cfg.Instance)
	}
	return err
}

// OwnerFilter is the containerd filter (containers and snapshots) of what
// the runtime of instance with state dir stateDir made. An instance's name
// is unique only within one state dir (every default is "default"): a
// runtime is (state dir, instance), and every sweep and leftover check
// must match both, or one process's janitor kills another's live
// sandboxes.
func OwnerFilter(instance, stateDir string) string {
	return fmt.Sprintf("labels.%q==%q,labels.%q==%q", LabelInstance, instance, LabelState, stateDir)
}

// rootsFilter is OwnerFilter for the runtime's shared root views.
func rootsFilter(instance, stateDir string) string {
	return fmt.Sprintf("labels.%q==%q,labels.%q==%q", LabelRootfsInstance, instance, LabelState, stateDir)
}

func (e *Engine) sweepCount(ctx context.Context, c *containerd.Client) (int, error) {
	filter := OwnerFilter(e.cfg.Instance, e.cfg.StateDir)
	containers, err := c.Containers(ctx, filter)
	if err != nil {
		return 0, fmt.Errorf("list sandboxes: %w", err)
	}
	var errs []error
	removed := 0
	for _, ctr := range containers {
		if err := e.removeSwept(ctx, ctr); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	// Snapshots whose container was never created (a crash in between).
	// Shared roots (rootfs.go) are unmounted first; this runtime makes its
	// own again when it next needs one. (Two filters: either matches.)
	sn := c.SnapshotService(e.cfg.Snapshotter)
	var orphans []snapshots.Info
	err = sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		orphans = append(orphans, info)
		return nil
	}, filter, rootsFilter(e.cfg.Instance, e.cfg.StateDir))
	if err != nil {
		errs = append(errs, fmt.Errorf("list sandbox snapshots: %w", err))
	}
	e.forgetRoots()
	for _, info := range orphans {
		if dir, ok := isSharedRoot(info); ok {
			// Only a root in a directory of this runtime's identity is
			// unmounted (instanceRootfsDir: named for the instance and a
			// hash of the state dir; under another --rootfs-dir if the dead
			// runtime had one): a label alone is no proof of ownership.
			if !e.ownsRootDir(dir) {
				e.log.Warn("janitor: a shared root outside this runtime's rootfs dirs is left alone", "dir", dir, "view", info.Name)
				continue
			}
			if err := unmountRoot(dir); err != nil {
				errs = append(errs, fmt.Errorf("shared root %s: %w", dir, err))
				continue
			}
		}
		if err := sn.Remove(ctx, info.Name); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove snapshot %s: %w", info.Name, err))
		}
	}
	if e.cfg.OnSweep != nil {
		if err := e.cfg.OnSweep(); err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// removeSwept removes a container left by a dead server. Its shim may be
// exiting as we sweep (sandpit-shim stops when its server dies): a call
// that meets the shim's connection closing is retried until containerd has
// cleaned up after the dead shim and lets the task go.
func (e *Engine) removeSwept(ctx context.Context, ctr containerd.Container) error {
	return e.retryRemoval(ctx, shimGone, func() error { return e.removeContainer(ctx, ctr) })
}

// retryRemoval calls remove until it succeeds or fails in a way retryable
// does not accept, for up to 10 s, while ctx lasts and the runtime is not
// closing: containerd lets a dead shim's task go only once it has cleaned
// up after that shim.
func (e *Engine) retryRemoval(ctx context.Context, retryable func(error) bool, remove func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := remove()
		if err == nil || !retryable(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return err
		case <-e.closing:
			return err
		}
	}
}

// shimGone reports whether err is a task call that met its shim's
// connection closed: containerd passes ttrpc's ErrClosed on as text.
func shimGone(err error) bool {
	return err != nil && strings.Contains(err.Error(), ttrpc.ErrClosed.Error())
}

func (e *Engine) removeContainer(ctx context.Context, ctr containerd.Container) error {
	if task, err := ctr.Task(ctx, nil); err == nil {
		// WithKillAll is not needed: killing init takes the pid namespace down.
		_ = task.Kill(ctx, syscall.SIGKILL)
		if st, err := task.Wait(ctx); err == nil {
			select {
			case <-st:
			case <-time.After(engine.KillGrace):
			}
		}
		if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("delete task %s: %w", ctr.ID(), err)
		}
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("load task %s: %w", ctr.ID(), err)
	}
	if err := ctr.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete container %s: %w", ctr.ID(), err)
	}
	return nil
}

// OrphanStates lists the state dirs (LabelState) under root of sandboxes
// and snapshots in this runtime's namespace: what instances under root
// left in containerd. The caller sweeps those whose owner is dead (see
// internal/instance), even when their dir is gone (a reboot empties /run,
// containerd keeps its records).
func (e *Engine) OrphanStates(ctx context.Context, root string) ([]string, error) {
	ctx = e.nsctx(ctx)
	c, err := e.connect(ctx)
	if err != nil {
		return nil, err
	}
	if abs, err := filepath.Abs(root); err == nil {
		root = abs // as LabelState is written (Defaults)
	}
	filter := fmt.Sprintf("labels.%q~=%q", LabelState, "^"+regexp.QuoteMeta(filepath.Clean(root)+"/"))
	seen := map[string]bool{}
	containers, err := c.Containers(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	for _, ctr := range containers {
		labels, err := ctr.Labels(ctx)
		if err == nil {
			seen[labels[LabelState]] = true
		}
	}
	err = c.SnapshotService(e.cfg.Snapshotter).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		seen[info.Labels[LabelState]] = true
		return nil
	}, filter)
	if err != nil {
		return nil, fmt.Errorf("list sandbox snapshots: %w", err)
	}
	delete(seen, "")
	return slices.Sorted(maps.Keys(seen)), nil
}
