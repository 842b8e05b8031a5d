// Package oci builds the OCI runtime spec of a sandpit sandbox as composable
// containerd SpecOpts. It is pure: no daemon, no client.
//
// The guarantee: a spec built with WithHardening has a read-only rootfs, no
// capabilities, no-new-privileges, a seccomp filter stricter than Docker's, new
// pid/ipc/uts/mount/cgroup/network namespaces (the network namespace is empty:
// loopback only), a user namespace when an ID map is given, cgroup limits on
// memory (without swap), pids and CPU, rlimits, size-limited noexec tmpfs
// mounts, and no environment variable it was not told to set.
package oci

import (
	"context"
	"fmt"
	"strconv"

	"github.com/containerd/containerd/containers"
	coci "github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandpit-dev/sandpit"
)

// Limits bound one sandbox. The zero value of a field means "use the default"
// (see DefaultLimits), never "unlimited".
type Limits struct {
	MemoryBytes   int64   // cgroup memory limit; swap is forbidden (memsw = memory)
	PidsMax       int64   // cgroup pids limit: contains fork bombs
	CPUs          float64 // CFS quota in CPUs
	TmpfsBytes    int64   // size of /tmp (charged to the memory cgroup too)
	ShmBytes      int64   // size of /dev/shm
	FileSizeBytes int64   // RLIMIT_FSIZE: largest file a process may write
	OpenFiles     uint64  // RLIMIT_NOFILE; must stay under the host's hard limit
}

// DefaultLimits are the limits every run gets unless configured otherwise.
func DefaultLimits() Limits {
	return Limits{
		MemoryBytes:   512 << 20,
		PidsMax:       128,
		CPUs:          1,
		TmpfsBytes:    64 << 20,
		ShmBytes:      16 << 20,
		FileSizeBytes: 64 << 20,
		OpenFiles:     1024,
	}
}

// WithDefaults fills zero fields from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.PidsMax <= 0 {
		l.PidsMax = d.PidsMax
	}
	if l.CPUs <= 0 {
		l.CPUs = d.CPUs
	}
	if l.TmpfsBytes <= 0 {
		l.TmpfsBytes = d.TmpfsBytes
	}
	if l.ShmBytes <= 0 {
		l.ShmBytes = d.ShmBytes
	}
	if l.FileSizeBytes <= 0 {
		l.FileSizeBytes = d.FileSizeBytes
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = d.OpenFiles
	}
	return l
}

// Validate rejects limits that would be unsafe or make the sandbox fail to start.
func (l Limits) Validate() error {
	switch {
	case l.MemoryBytes < 16<<20:
		return fmt.Errorf("memory limit %d bytes is below the 16 MiB a sandbox needs", l.MemoryBytes)
	case l.PidsMax < 8:
		return fmt.Errorf("pids limit %d is below 8", l.PidsMax)
	case l.CPUs < 0.05:
		return fmt.Errorf("cpu limit %g is below 0.05", l.CPUs)
	case l.TmpfsBytes >= l.MemoryBytes:
		return fmt.Errorf("tmpfs size %d must be smaller than the memory limit %d (tmpfs pages count against it)", l.TmpfsBytes, l.MemoryBytes)
	case l.OpenFiles > 16384:
		// Above the host's hard limit, runc fails to start the container.
		return fmt.Errorf("open files limit %d is above 16384", l.OpenFiles)
	}
	return nil
}

// IDMap maps the sandbox's ids 0..Size-1 to host ids HostBase.. in a user
// namespace. Pick a HostBase that no host user owns.
type IDMap struct {
	HostBase uint32
	Size     uint32
	// Owner, when set, is the host id the sandbox user (SandboxUID, and
	// SandboxGID) maps to instead of HostBase+SandboxUID, and the ids below
	// it map from HostBase+1 on, so that Owner may be HostBase itself. For
	// rootless mode: inside rootlesskit's namespace, 0 is the user running
	// sandpit, and files a run writes must be theirs.
	Owner *uint32
}

