package oci

import (
	"slices"
	"testing"

	coci "github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestFallbackLimits(t *testing.T) {
	s := mustGenerate(t, WithHardening(testProfile()), WithProcess("/tmp", "python3", "/sandpit/src/main.py"),
		WithoutCgroupLimits(), WithRlimit("RLIMIT_NPROC", 128), WithRlimit("RLIMIT_NOFILE", 256), WithAddressSpaceLimit(512<<20))

	r := s.Linux.Resources
	if r.Memory != nil || r.CPU != nil || r.Pids != nil {
		t.Errorf("cgroup limits still set: memory %v cpu %v pids %v", r.Memory, r.CPU, r.Pids)
	}
	if s.Linux.CgroupsPath != "" {
		t.Errorf("cgroups path %q kept; rootless runc would fail to create it", s.Linux.CgroupsPath)
	}
	if len(r.Devices) == 0 {
		t.Error("device rules dropped with the limits")
	}
	rl := func(typ string) []specs.POSIXRlimit {
		var out []specs.POSIXRlimit
		for _, x := range s.Process.Rlimits {
			if x.Type == typ {
				out = append(out, x)
			}
		}
		return out
	}
	if got := rl("RLIMIT_NPROC"); len(got) != 1 || got[0].Hard != 128 || got[0].Soft != 128 {
		t.Errorf("RLIMIT_NPROC = %+v, want one entry of 128", got)
	}
	if got := rl("RLIMIT_NOFILE"); len(got) != 1 || got[0].Hard != 256 {
		t.Errorf("RLIMIT_NOFILE = %+v, want the earlier value replaced by 256", got)
	}
	want := []string{PrlimitPath, "--as=536870912:536870912", "--", "python3", "/sandpit/src/main.py"}
	if !slices.Equal(s.Process.Args, want) {
		t.Errorf("args = %q, want %q", s.Process.Args, want)
	}
}

func TestAddressSpaceLimitRejects(t *testing.T) {
	tests := []struct {
		name string
		opts []coci.SpecOpts
	}{
		{"tiny limit", []coci.SpecOpts{WithProcess("/", "true"), WithAddressSpaceLimit(1 << 20)}},
		{"before the process is set", []coci.SpecOpts{WithAddressSpaceLimit(512 << 20)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := append([]coci.SpecOpts{WithHardening(testProfile())}, tt.opts...)
			if _, err := generate(t, opts...); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestRelativeCgroupsPath(t *testing.T) {
	s := mustGenerate(t, WithHardening(testProfile()), WithRelativeCgroupsPath())
	// mustGenerate makes container "run-1" in namespace "sandpit" (the golden file's path).
	if got, want := s.Linux.CgroupsPath, "sandpit/run-1"; got != want {
		t.Errorf("cgroupsPath = %q, want %q (relative: runc puts it under its own cgroup's parent)", got, want)
	}
	if s.Linux.Resources.Memory == nil || s.Linux.Resources.Pids == nil || s.Linux.Resources.CPU == nil {
		t.Error("limits dropped: a relative path must keep them")
	}
}
