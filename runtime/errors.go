package runtime

import (
	"fmt"

	"github.com/sandpit-dev/sandpit"
)

// Sentinels callers branch on with errors.Is; each is of a sandpit error
// class, which is all the MCP boundary looks at.
var (
	ErrInvalidRequest      = sandpit.Define(sandpit.ErrInvalidArgument, "invalid request")
	ErrUnknownLanguage     = sandpit.Define(sandpit.ErrInvalidArgument, "unknown language")
	ErrImageMissing        = sandpit.Define(sandpit.ErrUnavailable, "image not available")
	ErrUnavailable         = sandpit.Define(sandpit.ErrUnavailable, "container runtime unavailable")
	ErrLimitsUnenforceable = sandpit.Define(sandpit.ErrUnavailable, "resource limits cannot be enforced on this host")
)

// UnavailableError says which containerd address failed and how to fix it.
type UnavailableError struct {
	Address string
	Err     error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("containerd is not reachable at %s: %v", e.Address, e.Err)
}

// Hint says how to fix it.
func (e *UnavailableError) Hint() string {
	return "start it with `sudo scripts/containerd.sh start`, or run `sandpit doctor`"
}

func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }
