package images

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// alive reports whether pid is a live process (a zombie is dead: it only
// waits to be reaped).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// readPID waits for a stub to write its pid to path.
func readPID(t *testing.T, path string, done <-chan error) int {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return pid
		}
		select {
		case err := <-done:
			t.Fatalf("debootstrap returned before the stub started: %v", err)
		case <-deadline:
			t.Fatalf("the stub never wrote %s", path)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A cancelled build ends all of debootstrap, not only its first process:
// debootstrap runs wget, apt, dpkg and chroot'ed maintainer scripts, which
// outlived a SIGTERM to debootstrap alone, and a server whose client went
// away left them running for minutes. The stand-in starts a child of its
// own and waits, as debootstrap waits on its downloads.
func TestDebootstrapCancelEndsItsProcessGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("debootstrap runs only as root (it refuses before starting anything otherwise)")
	}
	dir := t.TempDir()
	stub := "#!/bin/sh\nsleep 600 &\necho $! >\"$STUB_CHILD.tmp\" && mv \"$STUB_CHILD.tmp\" \"$STUB_CHILD\"\necho $$ >\"$STUB_SELF.tmp\" && mv \"$STUB_SELF.tmp\" \"$STUB_SELF\"\necho 'I: Retrieving InRelease'\nwait\n"
	if err := os.WriteFile(filepath.Join(dir, "debootstrap"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	t.Setenv("STUB_CHILD", filepath.Join(dir, "child.pid"))
	t.Setenv("STUB_SELF", filepath.Join(dir, "self.pid"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- debootstrap(ctx, Recipe{Suite: "bookworm"}, "http://mirror.invalid/debian", filepath.Join(dir, "rootfs"), io.Discard)
	}()
	self := readPID(t, filepath.Join(dir, "self.pid"), done)
	child := readPID(t, filepath.Join(dir, "child.pid"), done)
	t.Cleanup(func() {
		for _, pid := range []int{self, child} {
			if alive(pid) {
				if p, err := os.FindProcess(pid); err == nil {
					p.Kill()
				}
			}
		}
	})
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Errorf("debootstrap after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("debootstrap did not return after its context was cancelled")
	}
	// Signals are delivered by the time debootstrap returns; dying takes a
	// moment more. Wait for it, generously: never a bet on speed.
	deadline := time.Now().Add(30 * time.Second)
	for (alive(self) || alive(child)) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(self) {
		t.Errorf("the stand-in debootstrap (pid %d) still runs after its build was cancelled", self)
	}
	if alive(child) {
		t.Errorf("debootstrap's child (pid %d) still runs after its build was cancelled", child)
	}
}

// A debootstrap that succeeds but leaves a process behind (a maintainer
// script's daemon) succeeds, and what it left is ended with it.
func TestDebootstrapLeavesNothingRunning(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("debootstrap runs only as root (it refuses before starting anything otherwise)")
	}
	dir := t.TempDir()
	stub := "#!/bin/sh\nsleep 600 &\necho $! >\"$STUB_CHILD.tmp\" && mv \"$STUB_CHILD.tmp\" \"$STUB_CHILD\"\necho 'I: Base system installed successfully.'\n"
	if err := os.WriteFile(filepath.Join(dir, "debootstrap"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	t.Setenv("STUB_CHILD", filepath.Join(dir, "child.pid"))
	done := make(chan error, 1)
	go func() {
		done <- debootstrap(context.Background(), Recipe{Suite: "bookworm"}, "http://mirror.invalid/debian", filepath.Join(dir, "rootfs"), io.Discard)
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("debootstrap did not return after the stand-in exited")
	}
	child := readPID(t, filepath.Join(dir, "child.pid"), nil)
	t.Cleanup(func() {
		if alive(child) {
			if p, err := os.FindProcess(child); err == nil {
				p.Kill()
			}
		}
	})
	if err != nil {
		t.Errorf("debootstrap: %v, want success", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for alive(child) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(child) {
		t.Errorf("the process debootstrap left (pid %d) still runs after it returned", child)
	}
}
