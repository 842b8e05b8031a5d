package instance

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
)

func TestAcquireIsExclusive(t *testing.T) {
	root := t.TempDir()
	a, err := Acquire(root, "default")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(root, "default")
	var busy *BusyError
	if !errors.As(err, &busy) || busy.PID != os.Getpid() || !errors.Is(err, sandpit.ErrConflict) {
		t.Fatalf("second Acquire: %v, want a BusyError naming pid %d (class conflict)", err, os.Getpid())
	}
	if got := Holder(root, "default"); got != os.Getpid() {
		t.Errorf("Holder = %d, want %d", got, os.Getpid())
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	if got := Holder(root, "default"); got != 0 {
		t.Errorf("Holder after release = %d, want 0", got)
	}
	b, err := Acquire(root, "default")
	if err != nil {
		t.Fatalf("Acquire after release: %v", err)
	}
	b.Release()
}

func TestAcquireFreePicksTheNextName(t *testing.T) {
	root := t.TempDir()
	var held []*Instance
	for _, want := range []string{"default", "default-2", "default-3"} {
		in, err := AcquireFree(root, "default", 5)
		if err != nil {
			t.Fatal(err)
		}
		if in.Name() != want {
			t.Errorf("got %s, want %s", in.Name(), want)
		}
		held = append(held, in)
	}
	held[1].Release()
	in, err := AcquireFree(root, "default", 5)
	if err != nil || in.Name() != "default-2" {
		t.Fatalf("after releasing default-2: %v %v, want default-2 again", in, err)
	}
	if _, err := AcquireFree(root, "x", 0); err == nil {
		t.Error("no tries must fail")
	}
}

func TestInvalidNames(t *testing.T) {
	for _, name := range []string{"", "../x", "a/b", ".hidden", strings.Repeat("a", 64), "a b"} {
		if _, err := Acquire(t.TempDir(), name); !errors.Is(err, sandpit.ErrInvalidArgument) {
			t.Errorf("Acquire(%q) = %v, want invalid argument", name, err)
		}
	}
}

// A process that dies holding an instance leaves it free: Dead finds it,
// and not the ones a live process holds.
func TestDeadFindsInstancesOfDeadProcesses(t *testing.T) {
	if os.Getenv("SANDPIT_INSTANCE_CHILD") != "" {
		in, err := Acquire(os.Getenv("SANDPIT_INSTANCE_CHILD"), "crashed")
		if err != nil {
			os.Exit(3)
		}
		_ = in
		os.Stdout.WriteString("held\n")
		time.Sleep(time.Minute)
		return
	}
	root := t.TempDir()
	live, err := Acquire(root, "live")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeadFindsInstancesOfDeadProcesses$")
	cmd.Env = append(os.Environ(), "SANDPIT_INSTANCE_CHILD="+root)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf) != "held\n" {
		t.Fatalf("child did not take the instance: %q %v", buf, err)
	}
	if dead, _ := Dead(root); len(dead) != 0 {
		t.Fatalf("Dead while the child lives: %d instances", len(dead))
	}
	if pid := Holder(root, "crashed"); pid != cmd.Process.Pid {
		t.Errorf("Holder = %d, want the child %d", pid, cmd.Process.Pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	dead, err := Dead(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Name() != "crashed" {
		t.Fatalf("Dead = %v, want [crashed]", dead)
	}
	os.WriteFile(filepath.Join(dead[0].Dir(), "leftover"), nil, 0o644)
	if err := dead[0].Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "crashed")); !os.IsNotExist(err) {
		t.Errorf("removed instance dir still there: %v", err)
	}
}
