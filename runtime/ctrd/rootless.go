package ctrd

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/containerd"
	coci "github.com/containerd/containerd/oci"
	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
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

// RootlessCgroups says whether the rootless containerd listening at address
// can enforce memory, pids and CPU limits on this host, and why.
func RootlessCgroups(address string) (ok bool, reason string) {
	d := probeDelegation(address)
	return d.ok, d.reason
}

// delegation is where a rootless containerd's sandboxes get their cgroups.
type delegation struct {
	ok     bool
	reason string
	// parent is the cgroup v2 directory (relative to the cgroup2 root)
	// under which runc creates each sandbox's cgroup: sandpit gives runc a
	// relative cgroupsPath, which runc resolves under the parent of its own
	// cgroup, the one containerd and its shims run in.
	parent string
	// final is false when the daemon could not be reached: probe again.
	final bool
}

// probeDelegation finds the rootless containerd at address through its
// socket's peer credentials and checks the cgroup its sandboxes will be
// created under. With systemd, that is the subtree scripts/rootless.sh gets
// delegated for the daemon (a Delegate=yes unit of the user's manager).
func probeDelegation(address string) delegation {
	mode := host.DetectCgroups()
	if mode != host.CgroupV2 {
		ok, reason := rootlessCgroups(mode, "/sys/fs/cgroup", "/")
		return delegation{ok: ok, reason: reason, final: true}
	}
	pid, err := host.PeerPID(address)
	if err != nil {
		return delegation{reason: fmt.Sprintf("cgroup v2, but the containerd at %s could not be asked for its process: %v", address, err)}
	}
	self, err := host.CgroupV2Of(pid)
	if err != nil {
		return delegation{reason: fmt.Sprintf("cgroup v2, but containerd's cgroup is unknown: %v", err), final: true}
	}
	parent := filepath.Dir(self)
	ok, reason := rootlessCgroups(mode, "/sys/fs/cgroup", parent)
	return delegation{ok: ok, reason: reason, parent: parent, final: true}
}

// rootlessCgroups decides from the cgroup mode and, on v2, from whether the
// cgroup dir (relative to root) that sandbox cgroups go under is delegated
// to this user: writable, with the controllers sandboxes need available,
// and able to enable them for its children.
func rootlessCgroups(mode host.CgroupMode, root, dir string) (bool, string) {
	switch mode {
	case host.CgroupV1, host.CgroupHybrid:
		return false, fmt.Sprintf("cgroup %s: rootless runc cannot create cgroups here, so memory, pids and CPU limits cannot be enforced", mode)
	case host.CgroupNone:
		return false, "no cgroup filesystem is mounted"
	}
	path := filepath.Join(root, dir)
	ctl, err := os.ReadFile(filepath.Join(path, "cgroup.controllers"))
	if err != nil {
		return false, fmt.Sprintf("cgroup v2, but %s is unreadable: %v", path, err)
	}
	missing := missingControllers(string(ctl))
	if len(missing) > 0 {
		return false, fmt.Sprintf("cgroup v2, but controllers %s are not delegated to %s (systemd delegates memory, pids and cpu to user@UID.service by default; check Delegate= of user@.service)", strings.Join(missing, ", "), path)
	}
	for _, f := range []string{"", "cgroup.subtree_control", "cgroup.procs"} {
		if err := unix.Access(filepath.Join(path, f), unix.W_OK); err != nil {
			return false, fmt.Sprintf("cgroup v2, but %s is not writable by this user (not delegated to it): %v", filepath.Join(path, f), err)
		}
	}
	// A cgroup with processes of its own cannot enable controllers for its
	// children (cgroup v2's no-internal-processes rule).
	sub, _ := os.ReadFile(filepath.Join(path, "cgroup.subtree_control"))
	procs, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	if len(missingControllers(string(sub))) > 0 && len(strings.TrimSpace(string(procs))) > 0 {
		return false, fmt.Sprintf("cgroup v2, but %s holds processes, so memory, pids and cpu cannot be enabled for the sandboxes' cgroups under it (start containerd with scripts/rootless.sh start, which runs it in a leaf cgroup of its own delegated unit)", path)
	}
	return true, "cgroup v2 with memory, pids and cpu delegated to " + path
}

// missingControllers lists which of memory, pids and cpu a
// cgroup.controllers or cgroup.subtree_control line lacks.
func missingControllers(line string) []string {
	have := strings.Fields(line)
	var missing []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	return missing
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
	// cgroupParent is set when sandbox cgroups live under a rootless
	// daemon's delegated cgroup rather than at /<namespace>/<id>.
	cgroupParent string
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
func (e *Engine) fallback() fallback {
	if !e.cfg.Rootless {
		return fallback{killAll: true}
	}
	d := e.delegation()
	f := planFallback(e.cfg, d.ok, d.reason)
	if d.ok {
		// runc resolves a relative path under the delegated parent.
		f.opts = append(f.opts, oci.WithRelativeCgroupsPath())
		f.cgroupParent = d.parent
	}
	return f
}

// delegation probes once per runtime where a rootless containerd's
// sandboxes get their cgroups; a daemon that did not answer is asked again
// next time.
func (e *Engine) delegation() delegation {
	e.delegMu.Lock()
	defer e.delegMu.Unlock()
	if e.deleg != nil {
		return *e.deleg
	}
	d := probeDelegation(e.cfg.Address)
	if d.final {
		e.deleg = &d
		e.log.Info("rootless cgroups", "enforced", d.ok, "reason", d.reason)
	}
	return d
}

// killOpts are the options for the SIGKILL at a timeout. WithKillAll needs
// the sandbox's cgroup; without one, killing init takes down its pid
// namespace and everything in it.
func (e *Engine) killOpts() []containerd.KillOpts {
	if e.fallback().killAll {
		return []containerd.KillOpts{containerd.WithKillAll}
	}
	return nil
}
