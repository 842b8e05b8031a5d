package runtime

import (
	"errors"
	"fmt"
	"testing"

	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestShimGone(t *testing.T) {
	// What containerd's client returns when the shim behind a task closed
	// its connection: ttrpc's error, as text in a gRPC status.
	viaDaemon := errdefs.FromGRPC(status.Error(codes.Unknown, ttrpc.ErrClosed.Error()))
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"through containerd", viaDaemon, true},
		{"wrapped", fmt.Errorf("delete task x: %w", viaDaemon), true},
		{"ttrpc's own", ttrpc.ErrClosed, true},
		{"not found", errdefs.ErrNotFound, false},
		{"daemon gone", status.Error(codes.Unavailable, "connection refused"), false},
		{"other", errors.New("task must be stopped before deletion"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := shimGone(tt.err); got != tt.want {
				t.Errorf("shimGone(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
