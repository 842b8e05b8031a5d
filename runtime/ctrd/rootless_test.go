package ctrd

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/oci"
)

func TestRootlessCgroups(t *testing.T) {
	// cgroup writes a fake cgroup v2 dir under root.
	cgroup := func(root, dir, controllers, subtree, procs string) {
		p := filepath.Join(root, dir)
		os.MkdirAll(p, 0o755)
		os.WriteFile(filepath.Join(p, "cgroup.controllers"), []byte(controllers), 0o644)
		os.WriteFile(filepath.Join(p, "cgroup.subtree_control"), []byte(subtree), 0o644)
		os.WriteFile(filepath.Join(p, "cgroup.procs"), []byte(procs), 0o644)
	}
	root := t.TempDir()
	// scripts/rootless.sh's layout: the daemon in a leaf of its unit, which
	// has no processes of its own.
	cgroup(root, "/user.slice/unit", "cpuset cpu io memory pids\n", "", "")
	cgroup(root, "/partial", "memory\n", "", "")
	cgroup(root, "/busy", "cpu memory pids\n", "", "4242\n")
	cgroup(root, "/busy-enabled", "cpu memory pids\n", "cpu memory pids\n", "4242\n")
	os.MkdirAll(filepath.Join(root, "no-files"), 0o755)
	os.WriteFile(filepath.Join(root, "no-files", "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644)
	tests := []struct {
		name      string
		mode      host.CgroupMode
		root, dir string
		want      bool
		reasonHas string
	}{
		{"v1", host.CgroupV1, "/sys/fs/cgroup", "/", false, "rootless runc cannot create cgroups"},
		{"hybrid", host.CgroupHybrid, "/sys/fs/cgroup", "/", false, "cgroup hybrid"},
		{"none", host.CgroupNone, "/sys/fs/cgroup", "/", false, "no cgroup"},
		{"v2 delegated", host.CgroupV2, root, "/user.slice/unit", true, "delegated to " + root + "/user.slice/unit"},
		{"v2 missing controllers", host.CgroupV2, root, "/partial", false, "pids, cpu are not delegated"},
		{"v2 unreadable", host.CgroupV2, root, "/nope", false, "unreadable"},
		{"v2 no control files", host.CgroupV2, root, "/no-files", false, "not writable"},
		{"v2 parent holds processes", host.CgroupV2, root, "/busy", false, "holds processes"},
		{"v2 processes but controllers already on", host.CgroupV2, root, "/busy-enabled", true, "delegated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := rootlessCgroups(tt.mode, tt.root, tt.dir)
			if got != tt.want || !strings.Contains(reason, tt.reasonHas) {
				t.Errorf("got %v %q, want %v and a reason containing %q", got, reason, tt.want, tt.reasonHas)
			}
		})
	}
}

func TestPlanFallback(t *testing.T) {
	base := Config{Limits: oci.DefaultLimits()}
	tests := []struct {
		name           string
		rootless, opt  bool
		cgroupsOK      bool
		wantErr        bool
		wantUnenforced bool
	}{
		{"root", false, false, false, false, false},
		{"rootless with delegated cgroups", true, false, true, false, false},
		{"rootless on v1 refuses", true, false, false, true, false},
		{"rootless on v1 with opt-in", true, true, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			cfg.Rootless, cfg.AllowUnenforcedLimits = tt.rootless, tt.opt
			f := planFallback(cfg, tt.cgroupsOK, "cgroup hybrid: rootless runc cannot create cgroups here")
			if (f.err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", f.err, tt.wantErr)
			}
			if f.err != nil {
				if !errors.Is(f.err, ErrLimitsUnenforceable) {
					t.Errorf("err %v does not wrap ErrLimitsUnenforceable", f.err)
				}
				for _, want := range []string{"cgroup hybrid", "--allow-unenforced-limits", "cgroup v2"} {
					if !strings.Contains(sandpit.Describe(f.err), want) {
						t.Errorf("err %q does not say %q", f.err, want)
					}
				}
			}
			if got := len(f.unenforced) > 0; got != tt.wantUnenforced {
				t.Errorf("unenforced = %q, want some: %v", f.unenforced, tt.wantUnenforced)
			}
			if tt.wantUnenforced {
				if len(f.opts) == 0 || f.killAll {
					t.Errorf("opt-in fallback has %d spec options and killAll %v; want rlimit options and a plain kill", len(f.opts), f.killAll)
				}
				for _, lim := range []string{"memory_bytes", "pids_max", "cpus"} {
					if !strings.Contains(strings.Join(f.unenforced, "\n"), lim) {
						t.Errorf("unenforced list does not name %s: %q", lim, f.unenforced)
					}
				}
			} else if !tt.wantErr && (!f.killAll || len(f.opts) > 0) {
				t.Errorf("enforceable host got fallback options (%d) or no kill-all", len(f.opts))
			}
		})
	}
}
