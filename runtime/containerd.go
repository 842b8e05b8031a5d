package runtime

import (
	"github.com/sandpit-dev/sandpit/runtime/ctrd"
	"github.com/sandpit-dev/sandpit/runtime/engine"
)

// Names of the containerd engine (package runtime/ctrd) that callers of
// this package use with a Config: they stay here so that a server, a test
// or a command configures one package.
const (
	LabelInstance       = ctrd.LabelInstance
	LabelRun            = ctrd.LabelRun
	LabelState          = ctrd.LabelState
	LabelRootfs         = ctrd.LabelRootfs
	LabelRootfsInstance = ctrd.LabelRootfsInstance
	DefaultRootfsDir    = ctrd.DefaultRootfsDir
	RuntimeSandpit      = ctrd.RuntimeSandpit
	ShimRuntimeBinary   = ctrd.ShimRuntimeBinary
	ShimDaemonBinary    = ctrd.ShimDaemonBinary
	ShimInitBinary      = ctrd.ShimInitBinary
	SystemAddress       = ctrd.SystemAddress
	StateTmpfsOptions   = ctrd.StateTmpfsOptions
	FallbackCPUSeconds  = ctrd.FallbackCPUSeconds
)

// Errors a run can fail with when the engine cannot run it.
var (
	ErrImageMissing        = engine.ErrImageMissing
	ErrUnavailable         = engine.ErrUnavailable
	ErrLimitsUnenforceable = engine.ErrLimitsUnenforceable
	ErrShimDied            = engine.ErrShimDied
)

type (
	// UnavailableError says which containerd address failed and how to fix it.
	UnavailableError = engine.UnavailableError
	// PrivateDaemon is a containerd of sandpit's own (ctrd.PrivateDaemon).
	PrivateDaemon = ctrd.PrivateDaemon
)

var (
	OwnerFilter        = ctrd.OwnerFilter
	Answers            = ctrd.Answers
	Resolve            = ctrd.Resolve
	RootlessCgroups    = ctrd.RootlessCgroups
	CheckRuntimeBinary = ctrd.CheckRuntimeBinary
	StateOnTmpfs       = ctrd.StateOnTmpfs
	ReleaseStateTmpfs  = ctrd.ReleaseStateTmpfs
	ContainerdsUsing   = ctrd.ContainerdsUsing
)

// engineConfig is the containerd engine's share of c.
func (c *Config) engineConfig() ctrd.Config {
	return ctrd.Config{
		Address: c.Address, Namespace: c.Namespace, Instance: c.Instance,
		RuntimeName: c.RuntimeName, RuncBinary: c.RuncBinary, RuncRoot: c.RuncRoot, ShimDir: c.ShimDir,
		CgroupParent: c.CgroupParent, ShimCgroup: c.ShimCgroup, RootfsDir: c.RootfsDir,
		Snapshotter: c.Snapshotter, StateDir: c.StateDir,
		Limits: c.Limits, Rootless: c.Rootless, AllowUnenforcedLimits: c.AllowUnenforcedLimits,
		DialTimeout: c.DialTimeout, Logger: c.Logger,
	}
}

// UsesShim reports whether sandboxes run under sandpit's own shim.
func (c *Config) UsesShim() bool { e := c.engineConfig(); return e.UsesShim() }

// CheckShim says what sandpit's runtime is missing, before anything runs.
func (c *Config) CheckShim() error { e := c.engineConfig(); return e.CheckShim() }

// ShimInit is where sandpit-shim-init is in the shim dir, and whether it
// is there.
func (c *Config) ShimInit() (string, bool) { e := c.engineConfig(); return e.ShimInit() }

// CheckOCIBinary refuses an OCI runtime binary the chosen runtime ignores.
func (c *Config) CheckOCIBinary() error { e := c.engineConfig(); return e.CheckOCIBinary() }