// DefaultIDMap is the host range sandboxes map to: 65536 ids from
// 1879048192 (0x70000000), far above the ranges useradd and /etc/subuid hand
// out, so no host user owns a file or process a sandbox can reach.
func DefaultIDMap() IDMap { return IDMap{HostBase: 0x70000000, Size: 65536} }

// Profile is everything WithHardening needs. Its zero value plus a Limits
// gives the strictest sandbox; fields only ever loosen or add.
type Profile struct {
	Limits Limits
	// UserNS, when set, runs the sandbox in a user namespace with this map.
	UserNS *IDMap
	// UID and GID the process runs as inside the sandbox (never 0).
	UID, GID uint32
	// Env is the complete environment; nothing is inherited from the host.
	Env []string
}

// DefaultEnv is the environment of every sandboxed process.
func DefaultEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/tmp",
		"TMPDIR=/tmp",
		"LANG=C.UTF-8",
		"PYTHONDONTWRITEBYTECODE=1",
		// The package layer's import paths (sandpit.EnvPythonDir and
		// EnvNodeDir): empty or absent unless a layer is bound.
		"PYTHONPATH=" + sandpit.EnvPythonDir,
		"NODE_PATH=" + sandpit.EnvNodeDir,
	}
}

// WithHardening is the isolation baseline every sandbox gets. It replaces the
// whole spec (it starts from containerd's default), so it must come first;
// process and mount options follow it. Seccomp is derived last, after the
// capabilities are final.
func WithHardening(p Profile) coci.SpecOpts {
	return coci.Compose(
		coci.WithDefaultSpec(),
		coci.WithNoNewPrivileges,
		coci.WithRootFSReadonly(),
		withNoCapabilities(),
		withUser(p.UID, p.GID),
		withEnv(p.Env),
		withNamespaces(),
		withUserNamespace(p.UserNS),
		withMounts(p.Limits),
		withLimits(p.Limits),
		withRlimits(p.Limits),
		withMaskedPaths(),
		withHostname("sandpit"),
		WithSeccomp(),
	)
}

func withNoCapabilities() coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		s.Process.Capabilities = &specs.LinuxCapabilities{
			Bounding:    []string{},
			Effective:   []string{},
			Permitted:   []string{},
			Inheritable: []string{},
			Ambient:     []string{},
		}
		return nil
	}
}

func withUser(uid, gid uint32) coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		if uid == 0 || gid == 0 {
			return fmt.Errorf("sandbox user must not be root (uid %d gid %d)", uid, gid)
		}
		s.Process.User = specs.User{UID: uid, GID: gid, AdditionalGids: []uint32{gid}}
		return nil
	}
}

func withEnv(env []string) coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		if env == nil {
			env = DefaultEnv()
		}
		s.Process.Env = append([]string(nil), env...)
		return nil
	}
}

// withNamespaces gives the sandbox fresh pid, ipc, uts, mount, cgroup and
// network namespaces. A network namespace without a path is new and empty:
// nothing but loopback, so there is no route anywhere.
func withNamespaces() coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		s.Linux.Namespaces = []specs.LinuxNamespace{
			{Type: specs.PIDNamespace},
			{Type: specs.IPCNamespace},
			{Type: specs.UTSNamespace},
			{Type: specs.MountNamespace},
			{Type: specs.CgroupNamespace},
			{Type: specs.NetworkNamespace},
		}
		return nil
	}
}

