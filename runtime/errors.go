package runtime

import (
	"errors"
	"fmt"
)

// Sentinel classes callers branch on with errors.Is. Anything the caller (or
// the model behind it) can fix is one of these; other errors mean the server
// or its host is broken.
var (
	ErrInvalidRequest      = errors.New("invalid request")
	ErrUnknownLanguage     = errors.New("unknown language")
	ErrImageMissing        = errors.New("image not available")
	ErrUnavailable         = errors.New("container runtime unavailable")
	ErrLimitsUnenforceable = errors.New("resource limits cannot be enforced on this host")
)

// UnavailableError says which containerd address failed and how to fix it.
type UnavailableError struct {
	Address string
	Err     error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("containerd is not reachable at %s: %v (hint: start it with `sudo scripts/containerd.sh start`, or run `sandpit doctor`)", e.Address, e.Err)
}

func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }
