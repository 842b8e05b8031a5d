package runtime

import (
	"os"
	"path/filepath"
)

// cgCounters are a sandbox's cgroup counters at one moment: what a
// session's calls are measured by (differences), and what its listing
// shows (current memory).
type cgCounters struct {
	cpuUserNS, cpuSysNS uint64
	memCurrent, memPeak uint64
	oomKills            uint64
	pids                uint64
}

// counters reads the cgroup at path (as in the OCI spec's cgroupsPath).
func (c *cgroupFS) counters(path string) (k cgCounters, ok bool) {
	if mem, cpu := c.v1["memory"], c.v1["cpuacct"]; mem != "" && cpu != "" {
		var errs [5]error
		k.memCurrent, errs[0] = readUint(filepath.Join(mem, path, "memory.usage_in_bytes"))
		k.memPeak, errs[1] = readUint(filepath.Join(mem, path, "memory.max_usage_in_bytes"))
		k.oomKills, errs[2] = readKey(filepath.Join(mem, path, "memory.oom_control"), "oom_kill")
		k.cpuUserNS, errs[3] = readUint(filepath.Join(cpu, path, "cpuacct.usage_user"))
		k.cpuSysNS, errs[4] = readUint(filepath.Join(cpu, path, "cpuacct.usage_sys"))
		for _, err := range errs {
			if err != nil {
				return k, false
			}
		}
		if p := c.v1["pids"]; p != "" {
			k.pids, _ = readUint(filepath.Join(p, path, "pids.current"))
		}
		return k, true
	}
	if c.v2 != "" {
		dir := filepath.Join(c.v2, path)
		var errs [4]error
		k.memCurrent, errs[0] = readUint(filepath.Join(dir, "memory.current"))
		k.oomKills, errs[1] = readKey(filepath.Join(dir, "memory.events"), "oom_kill")
		user, err := readKey(filepath.Join(dir, "cpu.stat"), "user_usec")
		errs[2] = err
		sys, err := readKey(filepath.Join(dir, "cpu.stat"), "system_usec")
		errs[3] = err
		for _, err := range errs {
			if err != nil {
				return k, false
			}
		}
		k.cpuUserNS, k.cpuSysNS = user*1000, sys*1000
		k.memPeak, _ = readUint(filepath.Join(dir, "memory.peak")) // kernel 5.19+
		k.pids, _ = readUint(filepath.Join(dir, "pids.current"))
		return k, true
	}
	return k, false
}

// resetPeak starts the cgroup's peak memory afresh, so that a session
// call's peak is its own (cgroup v1's max_usage_in_bytes; v2's memory.peak
// is reset only per open file, so there a call reports the session's peak).
func (c *cgroupFS) resetPeak(path string) bool {
	if mem := c.v1["memory"]; mem != "" {
		return os.WriteFile(filepath.Join(mem, path, "memory.max_usage_in_bytes"), []byte("0"), 0) == nil
	}
	return false
}
