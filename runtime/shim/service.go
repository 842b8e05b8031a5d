package shim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/identifiers"
	"github.com/containerd/containerd/protobuf"
	ptypes "github.com/containerd/containerd/protobuf/types"
	cshim "github.com/containerd/containerd/runtime/v2/shim"
	"github.com/opencontainers/runc/libcontainer"
)

// Event topics, as containerd's runtime package names them.
const (
	topicCreate = "/tasks/create"
	topicStart  = "/tasks/start"
	topicExit   = "/tasks/exit"
	topicDelete = "/tasks/delete"
)

// service is the task API over libcontainer. Its own lock guards only the
// map of containers; every lifecycle call takes the lock of its container,
// so creating one sandbox never waits for another.
type service struct {
	root      string          // libcontainer state, one dir per container
	ctx       context.Context // carries the namespace, for events of no request
	publisher cshim.Publisher
	log       *slog.Logger
	filters   *filters

	mu         sync.Mutex
	containers map[string]*container
	closing    bool // killAll began: no container may be added
	// made holds the ids of containers this shim began to create and that
	// may still have state in the root (see forget). The state root is
	// shared with the next shim of the same instance (a restarted server
	// starts one while this one may still be exiting): at exit this one
	// destroys only what it made.
	made map[string]bool
}

var _ taskAPI.TaskService = (*service)(nil)

func newService(ctx context.Context, root string, publisher cshim.Publisher, flt *filters, log *slog.Logger) *service {
	return &service{ctx: context.WithoutCancel(ctx), root: root, publisher: publisher, filters: flt, log: log,
		containers: map[string]*container{}, made: map[string]bool{}}
}

var empty = &ptypes.Empty{}

// get returns a container with its lock held; unlock when done.
func (s *service) get(id string) (*container, error) {
	s.mu.Lock()
	c := s.containers[id]
	s.mu.Unlock()
	if c == nil {
		return nil, errdefs.ToGRPCf(errdefs.ErrNotFound, "container %s", id)
	}
	c.mu.Lock()
	if c.c == nil { // its create failed meanwhile
		c.mu.Unlock()
		return nil, errdefs.ToGRPCf(errdefs.ErrNotFound, "container %s", id)
	}
	return c, nil
}

func (s *service) publish(ctx context.Context, topic string, ev any) {
	if err := s.publisher.Publish(ctx, topic, ev); err != nil {
		s.log.Warn("publish event", "topic", topic, "err", err)
	}
}

// Create makes the container and its init process, which waits for Start.
func (s *service) Create(ctx context.Context, r *taskAPI.CreateTaskRequest) (*taskAPI.CreateTaskResponse, error) {
	if err := identifiers.Validate(r.ID); err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	// Reserve the id, holding its lock, while the container is made.
	placeholder := &container{id: r.ID, exited: make(chan struct{})}
	placeholder.mu.Lock()
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		placeholder.mu.Unlock()
		return nil, errdefs.ToGRPCf(errdefs.ErrUnavailable, "the shim is shutting down")
	}
	if s.containers[r.ID] != nil {
		s.mu.Unlock()
		return nil, errdefs.ToGRPCf(errdefs.ErrAlreadyExists, "container %s", r.ID)
	}
	s.containers[r.ID] = placeholder
	s.made[r.ID] = true
	s.mu.Unlock()

	c, err := create(s.root, s.filters, s.log, r)
	if err != nil {
		s.mu.Lock()
		delete(s.containers, r.ID)
		s.mu.Unlock()
		placeholder.mu.Unlock()
		s.forget(r.ID)
		return nil, errdefs.ToGRPCf(errdefs.ErrUnknown, "create %s: %v", r.ID, err)
	}
	c.mu.Lock()
	s.mu.Lock()
	if s.closing {
		// killAll ran while this was being made, and found only the
		// placeholder: nobody else will destroy it.
		delete(s.containers, r.ID)
		s.mu.Unlock()
		if err := c.destroy(); err != nil {
			s.log.Warn("destroy a container made during shutdown", "id", r.ID, "err", err)
		}
		c.mu.Unlock()
		placeholder.mu.Unlock()
		s.forget(r.ID)
		return nil, errdefs.ToGRPCf(errdefs.ErrUnavailable, "the shim is shutting down")
	}
	s.containers[r.ID] = c
	s.mu.Unlock()
	placeholder.mu.Unlock()
	pid := c.pid
	c.mu.Unlock()
	go s.watchExit(c)

	s.publish(ctx, topicCreate, &eventstypes.TaskCreate{
		ContainerID: r.ID,
		Bundle:      r.Bundle,
		Rootfs:      r.Rootfs,
		IO:          &eventstypes.TaskIO{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal},
		Pid:         uint32(pid),
	})
	return &taskAPI.CreateTaskResponse{Pid: uint32(pid)}, nil
}

