package oci

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/containerd/containers"
	coci "github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The options below exist for hosts where cgroup limits cannot be enforced
// (rootless runc on cgroup v1 cannot create cgroups, and any memory, pids or
// CPU limit in the spec makes container creation fail). They replace the
// cgroup limits with weaker per-process rlimits; the runtime uses them only
// when the operator opted in, and reports the limits as unenforced.

// WithoutCgroupLimits drops the memory, CPU and pids limits from the spec,
// and the cgroup path: rootless runc ignores a cgroup it may not create only
// when no path was asked for. It must follow WithHardening.
func WithoutCgroupLimits() coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		if s.Linux != nil {
			s.Linux.CgroupsPath = ""
		}
		if s.Linux != nil && s.Linux.Resources != nil {
			s.Linux.Resources.Memory = nil
			s.Linux.Resources.CPU = nil
			s.Linux.Resources.Pids = nil
		}
		return nil
	}
}

// WithRelativeCgroupsPath makes the spec's cgroupsPath (containerd's
// default is /<namespace>/<id>) relative. runc resolves a relative path under
// the parent of its own cgroup, which for a rootless containerd on cgroup v2
// is the subtree systemd delegated to it: there rootless runc may create the
// sandbox's cgroup and enforce its limits. It must follow WithHardening.
func WithRelativeCgroupsPath() coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		if s.Linux != nil {
			s.Linux.CgroupsPath = strings.TrimLeft(s.Linux.CgroupsPath, "/")
		}
		return nil
	}
}

// WithRlimit sets one rlimit (soft = hard = n), replacing any earlier value.
// It must follow WithHardening.
func WithRlimit(typ string, n uint64) coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		for i, r := range s.Process.Rlimits {
			if r.Type == typ {
				s.Process.Rlimits[i].Hard, s.Process.Rlimits[i].Soft = n, n
				return nil
			}
		}
		s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: typ, Hard: n, Soft: n})
		return nil
	}
}

// PrlimitPath is util-linux's prlimit in the sandbox image.
const PrlimitPath = "/usr/bin/prlimit"

// WithAddressSpaceLimit caps every process's address space at bytes by
// starting the program under `prlimit --as`. RLIMIT_AS cannot go in the spec
// itself: runc's init would inherit it and fail to set up seccomp. It must
// follow WithProcess, whose argv it wraps.
func WithAddressSpaceLimit(bytes int64) coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		if bytes < 16<<20 {
			return fmt.Errorf("address space limit %d bytes is below 16 MiB", bytes)
		}
		if len(s.Process.Args) == 0 {
			return fmt.Errorf("address space limit: no process arguments to wrap (WithProcess must come first)")
		}
		n := strconv.FormatInt(bytes, 10)
		s.Process.Args = append([]string{PrlimitPath, "--as=" + n + ":" + n, "--"}, s.Process.Args...)
		return nil
	}
}
