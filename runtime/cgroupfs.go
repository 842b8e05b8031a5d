package runtime

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
)

// cgroupFS reads a sandbox's counters straight from the cgroup filesystem:
// a handful of small files instead of a Metrics round trip through
// containerd and the shim (several milliseconds on every run). When a file
// is missing, Runtime.usage falls back to task.Metrics.
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
// cgroupsPath). ok is false when they cannot all be read.
func (c *cgroupFS) usage(path string) (u sandpit.Usage, ok bool) {
	if mem, cpu := c.v1["memory"], c.v1["cpuacct"]; mem != "" && cpu != "" {
		peak, err1 := readUint(filepath.Join(mem, path, "memory.max_usage_in_bytes"))
		oom, err2 := readKey(filepath.Join(mem, path, "memory.oom_control"), "oom_kill")
		user, err3 := readUint(filepath.Join(cpu, path, "cpuacct.usage_user"))
		sys, err4 := readUint(filepath.Join(cpu, path, "cpuacct.usage_sys"))
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			return u, false
		}
		u.MemoryPeakBytes, u.OOMKilled = peak, oom > 0
		u.CPUUserMS, u.CPUSystemMS = int64(user/1e6), int64(sys/1e6)
		if p := c.v1["pids"]; p != "" {
			u.PidsCurrent, _ = readUint(filepath.Join(p, path, "pids.current"))
		}
		return u, true
	}
	if c.v2 != "" {
		dir := filepath.Join(c.v2, path)
		peak, err1 := readUint(filepath.Join(dir, "memory.peak")) // kernel 5.19+
		oom, err2 := readKey(filepath.Join(dir, "memory.events"), "oom_kill")
		user, err3 := readKey(filepath.Join(dir, "cpu.stat"), "user_usec")
		sys, err4 := readKey(filepath.Join(dir, "cpu.stat"), "system_usec")
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			return u, false
		}
		u.MemoryPeakBytes, u.OOMKilled = peak, oom > 0
		u.CPUUserMS, u.CPUSystemMS = int64(user/1000), int64(sys/1000)
		u.PidsCurrent, _ = readUint(filepath.Join(dir, "pids.current"))
		return u, true
	}
	return u, false
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// readKey reads "key value" lines (memory.oom_control, memory.events, cpu.stat).
func readKey(path, key string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, os.ErrNotExist
}
