package runtime

import (
	"errors"
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