// watchExit publishes the init's exit.
func (s *service) watchExit(c *container) {
	<-c.exited
	c.mu.Lock()
	c.closeStdin()
	c.mu.Unlock()
	s.publish(s.ctx, topicExit, &eventstypes.TaskExit{
		ContainerID: c.id,
		ID:          c.id,
		Pid:         uint32(c.pid),
		ExitStatus:  uint32(c.exitStatus),
		ExitedAt:    protobuf.ToTimestamp(c.exitedAt),
	})
}

// Start lets the parked init exec the program.
func (s *service) Start(ctx context.Context, r *taskAPI.StartRequest) (*taskAPI.StartResponse, error) {
	if r.ExecID != "" {
		return nil, errdefs.ToGRPCf(errdefs.ErrNotImplemented, "exec processes are not supported")
	}
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if c.started {
		return nil, errdefs.ToGRPCf(errdefs.ErrFailedPrecondition, "container %s already started", r.ID)
	}
	if err := c.c.Exec(); err != nil {
		return nil, errdefs.ToGRPCf(errdefs.ErrUnknown, "start %s: %v", r.ID, err)
	}
	c.started = true
	s.publish(ctx, topicStart, &eventstypes.TaskStart{ContainerID: r.ID, Pid: uint32(c.pid)})
	return &taskAPI.StartResponse{Pid: uint32(c.pid)}, nil
}

// Delete removes a container whose init has exited, or was never started.
func (s *service) Delete(ctx context.Context, r *taskAPI.DeleteRequest) (*taskAPI.DeleteResponse, error) {
	if r.ExecID != "" {
		return nil, errdefs.ToGRPCf(errdefs.ErrNotFound, "exec %s", r.ExecID)
	}
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if c.started && !c.hasExited() {
		return nil, errdefs.ToGRPCf(errdefs.ErrFailedPrecondition, "container %s is running: kill it first", r.ID)
	}
	if err := c.destroy(); err != nil {
		s.log.Warn("destroy container", "id", r.ID, "err", err)
	}
	s.mu.Lock()
	delete(s.containers, r.ID)
	s.mu.Unlock()
	c.c = nil
	s.forget(r.ID)
	resp := &taskAPI.DeleteResponse{Pid: uint32(c.pid), ExitStatus: uint32(c.exitStatus), ExitedAt: protobuf.ToTimestamp(c.exitedAt)}
	s.publish(ctx, topicDelete, &eventstypes.TaskDelete{ContainerID: r.ID, Pid: resp.Pid, ExitStatus: resp.ExitStatus, ExitedAt: resp.ExitedAt})
	return resp, nil
}

