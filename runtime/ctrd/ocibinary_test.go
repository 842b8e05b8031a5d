package ctrd

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
)

func TestCheckRuntimeBinary(t *testing.T) {
	tests := []struct {
		name    string
		bin     string
		mode    host.CgroupMode
		wantErr bool
	}{
		{"crun on hybrid", "crun", host.CgroupHybrid, true},
		{"crun by path on hybrid", "/usr/local/bin/crun", host.CgroupHybrid, true},
		{"crun on v2", "crun", host.CgroupV2, false},
		{"runc on hybrid", "runc", host.CgroupHybrid, false},
		{"runsc on hybrid", "runsc", host.CgroupHybrid, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckRuntimeBinary(tt.bin, tt.mode)
			if got := err != nil; got != tt.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tt.wantErr)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("err %v does not wrap ErrUnavailable", err)
			}
			for _, want := range []string{"hybrid", "--runc-binary runc"} {
				if !strings.Contains(sandpit.Describe(err), want) {
					t.Errorf("err %q does not explain %q", err, want)
				}
			}
		})
	}
}

// sandpit's own shim runs sandboxes with the runc library built into it and
// never executes an OCI runtime binary: --runc-binary runsc under it ran
// runc (the host's kernel, not gVisor). New refuses what it would ignore;
// containerd's runc shim runs the binary it is named.
func TestNewRefusesRuntimeBinaryTheShimIgnores(t *testing.T) {
	shimDir := t.TempDir()
	for _, name := range []string{ShimRuntimeBinary, ShimDaemonBinary} {
		if err := os.WriteFile(filepath.Join(shimDir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		runtime, bin string
		wantErr      bool
	}{
		{RuntimeSandpit, "", false},
		{RuntimeSandpit, "runc", false},
		{RuntimeSandpit, "runsc", true},
		{RuntimeSandpit, "/usr/local/bin/runsc", true},
		{"io.containerd.sandpit.v1", "kata-runtime", true},
		{RuntimeSandpit, "crun", true},
		{RuntimeSandpit, "/usr/sbin/runc", true}, // a path is ignored as much as another name
		{"io.containerd.runc.v2", "runsc", false},
		{"io.containerd.runc.v2", "runc", false},
	}
	for _, tt := range tests {
		t.Run(tt.runtime+"/"+tt.bin, func(t *testing.T) {
			r, err := New(Config{
				Address: "/nonexistent/containerd.sock", RuntimeName: tt.runtime, RuncBinary: tt.bin,
				ShimDir: shimDir, StateDir: t.TempDir(),
			})
			if err == nil {
				r.Close()
			}
			if got := err != nil; got != tt.wantErr {
				t.Fatalf("New(runtime %s, runc binary %q): err = %v, want error: %v", tt.runtime, tt.bin, err, tt.wantErr)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("err %v does not wrap ErrUnavailable", err)
			}
			for _, want := range []string{tt.bin, "never executes", "--runtime io.containerd.runc.v2", "gVisor"} {
				if !strings.Contains(sandpit.Describe(err), want) {
					t.Errorf("err %q does not say %q", sandpit.Describe(err), want)
				}
			}
		})
	}
}
