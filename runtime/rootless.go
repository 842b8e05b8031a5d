package runtime

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/containerd"
	coci "github.com/containerd/containerd/oci"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/oci"
)

// Rootless mode: containerd runs as a non-root user under rootlesskit. Every
// sandbox still gets its own namespaces, seccomp filter, read-only rootfs and
// no capabilities, but its cgroup limits depend on the host: with cgroup v2
// and systemd delegation of the memory, pids and cpu controllers they hold;
// on cgroup v1 (or v2 without delegation) rootless runc cannot create
// cgroups at all. sandpit then refuses to run code (ErrLimitsUnenforceable)
// unless the operator set Config.AllowUnenforcedLimits, in which case the
// sandbox gets rlimit fallbacks and every Result lists what was not enforced.

// FallbackCPUSeconds is RLIMIT_CPU when the CPU quota cannot be enforced:
// CPU time per process, a backstop behind the wall-clock timeout.
const FallbackCPUSeconds = 120

// IsRootless reports whether this process lacks real root: it runs as a
// non-root user, or as root of a user namespace that does not map the host's
// root (as inside rootlesskit).
func IsRootless() bool {
	if os.Geteuid() != 0 {
		return true
	}
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

// RootlessCgroups says whether a rootless containerd on this host can
// enforce memory, pids and CPU limits, and why.
func RootlessCgroups() (ok bool, reason string) { return rootlessCgroupsOnce() }

// The host's cgroup layout does not change while sandpit runs; probing
// delegation creates a file, so it is done once.
var rootlessCgroupsOnce = sync.OnceValues(func() (bool, string) {
	return rootlessCgroups(DetectCgroups(), "/sys/fs/cgroup", selfCgroupV2())
})

// selfCgroupV2 is this process's cgroup v2 path ("0::/path" in /proc/self/cgroup).
func selfCgroupV2() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
}

// rootlessCgroups decides from the cgroup mode and, on v2, from whether this
// user's cgroup is delegated: writable, with the controllers sandboxes need.
func rootlessCgroups(mode CgroupMode, root, self string) (bool, string) {
	switch mode {
	case CgroupV1, CgroupHybrid:
		return false, fmt.Sprintf("cgroup %s: rootless runc cannot create cgroups here, so memory, pids and CPU limits cannot be enforced", mode)
	case CgroupNone:
		return false, "no cgroup filesystem is mounted"
	}
	dir := filepath.Join(root, self)
	ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return false, fmt.Sprintf("cgroup v2, but %s is unreadable: %v", dir, err)
	}
	have := strings.Fields(string(ctl))
	var missing []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		if !contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return false, fmt.Sprintf("cgroup v2, but controllers %s are not delegated to %s", strings.Join(missing, ", "), dir)
	}
	if err := accessW(dir); err != nil {
		return false, fmt.Sprintf("cgroup v2, but %s is not writable by this user (no delegation): %v", dir, err)
	}
	return true, "cgroup v2 with memory, pids and cpu delegated to " + dir
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func accessW(dir string) error {
	f, err := os.CreateTemp(dir, ".sandpit-probe-")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// limitsUnenforceableError explains what is wrong and what to do.
func limitsUnenforceableError(reason string) error {
	return sandpit.WithHint(fmt.Errorf("%w: containerd runs rootless and %s", ErrLimitsUnenforceable, reason),
		"run sandpit and containerd as root; "+
			"or use a cgroup v2 host with systemd delegation of memory, pids and cpu; "+
			"or accept weaker per-process rlimits with --allow-unenforced-limits, and every result will list what was not enforced")
}

// fallback is what a runtime does about cgroup limits it cannot enforce.
type fallback struct {
	err        error    // refuse to run: limits unenforceable and no opt-in
	unenforced []string // limits reported as not enforced (empty: all hold)
	opts       []coci.SpecOpts
	killAll    bool // the sandbox has its own cgroup: WithKillAll and its usage counters work
}

// planFallback decides, from the configuration and whether cgroups can be
// enforced, whether runs are refused, and which spec options replace the
// cgroup limits. It is pure, for tests.
func planFallback(cfg Config, cgroupsOK bool, reason string) fallback {
	if !cfg.Rootless || cgroupsOK {
		return fallback{killAll: true}
	}
	if !cfg.AllowUnenforcedLimits {
		return fallback{err: limitsUnenforceableError(reason)}
	}
	l := cfg.Limits
	return fallback{
		unenforced: []string{
			fmt.Sprintf("memory_bytes: no cgroup limit; each process's address space is capped at %d bytes instead, and OOM is not detected", l.MemoryBytes),
			fmt.Sprintf("pids_max: no cgroup limit; RLIMIT_NPROC=%d instead, counted per uid and so shared by concurrent sandboxes", l.PidsMax),
			fmt.Sprintf("cpus: no CPU quota; RLIMIT_CPU=%ds per process instead", FallbackCPUSeconds),
		},
		opts: []coci.SpecOpts{
			oci.WithoutCgroupLimits(),
			oci.WithRlimit("RLIMIT_NPROC", uint64(l.PidsMax)),
			oci.WithRlimit("RLIMIT_CPU", FallbackCPUSeconds),
			oci.WithAddressSpaceLimit(l.MemoryBytes),
		},
		killAll: false,
	}
}

// fallback plans for this runtime's configuration on this host.
func (r *Runtime) fallback() fallback {
	if !r.cfg.Rootless {
		return fallback{killAll: true}
	}
	ok, reason := RootlessCgroups()
	return planFallback(r.cfg, ok, reason)
}

// checkLimits refuses to run when limits cannot be enforced and the
// operator did not opt in: sandpit never runs code silently unbounded.
func (r *Runtime) checkLimits() error { return r.fallback().err }

// unenforced lists the limits a Result must report as not enforced.
func (r *Runtime) unenforced() []string { return r.fallback().unenforced }

// fallbackOpts are the spec options that replace unenforceable cgroup
// limits; they must follow the process options.
func (r *Runtime) fallbackOpts() []coci.SpecOpts { return r.fallback().opts }

// killOpts are the options for the SIGKILL at a timeout. WithKillAll needs
// the sandbox's cgroup; without one, killing init takes down its pid
// namespace and everything in it.
func (r *Runtime) killOpts() []containerd.KillOpts {
	if r.fallback().killAll {
		return []containerd.KillOpts{containerd.WithKillAll}
	}
	return nil
}