// withUserNamespace must follow withNamespaces, which resets the list.
func withUserNamespace(m *IDMap) coci.SpecOpts {
	return func(ctx context.Context, c coci.Client, ctr *containers.Container, s *coci.Spec) error {
		if m == nil {
			return nil
		}
		if m.Owner != nil {
			uids, err := ownerMapping(*m, sandpit.SandboxUID)
			if err != nil {
				return err
			}
			gids, err := ownerMapping(*m, sandpit.SandboxGID)
			if err != nil {
				return err
			}
			return coci.WithUserNamespace(uids, gids)(ctx, c, ctr, s)
		}
		if m.HostBase == 0 || m.Size < 65536 {
			return fmt.Errorf("user namespace map must start above host id 0 and cover 65536 ids (got base %d size %d)", m.HostBase, m.Size)
		}
		idm := []specs.LinuxIDMapping{{ContainerID: 0, HostID: m.HostBase, Size: m.Size}}
		return coci.WithUserNamespace(idm, idm)(ctx, c, ctr, s)
	}
}

// ownerMapping maps id (the sandbox user) to m.Owner and every other
// sandbox id to its own host id from m.HostBase+1: 0..id-1 to
// HostBase+1..HostBase+id, id+1..Size-1 to HostBase+id+1..HostBase+Size-1.
func ownerMapping(m IDMap, id uint32) ([]specs.LinuxIDMapping, error) {
	if m.Size < 65536 || id == 0 || id >= m.Size-1 {
		return nil, fmt.Errorf("user namespace map must cover 65536 ids around the sandbox user %d (got size %d)", id, m.Size)
	}
	if o := *m.Owner; o > m.HostBase && o < m.HostBase+m.Size {
		return nil, fmt.Errorf("user namespace map: the owner id %d is inside the range %d+%d it would also be mapped from", o, m.HostBase, m.Size)
	}
	return []specs.LinuxIDMapping{
		{ContainerID: 0, HostID: m.HostBase + 1, Size: id},
		{ContainerID: id, HostID: *m.Owner, Size: 1},
		{ContainerID: id + 1, HostID: m.HostBase + id + 1, Size: m.Size - id - 1},
	}, nil
}

// withMounts replaces containerd's default mount list with a tighter one:
// every tmpfs is size-limited, /tmp and /dev/shm are noexec with a bounded
// inode count, devpts has no gid=5 (which breaks under a user namespace),
// /sys is read-only and there is no cgroup filesystem and no /run.
func withMounts(l Limits) coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		s.Mounts = []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "strictatime", "mode=755", "size=1024k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", sizeOpt(l.ShmBytes), inodesOpt(l.ShmBytes)}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", sizeOpt(l.TmpfsBytes), inodesOpt(l.TmpfsBytes)}},
		}
		return nil
	}
}

func sizeOpt(b int64) string { return "size=" + strconv.FormatInt(b, 10) }

// inodesOpt bounds a tmpfs's inode count to one per page of its size. The
// kernel's default is half the host's RAM pages, so without it a loop of
// empty files would pin millions of inodes and dentries (kernel memory)
// long before the size limit bites.
func inodesOpt(size int64) string {
	return "nr_inodes=" + strconv.FormatInt(max(1024, size/4096), 10)
}

// withLimits sets the cgroup limits. Swap equal to memory means no swap.
func withLimits(l Limits) coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		if err := l.Validate(); err != nil {
			return err
		}
		mem := l.MemoryBytes
		swap := l.MemoryBytes
		period := uint64(100000)
		quota := int64(l.CPUs * float64(period))
		pids := l.PidsMax
		disableOOMKiller := false
		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		r := s.Linux.Resources
		r.Memory = &specs.LinuxMemory{Limit: &mem, Swap: &swap, DisableOOMKiller: &disableOOMKiller}
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
		r.Pids = &specs.LinuxPids{Limit: pids}
		return nil
	}
}

// SigPendingMax bounds the signals a sandbox may have queued.
const SigPendingMax = 1024

