package host

import (
	"slices"
	"testing"
)

func TestOwnCgroupProcs(t *testing.T) {
	hybrid := []CgroupMount{
		{Point: "/sys/fs/cgroup/cpu,cpuacct", Root: "/", Opts: "rw,cpu,cpuacct"},
		{Point: "/sys/fs/cgroup/pids", Root: "/", Opts: "rw,pids"},
		{Point: "/sys/fs/cgroup/systemd", Root: "/", Opts: "rw,xattr,name=systemd"},
		{Point: "/sys/fs/cgroup/unified", Root: "/", V2: true, Opts: "rw,nsdelegate"},
	}
	tests := []struct {
		name   string
		proc   string
		mounts []CgroupMount
		want   []string
	}{
		{"hybrid", "5:pids:/user.slice\n4:cpu,cpuacct:/a/b\n1:name=systemd:/s\n0::/u\n", hybrid, []string{
			"/sys/fs/cgroup/pids/user.slice/cgroup.procs",
			"/sys/fs/cgroup/cpu,cpuacct/a/b/cgroup.procs",
			"/sys/fs/cgroup/systemd/s/cgroup.procs",
			"/sys/fs/cgroup/unified/u/cgroup.procs",
		}},
		{"v2", "0::/system.slice/x.service\n", []CgroupMount{{Point: "/sys/fs/cgroup", Root: "/", V2: true}},
			[]string{"/sys/fs/cgroup/system.slice/x.service/cgroup.procs"}},
		{"root cgroup", "0::/\n", []CgroupMount{{Point: "/sys/fs/cgroup", Root: "/", V2: true}},
			[]string{"/sys/fs/cgroup/cgroup.procs"}},
		// A container's view: its own part of the hierarchy is mounted.
		{"bound subtree", "0::/kubepods/pod1/c1\n", []CgroupMount{{Point: "/sys/fs/cgroup", Root: "/kubepods/pod1", V2: true}},
			[]string{"/sys/fs/cgroup/c1/cgroup.procs"}},
		{"outside the mounted subtree", "0::/other\n", []CgroupMount{{Point: "/sys/fs/cgroup", Root: "/kubepods", V2: true}}, nil},
		{"prefix is not a parent", "0::/kubepods2/x\n", []CgroupMount{{Point: "/sys/fs/cgroup", Root: "/kubepods", V2: true}}, nil},
		{"controller not mounted", "3:memory:/m\n", hybrid, nil},
		{"garbage", "no colons here\n", hybrid, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ownCgroupProcs(tt.proc, tt.mounts); !slices.Equal(got, tt.want) {
				t.Errorf("ownCgroupProcs(%q) = %q, want %q", tt.proc, got, tt.want)
			}
		})
	}
}
