package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// A server's exit ends the image build it started. A server whose image is
// missing builds it in the background; when its client closed stdio, the
// server exited and its debootstrap (and what debootstrap ran) went on for
// minutes, orphaned. Here debootstrap is a stand-in that starts a child and
// waits, in a namespace where the image is missing and an empty image
// cache, so the server really starts a build.
func TestLifecycleExitEndsImageBuild(t *testing.T) {
	testenv.NeedRoot(t, "serve builds images with debootstrap, as root")
	s := newLifecycleStore(t)
	dir := t.TempDir()
	stub := "#!/bin/sh\nsleep 600 &\necho $! >\"$STUB_DIR/child.tmp\" && mv \"$STUB_DIR/child.tmp\" \"$STUB_DIR/child.pid\"\necho $$ >\"$STUB_DIR/self.tmp\" && mv \"$STUB_DIR/self.tmp\" \"$STUB_DIR/self.pid\"\necho 'I: Retrieving InRelease'\nwait\n"
	if err := os.WriteFile(filepath.Join(dir, "debootstrap"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	t.Setenv("STUB_DIR", dir)
	t.Setenv("SANDPIT_CACHE_DIR", filepath.Join(dir, "cache"))
	ns := fmt.Sprintf("sandpit-buildexit-%d", os.Getpid())
	t.Cleanup(func() {
		c, ctx := containerdClient(t, s.addr)
		defer c.Close()
		c.NamespaceService().Delete(ctx, ns)
	})

	srv, _ := s.start(t, "--namespace", ns, "--build-images=true")
	pid := func(name string) int {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
				p, err := strconv.Atoi(strings.TrimSpace(string(b)))
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server started no build (no %s)\nstderr:\n%s", name, srv.stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	self, child := pid("self.pid"), pid("child.pid")
	t.Cleanup(func() {
		for _, p := range []int{self, child} {
			if processAlive(p) {
				if proc, err := os.FindProcess(p); err == nil {
					proc.Kill()
				}
			}
		}
	})

	srv.stdin.Close()
	srv.waitExit(t, 3*time.Minute)
	deadline := time.Now().Add(30 * time.Second)
	for (processAlive(self) || processAlive(child)) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if processAlive(self) {
		t.Errorf("the build's debootstrap (pid %d) still runs after its server exited\nstderr:\n%s", self, srv.stderr.String())
	}
	if processAlive(child) {
		t.Errorf("a process of the build's debootstrap (pid %d) still runs after its server exited", child)
	}
}

// processAlive: a live process, not a zombie waiting to be reaped.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