// Kill signals the init; with its own pid namespace, SIGKILL to the init
// takes every process of the sandbox down with it.
func (s *service) Kill(ctx context.Context, r *taskAPI.KillRequest) (*ptypes.Empty, error) {
	if r.ExecID != "" {
		return nil, errdefs.ToGRPCf(errdefs.ErrNotFound, "exec %s", r.ExecID)
	}
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if c.hasExited() {
		return nil, errdefs.ToGRPCf(errdefs.ErrNotFound, "process already finished")
	}
	if err := c.c.Signal(syscall.Signal(r.Signal)); err != nil {
		if errors.Is(err, libcontainer.ErrNotRunning) {
			return nil, errdefs.ToGRPCf(errdefs.ErrNotFound, "process already finished")
		}
		return nil, errdefs.ToGRPCf(errdefs.ErrUnknown, "kill %s: %v", r.ID, err)
	}
	return empty, nil
}

// Wait returns once the init has exited.
func (s *service) Wait(ctx context.Context, r *taskAPI.WaitRequest) (*taskAPI.WaitResponse, error) {
	if r.ExecID != "" {
		return nil, errdefs.ToGRPCf(errdefs.ErrNotFound, "exec %s", r.ExecID)
	}
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	c.mu.Unlock()
	select {
	case <-c.exited:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &taskAPI.WaitResponse{ExitStatus: uint32(c.exitStatus), ExitedAt: protobuf.ToTimestamp(c.exitedAt)}, nil
}

func (s *service) State(ctx context.Context, r *taskAPI.StateRequest) (*taskAPI.StateResponse, error) {
	if r.ExecID != "" {
		return nil, errdefs.ToGRPCf(errdefs.ErrNotFound, "exec %s", r.ExecID)
	}
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	st := task.Status_CREATED
	resp := &taskAPI.StateResponse{ID: r.ID, Bundle: c.bundle, Pid: uint32(c.pid),
		Stdin: c.stdio.stdin, Stdout: c.stdio.stdout, Stderr: c.stdio.stderr}
	switch {
	case c.hasExited():
		st = task.Status_STOPPED
		resp.ExitStatus, resp.ExitedAt = uint32(c.exitStatus), protobuf.ToTimestamp(c.exitedAt)
	case c.started:
		st = task.Status_RUNNING
		if ls, err := c.c.Status(); err == nil && ls == libcontainer.Paused {
			st = task.Status_PAUSED
		}
	}
	resp.Status = st
	return resp, nil
}

// Connect tells containerd the shim's and the task's pids.
func (s *service) Connect(ctx context.Context, r *taskAPI.ConnectRequest) (*taskAPI.ConnectResponse, error) {
	resp := &taskAPI.ConnectResponse{ShimPid: uint32(os.Getpid())}
	if c, err := s.get(r.ID); err == nil {
		resp.TaskPid = uint32(c.pid)
		c.mu.Unlock()
	}
	return resp, nil
}

// CloseIO closes the shim's writer on the program's stdin: it reads EOF
// once the client has closed its own.
func (s *service) CloseIO(ctx context.Context, r *taskAPI.CloseIORequest) (*ptypes.Empty, error) {
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if r.Stdin {
		c.closeStdin()
	}
	return empty, nil
}

func (s *service) Pids(ctx context.Context, r *taskAPI.PidsRequest) (*taskAPI.PidsResponse, error) {
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	pids, err := c.c.Processes()
	if err != nil {
		return nil, errdefs.ToGRPCf(errdefs.ErrUnknown, "pids of %s: %v", r.ID, err)
	}
	resp := &taskAPI.PidsResponse{}
	for _, p := range pids {
		resp.Processes = append(resp.Processes, &task.ProcessInfo{Pid: uint32(p)})
	}
	return resp, nil
}

func (s *service) Pause(ctx context.Context, r *taskAPI.PauseRequest) (*ptypes.Empty, error) {
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if err := c.c.Pause(); err != nil {
		return nil, errdefs.ToGRPCf(errdefs.ErrUnknown, "pause %s: %v", r.ID, err)
	}
	return empty, nil
}

func (s *service) Resume(ctx context.Context, r *taskAPI.ResumeRequest) (*ptypes.Empty, error) {
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if err := c.c.Resume(); err != nil {
		return nil, errdefs.ToGRPCf(errdefs.ErrUnknown, "resume %s: %v", r.ID, err)
	}
	return empty, nil
}

// Shutdown does nothing: containerd asks after every task delete, and this
// shim serves the others; its owner ends it.
func (s *service) Shutdown(context.Context, *taskAPI.ShutdownRequest) (*ptypes.Empty, error) {
	return empty, nil
}

// Stats is not served: sandpit reads a sandbox's counters from cgroupfs.
func (s *service) Stats(context.Context, *taskAPI.StatsRequest) (*taskAPI.StatsResponse, error) {
	return nil, errdefs.ToGRPCf(errdefs.ErrNotImplemented, "stats: read the sandbox's cgroup")
}

func (s *service) Exec(context.Context, *taskAPI.ExecProcessRequest) (*ptypes.Empty, error) {
	return nil, errdefs.ToGRPCf(errdefs.ErrNotImplemented, "exec processes are not supported: every sandbox runs one program")
}

func (s *service) ResizePty(context.Context, *taskAPI.ResizePtyRequest) (*ptypes.Empty, error) {
	return nil, errdefs.ToGRPCf(errdefs.ErrNotImplemented, "terminals are not supported")
}

func (s *service) Checkpoint(context.Context, *taskAPI.CheckpointTaskRequest) (*ptypes.Empty, error) {
	return nil, errdefs.ToGRPCf(errdefs.ErrNotImplemented, "checkpoints are not supported")
}

func (s *service) Update(context.Context, *taskAPI.UpdateTaskRequest) (*ptypes.Empty, error) {
	return nil, errdefs.ToGRPCf(errdefs.ErrNotImplemented, "updates are not supported")
}

// killAll kills and destroys every container, when the owner is gone.
func (s *service) killAll(ctx context.Context) {
	s.mu.Lock()
	s.closing = true
	var all []*container
	for _, c := range s.containers {
		all = append(all, c)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Go(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.c == nil {
				return
			}
			if err := c.destroy(); err != nil {
				s.log.Warn("destroy container at exit", "id", c.id, "err", err)
			}
			c.c = nil
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		s.log.Warn("containers not all destroyed 15 s after the owner went away")
	}
}

// madeHere reports whether this shim began to create container id.
func (s *service) madeHere(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.made[id]
}

// destroyLeftovers destroys every container a dead shim left in the state
// root, or those of them mine accepts (nil: all): their processes are
// killed, cgroups, state and rootfs mounts removed. containerd forgot their
// tasks when that shim's connections broke.
func destroyLeftovers(root string, mine func(id string) bool, log *slog.Logger) error {
	entries, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		id := e.Name()
		if mine != nil && !mine(id) {
			continue
		}
		c, err := libcontainer.Load(root, id)
		if err != nil {
			log.Warn("leftover container state unreadable; removing it", "id", id, "err", err)
			errs = append(errs, os.RemoveAll(root+"/"+id))
			continue
		}
		rootfs := c.Config().Rootfs
		// Its init is not this shim's child: wait for it to be gone.
		c.Signal(syscall.SIGKILL)
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if st, err := c.Status(); err != nil || st == libcontainer.Stopped {
				break
			}
		}
		if err := c.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("destroy leftover %s: %w", id, err))
			continue
		}
		unmountLeftover(rootfs)
		log.Info("destroyed a container a dead shim left", "id", id)
	}
	return errors.Join(errs...)
}

// forget drops id from made once its container left no state in the root
// (destroyed, or never created): made would otherwise grow by one id per
// sandbox for the shim's whole life. An id whose state is still there
// (a destroy that failed) is kept, so that the exit still destroys it.
func (s *service) forget(id string) {
	if _, err := os.Lstat(filepath.Join(s.root, id)); !errors.Is(err, os.ErrNotExist) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.containers[id] == nil { // not created again meanwhile
		delete(s.made, id)
	}
}
