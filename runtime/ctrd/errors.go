package ctrd

import (
	"errors"
	"strings"
	"syscall"

	"github.com/containerd/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// clientClosed: a call through a client Close already closed (dropClient).
func clientClosed(err error) bool {
	return status.Code(err) == codes.Canceled && strings.Contains(err.Error(), "client connection is closing")
}

// isUnavailable reports whether err means the daemon went away.
func isUnavailable(err error) bool {
	if err == nil {
		return false
	}
	// A stream (a task's wait) broken by the daemon going away comes back
	// as a raw gRPC status, not converted by errdefs.
	if code := status.Code(errors.Unwrap(err)); code == codes.Unavailable || status.Code(err) == codes.Unavailable {
		return true
	}
	return errdefs.IsUnavailable(err) || errors.Is(err, ErrUnavailable) || clientClosed(err) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) && strings.Contains(err.Error(), "sock")
}
