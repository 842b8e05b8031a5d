package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/oci"
)

func TestMapsHostRoot(t *testing.T) {
	tests := []struct {
		name, uidMap string
		want         bool
	}{
		{"init namespace", "         0          0 4294967295\n", true},
		{"rootlesskit", "         0       1000          1\n         1     100000      65536\n", false},
		{"sandbox", "0 1879048192 65536\n", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mapsHostRoot(tt.uidMap); got != tt.want {
				t.Errorf("mapsHostRoot(%q) = %v, want %v", tt.uidMap, got, tt.want)
			}
		})
	}
}

func TestRootlessCgroups(t *testing.T) {
	delegated := t.TempDir()
	os.MkdirAll(filepath.Join(delegated, "user.slice"), 0o755)
	os.WriteFile(filepath.Join(delegated, "user.slice", "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644)
	partial := t.TempDir()
	os.WriteFile(filepath.Join(partial, "cgroup.controllers"), []byte("memory\n"), 0o644)
	tests := []struct {
		name       string
		mode       CgroupMode
		root, self string
		want       bool
		reasonHas  string
	}{
		{"v1", CgroupV1, "/sys/fs/cgroup", "/", false, "rootless runc cannot create cgroups"},
		{"hybrid", CgroupHybrid, "/sys/fs/cgroup", "/", false, "cgroup hybrid"},
		{"none", CgroupNone, "/sys/fs/cgroup", "/", false, "no cgroup"},
		{"v2 delegated", CgroupV2, delegated, "/user.slice", true, "delegated"},
		{"v2 missing controllers", CgroupV2, partial, "/", false, "pids, cpu are not delegated"},
		{"v2 unreadable", CgroupV2, t.TempDir(), "/nope", false, "unreadable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := rootlessCgroups(tt.mode, tt.root, tt.self)
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
