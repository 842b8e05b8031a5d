package main

import (
	"testing"

	"github.com/sandpit-dev/sandpit/runtime"
)

// A server builds images only when its runs could use them: as a normal
// user on a cgroup v1 host every run is refused, and the 1.1 GB build that
// serve.sh started there anyway ran on, orphaned, after the server exited.
func TestImagesUsable(t *testing.T) {
	type probe struct {
		known, ok bool
		reason    string
	}
	tests := []struct {
		name      string
		rootless  bool
		allow     bool
		probe     probe
		wantUsed  bool
		wantProbe bool // whether the cgroups are asked at all
	}{
		{name: "root", wantUsed: true},
		{name: "rootless, limits enforced", rootless: true, probe: probe{true, true, "cgroup v2 with memory, pids and cpu delegated"}, wantUsed: true, wantProbe: true},
		{name: "rootless on cgroup v1: every run refused", rootless: true, probe: probe{true, false, "cgroup hybrid: rootless runc cannot create cgroups here"}, wantProbe: true},
		{name: "rootless on cgroup v1 with fallbacks accepted", rootless: true, allow: true, wantUsed: true},
		{name: "rootless, daemon not asked yet", rootless: true, probe: probe{false, false, ""}, wantUsed: true, wantProbe: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := false
			used, reason := imagesUsable(runtime.Config{Rootless: tt.rootless, AllowUnenforcedLimits: tt.allow, Address: "/run/x.sock"},
				func(addr string) (bool, bool, string) {
					asked = true
					if addr != "/run/x.sock" {
						t.Errorf("probed %q, not the runtime's address", addr)
					}
					return tt.probe.known, tt.probe.ok, tt.probe.reason
				})
			if used != tt.wantUsed {
				t.Errorf("usable = %v (%q), want %v", used, reason, tt.wantUsed)
			}
			if !used && reason != tt.probe.reason {
				t.Errorf("reason %q, want the probe's %q", reason, tt.probe.reason)
			}
			if asked != tt.wantProbe {
				t.Errorf("cgroups probed = %v, want %v", asked, tt.wantProbe)
			}
		})
	}
}
