package ctrd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCgroupFSUsage(t *testing.T) {
	const path = "/sandpit/run1"
	v1 := t.TempDir()
	writeFiles(t, v1, map[string]string{
		"memory/sandpit/run1/memory.max_usage_in_bytes": "134217728\n",
		"memory/sandpit/run1/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"cpuacct/sandpit/run1/cpuacct.usage_user":       "1500000000\n",
		"cpuacct/sandpit/run1/cpuacct.usage_sys":        "250000000\n",
		"pids/sandpit/run1/pids.current":                "3\n",
	})
	v2 := t.TempDir()
	writeFiles(t, v2, map[string]string{
		"sandpit/run1/memory.peak":   "1048576\n",
		"sandpit/run1/memory.events": "low 0\nhigh 0\nmax 4\noom 1\noom_kill 0\n",
		"sandpit/run1/cpu.stat":      "usage_usec 900\nuser_usec 700\nsystem_usec 200\n",
	})
	tests := []struct {
		name string
		fs   *cgroupFS
		want sandpit.Usage
		ok   bool
	}{
		{"v1", &cgroupFS{v1: map[string]string{"memory": filepath.Join(v1, "memory"), "cpuacct": filepath.Join(v1, "cpuacct"), "pids": filepath.Join(v1, "pids")}},
			sandpit.Usage{CPUUserMS: 1500, CPUSystemMS: 250, MemoryPeakBytes: 128 << 20, OOMKilled: true, PidsCurrent: 3}, true},
		{"v2", &cgroupFS{v1: map[string]string{}, v2: v2},
			sandpit.Usage{CPUUserMS: 0, CPUSystemMS: 0, MemoryPeakBytes: 1 << 20}, true},
		{"v1 files missing", &cgroupFS{v1: map[string]string{"memory": filepath.Join(v1, "nope"), "cpuacct": filepath.Join(v1, "cpuacct")}}, sandpit.Usage{}, false},
		{"no cgroups", &cgroupFS{v1: map[string]string{}}, sandpit.Usage{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.fs.usage(path)
			if ok != tt.ok || got != tt.want {
				t.Errorf("usage = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestNewCgroupFSFindsHostControllers(t *testing.T) {
	mode := host.DetectCgroups()
	c := newCgroupFS()
	switch mode {
	case host.CgroupV1, host.CgroupHybrid:
		if c.v1["memory"] == "" || c.v1["cpuacct"] == "" {
			t.Errorf("cgroup %s host: v1 controllers not found: %v", mode, c.v1)
		}
	case host.CgroupV2:
		if c.v2 == "" && len(c.v1) == 0 {
			t.Errorf("cgroup v2 host: no controller mount found")
		}
	default:
		testenv.Skip(t, "no cgroup filesystem on this host")
	}
}
