package runtime

import (
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// A started daemon that never answers is killed when Start gives up, not
// left behind to hold the root and block every later start.
func TestStartKillsADaemonThatNeverAnswers(t *testing.T) {
	testenv.NeedRoot(t, "Start")
	bin := t.TempDir()
	// Stands for a containerd stuck at start (on boltdb, say): it lives and
	// never listens.
	if err := os.WriteFile(filepath.Join(bin, "containerd"), []byte("#!/bin/sh\nwhile :; do sleep 1; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "runc"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	dir := t.TempDir()
	d := PrivateDaemon{Dir: filepath.Join(dir, "run"), Root: filepath.Join(dir, "root"), Patience: time.Second}
	pidFile := filepath.Join(d.Dir, "containerd.pid")
	t.Cleanup(func() { // what today's code left
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})

	err := d.Start(t.Context(), slog.New(slog.DiscardHandler))
	t.Logf("Start: %v", err)
	if err == nil {
		t.Fatal("Start succeeded with a daemon that never answers")
	}
	pid := 0
	if m := regexp.MustCompile(`pid (\d+)`).FindStringSubmatch(err.Error()); m != nil {
		pid, _ = strconv.Atoi(m[1])
	} else if b, err := os.ReadFile(pidFile); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pid == 0 {
		t.Fatalf("neither the error nor the pid file names the started process")
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Errorf("the started process %d still runs after Start gave up", pid)
	}
	if _, err := os.Stat(pidFile); err == nil {
		t.Errorf("the pid file still names a daemon")
	}
}
