package runtime

import (
	"errors"
	"net"
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
		mode      CgroupMode
		root, dir string
		want      bool
		reasonHas string
	}{
		{"v1", CgroupV1, "/sys/fs/cgroup", "/", false, "rootless runc cannot create cgroups"},
		{"hybrid", CgroupHybrid, "/sys/fs/cgroup", "/", false, "cgroup hybrid"},
		{"none", CgroupNone, "/sys/fs/cgroup", "/", false, "no cgroup"},
		{"v2 delegated", CgroupV2, root, "/user.slice/unit", true, "delegated to " + root + "/user.slice/unit"},
		{"v2 missing controllers", CgroupV2, root, "/partial", false, "pids, cpu are not delegated"},
		{"v2 unreadable", CgroupV2, root, "/nope", false, "unreadable"},
		{"v2 no control files", CgroupV2, root, "/no-files", false, "not writable"},
		{"v2 parent holds processes", CgroupV2, root, "/busy", false, "holds processes"},
		{"v2 processes but controllers already on", CgroupV2, root, "/busy-enabled", true, "delegated"},
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

func TestPeerPID(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	got, err := peerPID(sock)
	if err != nil || got != os.Getpid() {
		t.Errorf("peerPID = %d, %v; want this process, %d", got, err, os.Getpid())
	}
	if _, err := peerPID(filepath.Join(t.TempDir(), "none.sock")); err == nil {
		t.Error("peerPID of a missing socket: no error")
	}
}

func TestProcCgroupV2(t *testing.T) {
	if _, err := os.Stat("/proc/self/cgroup"); err != nil {
		t.Skip("no /proc/self/cgroup")
	}
	p, err := procCgroupV2(os.Getpid())
	if DetectCgroups() == CgroupV1 {
		if err == nil {
			t.Errorf("pure cgroup v1 host, yet a v2 path %q", p)
		}
		return
	}
	if err != nil || !strings.HasPrefix(p, "/") {
		t.Errorf("procCgroupV2 = %q, %v; want an absolute path", p, err)
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
