package ctrd

import (
	"errors"
	"fmt"
	"path/filepath"
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

// A janitor unmounts only shared roots whose directory is named for its
// own identity (instance and state dir), wherever the rootfs dir was.
func TestOwnsRootDir(t *testing.T) {
	r := &Engine{cfg: Config{Instance: "default", StateDir: "/srv/a/instances/default", RootfsDir: "/run/sandpit/rootfs"}}
	other := &Engine{cfg: Config{Instance: "default", StateDir: "/srv/b/instances/default", RootfsDir: "/run/sandpit/rootfs"}}
	mine := filepath.Base(r.instanceRootfsDir())
	tests := []struct {
		name string
		dir  string
		want bool
	}{
		{name: "own, default rootfs dir", dir: filepath.Join(r.instanceRootfsDir(), "0123abcd"), want: true},
		{name: "own, another rootfs dir", dir: filepath.Join("/var/tmp/roots", mine, "0123abcd"), want: true},
		{name: "same instance, another state dir", dir: filepath.Join(other.instanceRootfsDir(), "0123abcd")},
		{name: "the rootfs dir itself", dir: r.instanceRootfsDir()},
		{name: "relative", dir: filepath.Join(mine, "0123abcd")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.ownsRootDir(tt.dir); got != tt.want {
				t.Errorf("ownsRootDir(%s) = %v, want %v", tt.dir, got, tt.want)
			}
		})
	}
}