// withRlimits sets per-process limits. RLIMIT_AS is deliberately absent: it
// breaks runc's own init (the memory cgroup bounds memory instead).
// RLIMIT_SIGPENDING: queued signals are charged up the user namespace's
// owner chain to host root's per-user count (as inotify instances were),
// so the sandbox's share is bounded well below root's (often ~96,000).
func withRlimits(l Limits) coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		fsize := uint64(l.FileSizeBytes)
		s.Process.Rlimits = []specs.POSIXRlimit{
			{Type: "RLIMIT_NOFILE", Hard: l.OpenFiles, Soft: l.OpenFiles},
			{Type: "RLIMIT_FSIZE", Hard: fsize, Soft: fsize},
			{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
			{Type: "RLIMIT_MEMLOCK", Hard: 64 << 10, Soft: 64 << 10},
			{Type: "RLIMIT_MSGQUEUE", Hard: 0, Soft: 0},
			{Type: "RLIMIT_SIGPENDING", Hard: SigPendingMax, Soft: SigPendingMax},
		}
		return nil
	}
}

// withMaskedPaths extends containerd's masked and read-only /proc and /sys
// paths with entries that leak host information or offer kernel interfaces.
func withMaskedPaths() coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		s.Linux.MaskedPaths = appendNew(s.Linux.MaskedPaths,
			"/proc/kallsyms", "/proc/modules", "/proc/slabinfo", "/proc/vmallocinfo",
			"/proc/pagetypeinfo", "/proc/zoneinfo", "/proc/buddyinfo",
			"/sys/kernel", "/sys/module", "/sys/fs", "/sys/devices/virtual/dmi", "/sys/class/dmi",
		)
		s.Linux.ReadonlyPaths = appendNew(s.Linux.ReadonlyPaths, "/proc/sysrq-trigger", "/proc/sys")
		return nil
	}
}

func appendNew(list []string, add ...string) []string {
	seen := make(map[string]bool, len(list))
	for _, p := range list {
		seen[p] = true
	}
	for _, p := range add {
		if !seen[p] {
			list = append(list, p)
			seen[p] = true
		}
	}
	return list
}

func withHostname(name string) coci.SpecOpts { return coci.WithHostname(name) }

// WithProcess sets what runs: argv, working directory. It does not touch the
// environment, which WithHardening fixes.
func WithProcess(cwd string, args ...string) coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		if len(args) == 0 {
			return fmt.Errorf("no process arguments")
		}
		s.Process.Args = append([]string(nil), args...)
		s.Process.Cwd = cwd
		s.Process.Terminal = false
		return nil
	}
}

// WithBind adds a bind mount of a host directory. Binds are always nosuid and
// nodev; writable ones are also noexec unless exec is asked for.
func WithBind(src, dst string, writable, exec bool) coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		opts := []string{"rbind", "nosuid", "nodev", "rprivate"}
		if writable {
			opts = append(opts, "rw")
		} else {
			opts = append(opts, "ro")
		}
		if !exec {
			opts = append(opts, "noexec")
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: dst, Type: "bind", Source: src, Options: opts})
		return nil
	}
}

// WithCPUs overrides the CPU quota, e.g. to give a compile step more CPU
// than the program it builds. It must follow WithHardening.
func WithCPUs(cpus float64) coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		if cpus < 0.05 {
			return fmt.Errorf("cpu limit %g is below 0.05", cpus)
		}
		period := uint64(100000)
		quota := int64(cpus * float64(period))
		s.Linux.Resources.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
		return nil
	}
}

// WithTmpfs mounts a size-limited tmpfs at dst (a mountpoint in the image)
// owned by the sandbox user, nosuid and nodev, executable only when asked.
// (runc gives a tmpfs the mode of the directory it covers, so ownership,
// not mode=, is what makes it writable.)
func WithTmpfs(dst string, size int64, exec bool) coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		opts := []string{"nosuid", "nodev", sizeOpt(size), inodesOpt(size),
			"uid=" + strconv.Itoa(sandpit.SandboxUID), "gid=" + strconv.Itoa(sandpit.SandboxGID)}
		if !exec {
			opts = append(opts, "noexec")
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: opts})
		return nil
	}
}
