package runtime_test

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testruntime"
)

// An image's shared root is mounted on the host, at a path the
// world-readable mountinfo lists, under directories every user may search:
// it must not hand anyone the image's setuid-root binaries or its device
// nodes (review 2026-12-01 L2). Its mount options say ro, nosuid, nodev.
func TestSharedRootMountOptions(t *testing.T) {
	rootfs := searchableTempDir(t)
	cfg := testruntime.Config(t)
	cfg.RootfsDir = rootfs
	r := newOwnedRuntime(t, cfg)
	if res := run(t, r, sandpit.Request{Language: "python", Code: "print(1)"}); res.Status != sandpit.StatusSuccess {
		t.Fatalf("run: %+v", res)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	found := 0
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		// id parent major:minor root mount-point per-mount-options ...
		fields := strings.Fields(s.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[4], rootfs+"/") {
			continue
		}
		found++
		opts := strings.Split(fields[5], ",")
		for _, want := range []string{"ro", "nosuid", "nodev"} {
			if !slices.Contains(opts, want) {
				t.Errorf("shared root %s is mounted %s: no %s", fields[4], fields[5], want)
			}
		}
	}
	if found == 0 {
		t.Fatalf("no shared root mounted under %s", rootfs)
	}
}
