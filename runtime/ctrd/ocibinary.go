package ctrd

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
)

// CheckRuntimeBinary explains, before anything is created, why the chosen
// OCI runtime binary cannot work on this host, or returns nil. The failure
// it knows: crun refuses hosts that mount cgroup v1 controllers beside a
// cgroup2 hierarchy ("cgroups in hybrid mode not supported"), and would
// otherwise fail every run with that terse message from deep in the shim.
func CheckRuntimeBinary(bin string, mode host.CgroupMode) error {
	name := strings.ToLower(filepath.Base(bin))
	if strings.HasPrefix(name, "crun") && mode == host.CgroupHybrid {
		return sandpit.WithHint(fmt.Errorf("%w: the OCI runtime %q does not support this host's hybrid cgroup layout "+
			"(cgroup v1 controllers plus a cgroup2 mount at /sys/fs/cgroup/unified; crun says \"cgroups in hybrid mode not supported\")",
			ErrUnavailable, bin),
			"use --runc-binary runc, or boot with a pure cgroup v2 layout: systemd.unified_cgroup_hierarchy=1")
	}
	return nil
}

// CheckOCIBinary refuses an OCI runtime binary that would be silently
// ignored. sandpit's own shim (RuntimeSandpit) creates sandboxes with the
// runc library built into it and never executes a runtime binary, so
// --runc-binary runsc under it still ran runc — the host's kernel, not
// gVisor — while the operator believed otherwise. Only containerd's runc
// shim (io.containerd.runc.v2) runs the binary it is named; sandpit is
// tested with runc alone, so anything else there is the operator's
// experiment (gVisor is not supported: see the README).
func (c *Config) CheckOCIBinary() error {
	if !c.UsesShim() || c.RuncBinary == "" || c.RuncBinary == "runc" {
		return nil
	}
	return sandpit.WithHint(fmt.Errorf("%w: --runc-binary %q: sandpit's own shim (--runtime %s, the default as root) runs sandboxes with the runc library built into it and never executes an OCI runtime binary, so %q would not be used",
		ErrUnavailable, c.RuncBinary, RuntimeSandpit, c.RuncBinary),
		"drop --runc-binary; or choose --runtime io.containerd.runc.v2, whose shim runs the binary it is named (untested with anything but runc; gVisor's runsc is not supported: sandpit's init and limits are not proven under it)")
}
