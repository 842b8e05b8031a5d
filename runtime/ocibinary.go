package runtime

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
