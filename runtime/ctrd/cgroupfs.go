package ctrd

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
)

// cgroupFS reads a sandbox's counters straight from the cgroup filesystem:
// a handful of small files instead of a Metrics round trip through
// containerd and the shim (several milliseconds on every run). When a file
// is missing, sandbox.Usage falls back to task.Metrics.
type cgroupFS struct {
	v1 map[string]string // controller -> mount point (cgroup v1 and hybrid)
	v2 string            // cgroup2 root, when controllers live there
}

func newCgroupFS() *cgroupFS {
	c := &cgroupFS{v1: map[string]string{}}
	for _, m := range host.CgroupMounts() {
		if m.V2 {
			if b, err := os.ReadFile(filepath.Join(m.Point, "cgroup.controllers")); err == nil && strings.Contains(string(b), "memory") {
				c.v2 = m.Point
			}
			continue
		}
		for _, o := range strings.Split(m.Opts, ",") {
			switch o {
			case "memory", "cpuacct", "pids":
				c.v1[o] = m.Point
			}
		}
	}
	return c
}

// usage reads the counters of the cgroup at path (as in the OCI spec's
// cgroupsPath) once, through a reader of its own (meter.go). ok is
// false when they cannot all be read, peak memory included.
func (c *cgroupFS) usage(path string) (u sandpit.Usage, ok bool) {
	r := c.open(path)
	defer r.Close()
	if r.memPeak == nil {
		return u, false // cgroup v2 before kernel 5.19: task.Metrics has it
	}
	k, ok := r.Read()
	if !ok {
		return u, false
	}
	return k.Usage(), true
}
