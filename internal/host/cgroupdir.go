package host

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// MkdirCgroup creates cgroup rel (relative to the hierarchy mounted at
// mount) and its missing parents. In a v1 cpuset hierarchy a new cgroup
// starts with no CPUs and no memory nodes, and a process cannot join it
// ("no space left on device"): each level created gets its parent's.
func MkdirCgroup(mount, rel string) (string, error) {
	dir := mount
	for _, part := range strings.Split(strings.Trim(filepath.Clean("/"+rel), "/"), "/") {
		if part == "" {
			continue
		}
		parent := dir
		dir = filepath.Join(dir, part)
		err := os.Mkdir(dir, 0o755)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return dir, err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(parent, f))
			if err != nil {
				break // not a cpuset hierarchy
			}
			if cur, _ := os.ReadFile(filepath.Join(dir, f)); len(bytes.TrimSpace(cur)) == 0 {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0); err != nil {
					return dir, err
				}
			}
		}
	}
	return dir, nil
}

// OwnCgroupProcs lists the cgroup.procs files of the cgroups this process
// is in now, one per hierarchy of mounts (CgroupMounts, which change far
// less often than a process's cgroup), as /proc/self/cgroup names them.
func OwnCgroupProcs(mounts []CgroupMount) []string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	return ownCgroupProcs(string(b), mounts)
}

// ownCgroupProcs maps the lines of /proc/PID/cgroup
// ("hierarchy-id:controllers:path") onto the mounts that show them.
func ownCgroupProcs(procCgroup string, mounts []CgroupMount) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(procCgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := parts[1], parts[2]
		unified := parts[0] == "0" && ctrls == ""
		for _, m := range mounts {
			if m.V2 != unified || (!unified && !hasAll(m.Opts, ctrls)) {
				continue
			}
			rel, ok := strings.CutPrefix(path, m.Root)
			if m.Root == "/" {
				rel, ok = path, true
			}
			if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
				continue // this mount shows another part of the hierarchy
			}
			out = append(out, filepath.Join(m.Point, rel, "cgroup.procs"))
			break
		}
	}
	return out
}

// hasAll reports whether the super options opts name every controller of
// ctrls ("cpu,cpuacct", or "name=systemd" for a named hierarchy).
func hasAll(opts, ctrls string) bool {
	have := strings.Split(opts, ",")
	for _, c := range strings.Split(ctrls, ",") {
		if !slices.Contains(have, c) {
			return false
		}
	}
	return true
}
