package runtime

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit/oci"
)

// CgroupMode is how the host mounts cgroups.
type CgroupMode string

const (
	CgroupV1     CgroupMode = "v1"
	CgroupHybrid CgroupMode = "hybrid" // v1 controllers plus a cgroup2 mount at /sys/fs/cgroup/unified
	CgroupV2     CgroupMode = "v2"
	CgroupNone   CgroupMode = "none"
)

// DetectCgroups reads /proc/self/mountinfo's cgroup mounts.
func DetectCgroups() CgroupMode {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return CgroupNone
	}
	defer f.Close()
	var v1, v2, v2root bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// fields: ... mountpoint ... - fstype source opts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, fld := range fields {
			if fld == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		switch fields[sep+1] {
		case "cgroup":
			v1 = true
		case "cgroup2":
			v2 = true
			if fields[4] == "/sys/fs/cgroup" {
				v2root = true
			}
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

// IDRangeConflicts lists /etc/subuid and /etc/subgid entries that overlap m.
func IDRangeConflicts(m oci.IDMap) []string {
	var out []string
	lo, hi := uint64(m.HostBase), uint64(m.HostBase)+uint64(m.Size)
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
