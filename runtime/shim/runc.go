package shim

import (
	"context"
	"log/slog"
	"syscall"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/pkg/shutdown"
	ptypes "github.com/containerd/containerd/protobuf/types"
	"github.com/containerd/containerd/runtime/v2/runc/task"
	cshim "github.com/containerd/containerd/runtime/v2/shim"
)

// runcService fronts containerd's own runc task service (the one in
// containerd-shim-runc-v2, built from the v1.7 module): every container is
// still made by exec'ing runc, but by one shim for all sandboxes.
type runcService struct {
	taskAPI.TaskService
	held tracked
}

func newRuncService(ctx context.Context, publisher cshim.Publisher, cfg Config) (*runcService, error) {
	ctx, sd := shutdown.WithShutdown(ctx)
	_ = sd // never shut down by a task: the owner decides (see Shutdown)
	inner, err := task.NewTaskService(ctx, publisher, sd)
	if err != nil {
		return nil, err
	}
	return &runcService{TaskService: inner, held: tracked{ids: map[string]bool{}}}, nil
}

func (s *runcService) Create(ctx context.Context, r *taskAPI.CreateTaskRequest) (*taskAPI.CreateTaskResponse, error) {
	resp, err := s.TaskService.Create(ctx, r)
	if err == nil {
		s.held.set(r.ID, true)
	}
	return resp, err
}

func (s *runcService) Delete(ctx context.Context, r *taskAPI.DeleteRequest) (*taskAPI.DeleteResponse, error) {
	resp, err := s.TaskService.Delete(ctx, r)
	if err == nil && r.ExecID == "" {
		s.held.set(r.ID, false)
	}
	return resp, err
}

// Shutdown is a no-op: containerd asks every shim to shut down after each
// task delete, and this one serves the others.
func (s *runcService) Shutdown(context.Context, *taskAPI.ShutdownRequest) (*ptypes.Empty, error) {
	return &ptypes.Empty{}, nil
}

// killAll kills and deletes every container still held.
func (s *runcService) killAll(ctx context.Context) {
	for _, id := range s.held.list() {
		s.TaskService.Kill(ctx, &taskAPI.KillRequest{ID: id, Signal: uint32(syscall.SIGKILL), All: true})
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s.TaskService.Wait(wctx, &taskAPI.WaitRequest{ID: id})
		cancel()
		if _, err := s.TaskService.Delete(ctx, &taskAPI.DeleteRequest{ID: id}); err != nil {
			slog.Warn("delete a container at exit", "id", id, "err", err)
		}
	}
}
