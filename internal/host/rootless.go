package host

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// IsRootless reports whether this process lacks real root: it runs as a
// non-root user, or as root of a user namespace that does not map the host's
// root (as inside rootlesskit).
func IsRootless() bool {
	return os.Geteuid() != 0 || InUserNamespace()
}

// InUserNamespace reports whether this process runs in a user namespace
// that does not map the host's root (as inside rootlesskit).
func InUserNamespace() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return !mapsHostRoot(string(b))
}

// mapsHostRoot reports whether a uid_map maps host uid 0 to uid 0.
func mapsHostRoot(uidMap string) bool {
	sc := bufio.NewScanner(strings.NewReader(uidMap))
	for sc.Scan() {
		var inside, outside, n uint64
		if _, err := fmt.Sscan(sc.Text(), &inside, &outside, &n); err == nil && inside == 0 && outside == 0 && n > 0 {
			return true
		}
	}
	return false
}

// PeerPID is the process id of whoever listens on the unix socket path.
func PeerPID(path string) (int, error) {
	conn, err := net.DialTimeout("unix", path, 3*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	if cred.Pid <= 0 {
		return 0, errors.New("its process is not visible from this pid namespace")
	}
	return int(cred.Pid), nil
}

// CgroupV2Of is a process's cgroup v2 path ("0::/path" in /proc/PID/cgroup).
func CgroupV2Of(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("/proc/%d/cgroup has no cgroup v2 entry", pid)
}
