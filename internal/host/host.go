// Package host reads what sandpit needs to know about the machine it runs
// on: how cgroups are mounted, whether user namespaces and seccomp are
// available, whether this process is rootless and who listens on a socket,
// and the load, memory and CPU figures of /proc. Every such probe lives here,
// once. It reads only; it changes nothing on the host.
package host

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// CgroupMode is how the host mounts cgroups.
type CgroupMode string

const (
	CgroupV1     CgroupMode = "v1"
	CgroupHybrid CgroupMode = "hybrid" // v1 controllers plus a cgroup2 mount at /sys/fs/cgroup/unified
	CgroupV2     CgroupMode = "v2"
	CgroupNone   CgroupMode = "none"
)

// CgroupMount is one cgroup filesystem mounted on this host.
type CgroupMount struct {
	Point string // mount point
	Root  string // the hierarchy's dir mounted there ("/" unless bound or namespaced)
	V2    bool   // cgroup2 rather than a v1 hierarchy
	Opts  string // super options: the v1 controllers, e.g. "rw,cpu,cpuacct"
}

// CgroupMounts lists the cgroup mounts in /proc/self/mountinfo, whose
// lines read: id parent dev root mountpoint opts... - fstype source superopts.
func CgroupMounts() []CgroupMount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []CgroupMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+3 >= len(fields) {
			continue
		}
		switch fields[sep+1] {
		case "cgroup", "cgroup2":
			out = append(out, CgroupMount{Point: fields[4], Root: fields[3], V2: fields[sep+1] == "cgroup2", Opts: fields[sep+3]})
		}
	}
	return out
}

// DetectCgroups tells how the host mounts cgroups.
func DetectCgroups() CgroupMode {
	var v1, v2, v2root bool
	for _, m := range CgroupMounts() {
		switch {
		case !m.V2:
			v1 = true
		case m.Point == "/sys/fs/cgroup":
			v2, v2root = true, true
		default:
			v2 = true
		}
	}
	switch {
	case v2root:
		return CgroupV2
	case v1 && v2:
		return CgroupHybrid
	case v1:
		return CgroupV1
	}
	return CgroupNone
}

// UserNamespacesEnabled reports whether the kernel allows new user namespaces.
func UserNamespacesEnabled() (bool, string) {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil {
		return false, "cannot read /proc/sys/user/max_user_namespaces: " + err.Error()
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if n == 0 {
		return false, "user.max_user_namespaces is 0 (hint: sysctl -w user.max_user_namespaces=15000)"
	}
	return true, fmt.Sprintf("user.max_user_namespaces=%d", n)
}

// IDRangeConflicts lists /etc/subuid and /etc/subgid entries that overlap
// the host ids [hostBase, hostBase+size).
func IDRangeConflicts(hostBase, size uint32) []string {
	var out []string
	lo, hi := uint64(hostBase), uint64(hostBase)+uint64(size)
	for _, file := range []string{"/etc/subuid", "/etc/subgid"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(strings.TrimSpace(line), ":")
			if len(f) != 3 {
				continue
			}
			start, err1 := strconv.ParseUint(f[1], 10, 64)
			count, err2 := strconv.ParseUint(f[2], 10, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			if start < hi && start+count > lo {
				out = append(out, fmt.Sprintf("%s: %s", file, line))
			}
		}
	}
	return out
}

// SeccompSupported reports whether the kernel supports seccomp filters.
func SeccompSupported() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	return strings.Contains(string(b), "Seccomp:")
}

// BinaryVersion runs `bin --version` and returns its first line, or an error
// when bin is not installed.
func BinaryVersion(bin string) (string, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return "", err
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line), nil
}
