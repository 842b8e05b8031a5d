package workspace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// Two Workspaces on one directory with the same LockDir stand for two
// sandpit processes (flock locks of two open files conflict even within one
// process): a restore in one waits for nothing and refuses while the other
// has a run's view open; a write in one waits for the other's merge.
func TestHostLocksAcrossProcesses(t *testing.T) {
	testenv.NeedRoot(t, "mounting overlays")
	base := t.TempDir()
	dir := filepath.Join(base, "ws")
	locks := filepath.Join(base, "locks")
	open := func(state string) *Workspace {
		w, err := Open(dir, Options{StateDir: filepath.Join(base, state), Sandbox: &sandboxOwner, Owner: sandboxOwner, LockDir: locks})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	a, b := open("a"), open("b")
	ctx := context.Background()

	v, err := a.Open(ctx, "run1")
	if err != nil {
		t.Fatal(err)
	}
	noop := func(string, *os.Root) error { return nil }
	if err := b.Replace(ctx, noop, nil); !errors.Is(err, ErrBusy) {
		t.Errorf("restore in b while a has a view open: %v, want ErrBusy", err)
	}
	if _, err := v.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Replace(ctx, noop, nil); err != nil {
		t.Errorf("restore in b once a's view closed: %v", err)
	}

	a.lock() // as a merge's apply phase does
	wrote := make(chan error, 1)
	go func() {
		_, err := b.Write(ctx, "x.txt", []byte("x"))
		wrote <- err
	}()
	select {
	case err := <-wrote:
		t.Fatalf("b wrote while a held the workspace (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	a.unlock()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testenv.Patience):
		t.Fatal("b's write still waits after a released the workspace")
	}
}

// The host lock dir holds a pair of lock files per workspace path opened;
// they used to stay for good (review 2026-12-01, L4: 244 after a suite
// run). A workspace's pair goes when it is closed and no other process
// holds it, and pairs a killed process left go at the next Open.
func TestHostLockFilesDoNotPileUp(t *testing.T) {
	base := t.TempDir()
	locks := filepath.Join(base, "locks")
	ctx := t.Context()
	lockFiles := func() []string {
		t.Helper()
		ents, err := os.ReadDir(locks)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	open := func(name string) *Workspace {
		t.Helper()
		w, err := Open(filepath.Join(base, name), Options{LockDir: locks, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	const n = 20
	for i := range n {
		w := open(fmt.Sprintf("ws%d", i))
		mustDo2(t)(w.Write(ctx, "f", []byte("x")))
		w.Close()
	}
	if got := lockFiles(); len(got) != 0 {
		t.Errorf("%d workspaces opened and closed left %d lock files: %.3q…", n, len(got), got)
	}
	// An Open that fails (here: overlays required, no state dir) leaves none.
	if _, err := Open(filepath.Join(base, "refused"), Options{LockDir: locks, RequireOverlay: true, Logger: slog.New(slog.DiscardHandler)}); !errors.Is(err, ErrNoOverlay) {
		t.Fatalf("Open without a state dir, overlays required: %v, want ErrNoOverlay", err)
	}
	if got := lockFiles(); len(got) != 0 {
		t.Errorf("a failed Open left %d lock files: %q", len(got), got)
	}

	// A process killed while it had workspaces open: it never closed them.
	var killed []*Workspace
	for i := range 5 {
		killed = append(killed, open(fmt.Sprintf("killed%d", i)))
	}
	// Their descriptors close, as a dead process's do.
	for _, w := range killed {
		w.data.f.Close()
		w.runsHost.f.Close()
	}
	live := open("live")
	defer live.Close()
	if got := lockFiles(); len(got) != 2 {
		t.Errorf("after a killed process's 5 workspaces and one live one, %d lock files: %.3q…", len(got), got)
	}
	// A held lock's file stays through another workspace's sweep.
	live.lock()
	other := open("other")
	other.Close()
	if !isAt(int(live.data.f.Fd()), live.data.path) {
		t.Error("a sweep removed the lock file of a held lock")
	}
	live.unlock()
	mustDo2(t)(live.Write(ctx, "g", []byte("y")))
}

// Lock files may be removed while other processes have them open: whoever
// takes a lock must end up holding the file at the path, never one that was
// unlinked under it, or two processes would hold the "same" exclusive lock
// at once (the pattern of review 2026-12-01 M1).
func TestHostLockRemovalKeepsOneOwner(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "ws")
	locks := filepath.Join(base, "locks")
	var (
		inside atomic.Int32
		bad    atomic.Int32
		wg     sync.WaitGroup
	)
	const workers, rounds = 4, 300
	for range workers {
		// A Workspace each: separate open files, as separate processes.
		w, err := Open(dir, Options{LockDir: locks, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				w.lock()
				if inside.Add(1) != 1 {
					bad.Add(1)
				}
				goruntime.Gosched()
				inside.Add(-1)
				w.unlock()
				w.Close() // removes the pair if no one holds it
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Errorf("%d times two owners held the exclusive lock at once", n)
	}
}

// The lock dir is private, but the directories made above it are not: as
// root it is /run/sandpit/locks, and /run/sandpit also holds the image
// roots every sandbox's user must traverse. A lock dir made first, with
// its parents 0700, broke every run on the host ("remount-private …
// permission denied").
func TestHostLockDirParentsStayTraversable(t *testing.T) {
	base := t.TempDir()
	locks := filepath.Join(base, "run", "sandpit", "locks")
	w, err := Open(filepath.Join(base, "ws"), Options{LockDir: locks, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for dir, want := range map[string]os.FileMode{
		filepath.Join(base, "run"):            0o711,
		filepath.Join(base, "run", "sandpit"): 0o711,
		locks:                                 0o700,
	} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", dir, got, want)
		}
	}
}
