// Package engine is the seam between sandpit's orchestration (package
// runtime: requests, limits, languages, the warm pool, sessions, output)
// and a container engine that makes sandboxes. It holds no engine of its
// own: what a sandbox is asked to be (Spec), what can be done with one
// (Sandbox), and what an engine offers (Engine). The containerd engine is
// package runtime/ctrd.
//
// The shape follows Kubernetes CRI's RuntimeService in spirit — create,
// start, wait, stats, kill, remove, list by owner — narrowed to what a
// single-use sandbox needs. The hardening profile is not part of a Spec:
// an engine applies it to every sandbox it makes, so no caller can ask
// for less.
package engine

import (
	"context"
	"io"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// Engine makes sandboxes. Implementations are safe for concurrent use.
type Engine interface {
	// Image resolves ref (once; later calls are cached) so that sandboxes
	// can be made from it.
	Image(ctx context.Context, ref string) (Image, error)
	// Create makes a sandbox from spec, not yet started. On error nothing
	// is left. A cancelled ctx returns at once; what was being made is
	// removed in the background.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Sweep removes every sandbox of this engine's owner (what a crashed
	// server left) but those live reports, and returns how many it removed.
	Sweep(ctx context.Context) (int, error)
	// Ping dials when needed and returns the engine's version.
	Ping(ctx context.Context) (version string, err error)
	// Limits reports which limits a result must list as not enforced, and
	// why runs must be refused (limits that cannot be enforced without an
	// operator's opt-in).
	Limits() (unenforced []string, refuse error)
	// Lost reports whether err means the engine went away; if so it forgets
	// its connection (the next call redials), and the error returned is the
	// one to give callers.
	Lost(err error) (bool, error)
	// Close waits for background removals, then releases the engine.
	Close() error
}

// Image is a resolved image.
type Image struct {
	Ref string
	// Labels of the image's config; sandpit's images record their language
	// versions there (images.LabelVersionPrefix).
	Labels map[string]string
}

// Spec is what a sandbox is asked to be, beyond the hardening profile
// every sandbox gets.
type Spec struct {
	ID    string // unique among this engine's live sandboxes
	Image string // a ref Image resolved
	// Args and Cwd are the first process.
	Args []string
	Cwd  string
	// Annotations are passed to the OCI runtime (sandpit's shim reads
	// sandpit.InitAnnotation).
	Annotations map[string]string
	Mounts      []Mount
	// CPUs overrides the profile's CPU quota when positive.
	CPUs float64
	// IODir is a host dir of the caller's this sandbox's stdio pipes may be
	// made in; it outlives the sandbox.
	IODir  string
	Stdin  *Stdin
	Stdout io.Writer
	Stderr io.Writer
}

// Mount is a host directory or a tmpfs in the sandbox. Every mount is
// nosuid and nodev.
type Mount struct {
	Destination string
	// Source is a host dir to bind; empty with Tmpfs.
	Source string
	// Tmpfs mounts a size-limited tmpfs owned by the sandbox user.
	Tmpfs    bool
	Size     int64
	Writable bool
	// Exec allows executing what is there (noexec otherwise).
	Exec bool
	// Slave lets mounts made later on the host side under Source appear
	// inside (rslave propagation; Source must be a shared mount point).
	Slave bool
}

// Bind is a bind mount of src at dst.
func Bind(src, dst string, writable, exec bool) Mount {
	return Mount{Source: src, Destination: dst, Writable: writable, Exec: exec}
}

// Sandbox is one single-use sandbox.
type Sandbox interface {
	ID() string
	// Start starts the first process, and closes its stdin once the feed
	// is drained. It is not cut short by ctx: a sandbox whose caller went
	// away starts and is killed.
	Start(ctx context.Context) error
	// Exited delivers the exit once, then nothing: one reader only.
	Exited() <-chan Exit
	// Kill kills every process of the sandbox.
	Kill(ctx context.Context) error
	// WaitIO returns once the output was copied to Stdout and Stderr,
	// which is after the exit.
	WaitIO()
	// Usage reads the sandbox's counters; call it before Remove.
	Usage(ctx context.Context) sandpit.Usage
	// Meter reads the sandbox's counters while it runs; nil when it has no
	// cgroup of its own (its counters would be a parent's).
	Meter() Meter
	// Remove deletes the sandbox, killing what still runs. It is
	// idempotent, logs rather than fails, and retries in the background
	// of the engine while it is unreachable; a sweep removes the rest.
	Remove(ctx context.Context)
}

// Exit is how a sandbox's first process ended.
type Exit struct {
	Code int
	At   time.Time
	// Err: the exit could not be received (the engine or its shim went
	// away); Code is meaningless then.
	Err error
}

// Meter reads a running sandbox's counters.
type Meter interface {
	Read() (Counters, bool)
	// ResetPeak restarts the memory peak, where the host allows it.
	ResetPeak() bool
	Close()
}

// Counters are a sandbox's cgroup counters at one moment.
type Counters struct {
	CPUUserNS, CPUSysNS uint64
	MemCurrent, MemPeak uint64
	OOMKills            uint64
	Pids                uint64
}

// KillGrace bounds how long a killed sandbox's exit is waited for before
// a warning: long enough for a loaded host, short enough that a kill the
// kernel never completes does not hold a request for good. 5 s was not: at
// load 20, with eight hostile sandboxes (fork and memory bombs) killed at
// once beside other containerds starting, none of the eight exits reached
// the server within 5 s, even that of a `sleep 600` (TestAttackParallel, a
// fresh clone's suite under stress-ng), and each run became a server error
// instead of a timeout.
const KillGrace = 30 * time.Second
