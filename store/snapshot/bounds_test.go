package snapshot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

// Regression tests for the undo records (security review 2026-11-30: M4,
// H3, L2).

// simRun plays one run with a workspace: open the view (BeforeRun records
// the undo state), write as the program would, close (merge).
func simRun(t *testing.T, e env, id string, write map[string]string) error {
	t.Helper()
	v, err := e.ws.Open(t.Context(), id)
	if err != nil {
		return err
	}
	for p, c := range write {
		must(t, os.WriteFile(filepath.Join(v.Dir(), p), []byte(c), 0o644))
	}
	_, err = v.Close(t.Context())
	must(t, err)
	return nil
}

// TestFailedUndoRecordStopsTheRun: when BeforeRun failed (blob store full,
// index busy, a cancelled request) the run went on without an undo state,
// and undo_last_run then reverted the run before it as well (review M4).
// Now a run whose undo state cannot be recorded does not start.
func TestFailedUndoRecordStopsTheRun(t *testing.T) {
	e := newEnv(t)
	must(t, simRun(t, e, "run1", map[string]string{"from_run1.txt": "keep me"}))
	// Make the next BeforeRun fail the way ENOSPC on the blob store would.
	tmp := filepath.Join(e.base, "snapshots", "blobs", "tmp")
	must(t, os.RemoveAll(tmp))
	must(t, os.WriteFile(tmp, nil, 0o600))
	err := simRun(t, e, "run2", map[string]string{"from_run2.txt": "undo me"})
	must(t, os.Remove(tmp))
	if err == nil {
		t.Fatal("run2 started without an undo state")
	}
	if !errors.Is(err, sandpit.ErrUnavailable) {
		t.Errorf("Open = %v, want a classed error (unavailable)", err)
	}
	if _, serr := os.Stat(filepath.Join(e.ws.Dir(), "from_run2.txt")); serr == nil {
		t.Error("run2's file reached the workspace")
	}
	// Undo takes back run1, the last run that ran, and only it.
	must(t, simRun(t, e, "run3", map[string]string{"from_run3.txt": "undo me"}))
	sn, err := e.store.UndoLastRun(t.Context(), e.ws)
	must(t, err)
	if _, err := os.Stat(filepath.Join(e.ws.Dir(), "from_run1.txt")); err != nil {
		t.Errorf("undo restored %s and reverted run1 too", sn.Description)
	}
	if _, err := os.Stat(filepath.Join(e.ws.Dir(), "from_run3.txt")); err == nil {
		t.Error("undo did not revert run3")
	}
}

// TestUndoRecordsStaySparse: the undo record before a run copied every
// changed file densely into the blob store, and a restore wrote it densely
// back (review H3: 8 sparse files of 32 MiB took 256 MiB of blobs).
func TestUndoRecordsStaySparse(t *testing.T) {
	e := newEnv(t)
	if !e.ws.Isolated() {
		t.Skip("needs the overlay (root)")
	}
	v, err := e.ws.Open(t.Context(), "sparse")
	must(t, err)
	for i := range 8 {
		f, err := os.Create(filepath.Join(v.Dir(), "hole"+string(rune('0'+i))))
		must(t, err)
		_, err = f.WriteAt([]byte{byte(i + 1)}, 32<<20-1)
		must(t, err)
		f.Close()
	}
	_, err = v.Close(t.Context())
	must(t, err)
	// The next run's undo record stores them; the run deletes them; undo
	// brings them back.
	v, err = e.ws.Open(t.Context(), "next")
	must(t, err)
	for i := range 8 {
		must(t, os.Remove(filepath.Join(v.Dir(), "hole"+string(rune('0'+i)))))
	}
	_, err = v.Close(t.Context())
	must(t, err)
	blobs := diskUse(t, filepath.Join(e.base, "snapshots", "blobs"))
	if blobs > 1<<20 {
		t.Errorf("the blob store takes %d bytes of disk for 8 one-byte sparse files", blobs)
	}
	_, err = e.store.UndoLastRun(t.Context(), e.ws)
	must(t, err)
	ws := diskUse(t, e.ws.Dir())
	if ws > 1<<20 {
		t.Errorf("the restored workspace takes %d bytes of disk", ws)
	}
	b, err := os.ReadFile(filepath.Join(e.ws.Dir(), "hole3"))
	if err != nil || len(b) != 32<<20 || b[len(b)-1] != 4 || b[0] != 0 {
		t.Errorf("hole3 after undo: %d bytes, %v", len(b), err)
	}
	t.Logf("blobs %d KiB, restored workspace %d KiB on disk", blobs>>10, ws>>10)
}

func diskUse(t *testing.T, dir string) (n int64) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Sys().(*syscall.Stat_t).Blocks * 512
			}
		}
		return nil
	})
	return n
}

// TestSnapshotsSkipServerTempDirs: a directory of sandpit's own temporary
// name (a merge's staging directory left by a crash) was skipped itself but
// its content recorded, so a restore failed or resurrected it.
func TestSnapshotsSkipServerTempDirs(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"a.txt": "a"})
	stage := filepath.Join(e.ws.Dir(), ".sandpit-tmp-merge-x")
	must(t, os.Mkdir(stage, 0o700))
	must(t, os.WriteFile(filepath.Join(stage, "17"), []byte("staged"), 0o600))
	sn, err := e.store.Create(t.Context(), e.ws, "with a leftover stage")
	must(t, err)
	if sn.Files != 1 {
		t.Errorf("the snapshot holds %d files, want 1 (a.txt)", sn.Files)
	}
	must(t, e.store.Restore(t.Context(), e.ws, sn.ID))
}

// TestUndoRaceWithARunOpening: UndoLastRun restores state S, then deletes
// S's row; a run opening in between found the workspace equal to S, reused
// S's row as its own undo state (dedupe), and was left with none once the
// row went. Undoing that run then reverted the run before it too (review
// M4, the secondary race).
func TestUndoRaceWithARunOpening(t *testing.T) {
	e := newEnv(t)
	must(t, simRun(t, e, "run1", map[string]string{"a.txt": "from run1"}))
	must(t, simRun(t, e, "run2", map[string]string{"b.txt": "from run2"}))
	e.store.afterUndoRestore = func() {
		e.store.afterUndoRestore = nil
		must(t, simRun(t, e, "racer", map[string]string{"c.txt": "from the racer"}))
	}
	// Undo run2: b.txt goes; the racer runs right after the restore.
	_, err := e.store.UndoLastRun(t.Context(), e.ws)
	must(t, err)
	// Undo the racer: only c.txt goes.
	sn, err := e.store.UndoLastRun(t.Context(), e.ws)
	must(t, err)
	for p, want := range map[string]bool{"a.txt": true, "b.txt": false, "c.txt": false} {
		if _, err := os.Stat(filepath.Join(e.ws.Dir(), p)); (err == nil) != want {
			t.Errorf("after undoing the racer (%s): %s present %v, want %v", sn.Description, p, err == nil, want)
		}
	}
}
