package host

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	got, err := PeerPID(sock)
	if err != nil || got != os.Getpid() {
		t.Errorf("PeerPID = %d, %v; want this process, %d", got, err, os.Getpid())
	}
	if _, err := PeerPID(filepath.Join(t.TempDir(), "none.sock")); err == nil {
		t.Error("PeerPID of a missing socket: no error")
	}
}

func TestProcCgroupV2(t *testing.T) {
	if _, err := os.Stat("/proc/self/cgroup"); err != nil {
		t.Skip("no /proc/self/cgroup")
	}
	p, err := CgroupV2Of(os.Getpid())
	if DetectCgroups() == CgroupV1 {
		if err == nil {
			t.Errorf("pure cgroup v1 host, yet a v2 path %q", p)
		}
		return
	}
	if err != nil || !strings.HasPrefix(p, "/") {
		t.Errorf("CgroupV2Of = %q, %v; want an absolute path", p, err)
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	if got := unescapeMountinfo(`/a\040b\134c`); got != `/a b\c` {
		t.Errorf("got %q", got)
	}
}

func TestMountsUnderFindsNothingInAnEmptyDir(t *testing.T) {
	got, err := MountsUnder(t.TempDir())
	if err != nil || len(got) != 0 {
		t.Errorf("MountsUnder(empty temp dir) = %v, %v", got, err)
	}
	if got, _ := MountsUnder("/proc"); len(got) == 0 {
		t.Error("MountsUnder(/proc) found no mount: mountinfo is not read")
	}
}
