package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
