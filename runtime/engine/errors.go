package engine

import (
	"fmt"

	"github.com/sandpit-dev/sandpit"
)

// Sentinels callers branch on with errors.Is; each is of a sandpit error
// class, which is all the MCP boundary looks at.
var (
	ErrImageMissing        = sandpit.Define(sandpit.ErrUnavailable, "image not available")
	ErrUnavailable         = sandpit.Define(sandpit.ErrUnavailable, "container runtime unavailable")
	ErrLimitsUnenforceable = sandpit.Define(sandpit.ErrUnavailable, "resource limits cannot be enforced on this host")
	// ErrShimDied: a sandbox's shim died; the engine itself is still there.
	ErrShimDied = sandpit.Define(sandpit.ErrUnavailable, "the sandbox shim died")
)

// UnavailableError says which engine address failed and how to fix it.
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

// Usage converts counters to a run's usage figures.
func (k Counters) Usage() sandpit.Usage {
	return sandpit.Usage{
		CPUUserMS:       int64(k.CPUUserNS / 1e6),
		CPUSystemMS:     int64(k.CPUSysNS / 1e6),
		MemoryPeakBytes: k.MemPeak,
		OOMKilled:       k.OOMKills > 0,
		PidsCurrent:     k.Pids,
	}
}
