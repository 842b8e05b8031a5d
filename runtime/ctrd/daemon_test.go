package ctrd

import (
	"log/slog"
	"os"
	"os/exec"
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

// A pid file naming a pid that another containerd has since taken (pids
// wrap at 32768 on these hosts) is not this daemon's: PID does not give
// it, and Stop neither signals nor kills it. A containerd with this
// daemon's config is.
func TestPIDIsThisDaemonsOnly(t *testing.T) {
	perl, err := exec.LookPath("perl")
	if err != nil {
		t.Skip("no perl to stand for a containerd process")
	}
	dir := t.TempDir()
	d := PrivateDaemon{Dir: filepath.Join(dir, "run"), Root: filepath.Join(dir, "root")}
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(d.Dir, "config.toml")
	if err := os.WriteFile(own, []byte(d.Config()), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.toml")
	if err := os.WriteFile(other, []byte(`state = "`+filepath.Join(dir, "other-state")+`"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A process whose argv[0] is containerd, started with a config.
	fake := func(conf string) (*exec.Cmd, chan struct{}) {
		t.Helper()
		cmd := &exec.Cmd{Path: perl, Args: []string{"containerd", "-e", "sleep 60", "--", "--config", conf}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-exited })
		return cmd, exited
	}
	pidFile := filepath.Join(d.Dir, "containerd.pid")

	theirs, theirsExited := fake(other)
	os.WriteFile(pidFile, []byte(strconv.Itoa(theirs.Process.Pid)+"\n"), 0o644)
	if got := d.PID(); got != 0 {
		t.Errorf("PID() = %d: another containerd's pid, from a stale pid file", got)
	}
	if err := d.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-theirsExited:
		t.Errorf("Stop of a dead daemon ended another containerd (pid %d)", theirs.Process.Pid)
	case <-time.After(300 * time.Millisecond): // a signal, had one been sent, lands at once
	}

	ours, _ := fake(own)
	os.WriteFile(pidFile, []byte(strconv.Itoa(ours.Process.Pid)+"\n"), 0o644)
	if got := d.PID(); got != ours.Process.Pid {
		t.Errorf("PID() = %d, want %d (a containerd with this daemon's config)", got, ours.Process.Pid)
	}
}
