package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/store/workspace"
)

type env struct {
	ws    *workspace.Workspace
	store *Store
	base  string
}

func newEnv(t testing.TB) env {
	t.Helper()
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755)
	os.Chmod(base, 0o755)
	return openEnv(t, base)
}

func openEnv(t testing.TB, base string) env {
	t.Helper()
	s, err := Open(filepath.Join(base, "snapshots"), Options{MaxUndo: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ws, err := workspace.Open(filepath.Join(base, "ws"), workspace.Options{StateDir: filepath.Join(base, "state"), BeforeRun: s.BeforeRun})
	if err != nil {
		t.Fatal(err)
	}
	must(t, ws.Sweep(t.Context()))
	t.Cleanup(ws.Close)
	return env{ws: ws, store: s, base: base}
}

// tree is a walk of the workspace: path → type, mode, mtime, owner, content hash.
func tree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%v %d %d:%d", fi.Mode(), fi.ModTime().UnixNano(), st.Uid, st.Gid)
		if rel == "." {
			desc = fmt.Sprintf("%v %d:%d", fi.Mode(), st.Uid, st.Gid) // the root's mtime is not recorded
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:])
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func write(t testing.TB, ws *workspace.Workspace, files map[string]string) {
	t.Helper()
	for p, data := range files {
		if _, err := ws.Write(t.Context(), p, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRestoreIsExact(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	bin := make([]byte, 70000)
	for i := range bin {
		bin[i] = byte(i % 251)
	}
	write(t, e.ws, map[string]string{"a.txt": "alpha", "src/main.py": "print(1)", "src/lib/util.py": "x = 1", "data.bin": string(bin), "dup1": "same", "dup2": "same"})
	must(t, os.Chmod(filepath.Join(e.ws.Dir(), "src/main.py"), 0o755))
	must(t, os.Mkdir(filepath.Join(e.ws.Dir(), "empty"), 0o750))
	must(t, os.Lchown(filepath.Join(e.ws.Dir(), "empty"), int(e.ws.Owner().UID), int(e.ws.Owner().GID)))
	old := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	must(t, os.Chtimes(filepath.Join(e.ws.Dir(), "a.txt"), old, old))
	must(t, os.Chtimes(filepath.Join(e.ws.Dir(), "src"), old, old))
	want := tree(t, e.ws.Dir())

	snap, err := e.store.Create(ctx, e.ws, "before changes")
	must(t, err)
	if snap.Files != 6 {
		t.Errorf("snapshot has %d files, want 6", snap.Files)
	}
	// Modify, delete, add, chmod, and leave a symlink and a FIFO behind.
	write(t, e.ws, map[string]string{"a.txt": "changed", "new/file": "new"})
	must(t, e.ws.Delete(ctx, "src/lib"))
	must(t, e.ws.Delete(ctx, "empty"))
	must(t, os.Chmod(filepath.Join(e.ws.Dir(), "data.bin"), 0o600))
	must(t, os.Symlink("/", filepath.Join(e.ws.Dir(), "escape")))
	must(t, syscall.Mkfifo(filepath.Join(e.ws.Dir(), "src", "fifo"), 0o644))

	d, err := e.store.Diff(ctx, e.ws, snap.ID)
	must(t, err)
	wantDiff := Diff{Added: []string{"new/", "new/file"}, Removed: []string{"empty/", "src/lib/", "src/lib/util.py"}, Changed: []string{"a.txt", "data.bin"}}
	if fmt.Sprint(d) != fmt.Sprint(wantDiff) {
		t.Errorf("Diff = %+v\nwant   %+v", d, wantDiff)
	}

	must(t, e.store.Restore(ctx, e.ws, snap.ID))
	got := tree(t, e.ws.Dir())
	if !maps.Equal(got, want) {
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if got[k] != want[k] {
				t.Errorf("%s: got %q, want %q", k, got[k], want[k])
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: exists after restore", k)
			}
		}
	}
	d, err = e.store.Diff(ctx, e.ws, snap.ID)
	must(t, err)
	if len(d.Added)+len(d.Removed)+len(d.Changed) != 0 {
		t.Errorf("Diff after restore = %+v, want none", d)
	}
	if _, err := os.Lstat(e.ws.Dir() + "/../." + filepath.Base(e.ws.Dir()) + ".sandpit-stage"); err == nil {
		t.Error("restore stage left behind")
	}
	if err := e.store.Restore(ctx, e.ws, "snap-nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Restore(unknown) = %v, want ErrNotFound", err)
	}
}

func TestBlobsAreShared(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("f%02d", i)] = strings.Repeat(fmt.Sprint(i), 1000)
	}
	write(t, e.ws, files)
	a, err := e.store.Create(ctx, e.ws, "a")
	must(t, err)
	n1, _ := e.store.BlobCount()
	write(t, e.ws, map[string]string{"f07": "changed"})
	b, err := e.store.Create(ctx, e.ws, "b")
	must(t, err)
	n2, _ := e.store.BlobCount()
	if n1 != 20 || n2 != n1+1 {
		t.Errorf("blobs: %d after one snapshot of 20 distinct files, %d after the second with one change; want 20 and 21", n1, n2)
	}
	list, err := e.store.List(ctx, e.ws)
	must(t, err)
	if len(list) != 2 || list[0].ID != b.ID || list[1].ID != a.ID {
		t.Errorf("List = %+v, want b then a", list)
	}
	// Deleting a frees only the blob nothing else references (f07's old content).
	must(t, e.store.Delete(ctx, e.ws, a.ID))
	n3, _ := e.store.BlobCount()
	if n3 != 20 {
		t.Errorf("blobs after deleting a = %d, want 20", n3)
	}
	if err := e.store.Delete(ctx, e.ws, a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
	write(t, e.ws, map[string]string{"f07": "again"})
	must(t, e.store.Restore(ctx, e.ws, b.ID))
	if got, _ := os.ReadFile(filepath.Join(e.ws.Dir(), "f07")); string(got) != "changed" {
		t.Errorf("f07 after restoring b = %q", got)
	}
}

// TestGCKeepsBlobsOfConcurrentCreate runs GC in a loop while snapshots are
// created: every snapshot must stay restorable.
func TestGCKeepsBlobsOfConcurrentCreate(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				e.store.GC(ctx)
			}
		}
	}()
	var ids []string
	for i := range 15 {
		write(t, e.ws, map[string]string{fmt.Sprintf("f%d", i): fmt.Sprint("content ", i)})
		s, err := e.store.Create(ctx, e.ws, "")
		must(t, err)
		ids = append(ids, s.ID)
	}
	close(stop)
	<-done
	for _, id := range ids {
		_, es, err := e.store.get(ctx, e.ws, id)
		must(t, err)
		for _, en := range es {
			if !en.Dir && !e.store.blobs.has(en.SHA) {
				t.Fatalf("snapshot %s lost the blob of %s", id, en.Path)
			}
		}
	}
}

func TestUndoLastRun(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if _, err := e.store.UndoLastRun(ctx, e.ws); !errors.Is(err, ErrNoUndo) {
		t.Errorf("UndoLastRun with no run = %v, want ErrNoUndo", err)
	}
	write(t, e.ws, map[string]string{"keep": "v0", "edit": "v0"})
	states := []map[string]string{tree(t, e.ws.Dir())}
	for i := 1; i <= 4; i++ {
		v, err := e.ws.Open(ctx, fmt.Sprintf("run-%d", i))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(v.Dir(), "edit"), []byte(fmt.Sprint("v", i)), 0o644))
		must(t, os.WriteFile(filepath.Join(v.Dir(), fmt.Sprint("new", i)), []byte("n"), 0o644))
		_, err = v.Close(ctx)
		must(t, err)
		states = append(states, tree(t, e.ws.Dir()))
	}
	// MaxUndo is 3: runs 4, 3 and 2 can be undone, run 1 cannot.
	for i := 3; i >= 1; i-- {
		if _, err := e.store.UndoLastRun(ctx, e.ws); err != nil {
			t.Fatalf("undo to state %d: %v", i, err)
		}
		if got := tree(t, e.ws.Dir()); !maps.Equal(got, states[i]) {
			t.Errorf("after undo: %v\nwant state %d: %v", got, i, states[i])
		}
	}
	if _, err := e.store.UndoLastRun(ctx, e.ws); !errors.Is(err, ErrNoUndo) {
		t.Errorf("fourth undo = %v, want ErrNoUndo", err)
	}
	if list, _ := e.store.List(ctx, e.ws); len(list) != 0 {
		t.Errorf("undo states show in List: %+v", list)
	}
}

// TestRestoreSurvivesKill kills a restore at random points (in a child
// process) and checks that reopening the workspace leaves exactly the old or
// the new state.
func TestRestoreSurvivesKill(t *testing.T) {
	if os.Getenv("SANDPIT_RESTORE_CHILD") != "" {
		restoreChild(t)
		return
	}
	base := t.TempDir()
	e := openEnv(t, base)
	ctx := t.Context()
	files := map[string]string{}
	for i := range 1500 {
		files[fmt.Sprintf("d%02d/f%04d", i%30, i)] = strings.Repeat("A", 2000+i)
	}
	write(t, e.ws, files)
	a, err := e.store.Create(ctx, e.ws, "A")
	must(t, err)
	stateA := tree(t, e.ws.Dir())
	for p := range files {
		if len(p)%3 == 0 {
			must(t, e.ws.Delete(ctx, p))
		} else {
			write(t, e.ws, map[string]string{p: "B" + p})
		}
	}
	write(t, e.ws, map[string]string{"only-in-b": "b"})
	b, err := e.store.Create(ctx, e.ws, "B")
	must(t, err)
	stateB := tree(t, e.ws.Dir())
	e.store.Close()

	child := func(target string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRestoreSurvivesKill$")
		cmd.Env = append(os.Environ(), "SANDPIT_RESTORE_CHILD="+base, "SANDPIT_RESTORE_ID="+target)
		return cmd
	}
	// One restore to the end (A→A: a full rebuild) says how long one takes.
	start := time.Now()
	if out, err := child(a.ID).CombinedOutput(); err != nil {
		t.Fatalf("restore child: %v\n%s", err, out)
	}
	full := time.Since(start)
	if got := tree(t, e.ws.Dir()); !maps.Equal(got, stateA) {
		t.Fatal("a completed restore to A did not give A")
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	sawOld, sawNew := 0, 0
	for i := range 10 {
		cur := tree(t, e.ws.Dir())
		target, other := a.ID, stateA
		if maps.Equal(cur, stateA) {
			target, other = b.ID, stateB
		}
		cmd := child(target)
		must(t, cmd.Start())
		time.Sleep(full/3 + time.Duration(rng.Int64N(int64(full))))
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		e2 := openEnv(t, base) // recovery happens here
		got := tree(t, e2.ws.Dir())
		switch {
		case maps.Equal(got, other):
			sawNew++
		case maps.Equal(got, cur):
			sawOld++
		default:
			t.Fatalf("iteration %d: after a kill the workspace is neither the old nor the new state (%d entries)", i, len(got))
		}
		e2.store.Close()
	}
	t.Logf("a restore takes %v; kills left the old state %d times and the new state %d times", full, sawOld, sawNew)
}

func restoreChild(t *testing.T) {
	e := openEnv(t, os.Getenv("SANDPIT_RESTORE_CHILD"))
	if err := e.store.Restore(t.Context(), e.ws, os.Getenv("SANDPIT_RESTORE_ID")); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreReusesUnchangedFiles: a restore where one file changed rewrites
// that file only (the others keep their inode), and the next snapshot reads
// nothing it already knows, restore after restore.
func TestRestoreReusesUnchangedFiles(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	write(t, e.ws, map[string]string{"a": "1", "d/b": "2", "d/c": "3"})
	snap, err := e.store.Create(ctx, e.ws, "base")
	must(t, err)
	for i := range 3 {
		before, err := os.Stat(filepath.Join(e.ws.Dir(), "d/b"))
		must(t, err)
		write(t, e.ws, map[string]string{"a": fmt.Sprint("changed ", i)})
		must(t, e.store.Restore(ctx, e.ws, snap.ID))
		after, err := os.Stat(filepath.Join(e.ws.Dir(), "d/b"))
		must(t, err)
		if !os.SameFile(before, after) {
			t.Errorf("restore %d rewrote an unchanged file", i)
		}
		if n := after.Sys().(*syscall.Stat_t).Nlink; n != 1 {
			t.Errorf("restore %d left d/b with %d links", i, n)
		}
		prev, err := e.store.loadCache(ctx, e.ws.ID())
		must(t, err)
		_, _, read, err := e.store.scanCount(ctx, e.ws, prev, false)
		must(t, err)
		if read != 0 {
			t.Errorf("after restore %d a scan read %d files, want 0", i, read)
		}
	}
}

// Runs that reuse the workspace's spare view skip their undo record
// (workspace/keep.go): undo must still take back exactly the last run that
// changed something, whatever runs that changed nothing came between, and
// however the workspace changed outside runs in between.
func TestUndoWithKeptViews(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	write(t, e.ws, map[string]string{"a": "v0"})
	settle := func() { time.Sleep(120 * time.Millisecond) } // past the keeper's racy window
	run := func(id string, change func(dir string)) string {
		t.Helper()
		v, err := e.ws.Open(ctx, id)
		must(t, err)
		dir := v.Dir()
		if change != nil {
			change(dir)
		}
		if g, ok := v.(interface{ WritersGone() }); ok {
			g.WritersGone() // as the runtime says once a run's sandbox exited
		}
		_, err = v.Close(ctx)
		must(t, err)
		return dir
	}
	settle()
	s0 := tree(t, e.ws.Dir())
	first := run("idle-1", nil)
	if again := run("idle-2", nil); again != first {
		t.Fatal("the spare view was not reused: this test would not cover the skipped record")
	}
	run("change-1", func(dir string) { must(t, os.WriteFile(filepath.Join(dir, "a"), []byte("v1"), 0o644)) })
	s1 := tree(t, e.ws.Dir())
	settle()
	run("idle-3", nil)
	run("idle-4", nil)
	// Outside any run: a host edit, then runs that change nothing.
	must(t, os.WriteFile(filepath.Join(e.ws.Dir(), "b"), []byte("host"), 0o644))
	settle()
	s2 := tree(t, e.ws.Dir())
	run("idle-5", nil)
	run("idle-6", nil)
	run("change-2", func(dir string) { must(t, os.WriteFile(filepath.Join(dir, "c"), []byte("c"), 0o644)) })
	for _, want := range []struct {
		name  string
		state map[string]string
	}{{"before change-2 (with the host edit)", s2}, {"before the host edit", s1}, {"before change-1", s0}} {
		if _, err := e.store.UndoLastRun(ctx, e.ws); err != nil {
			t.Fatalf("undo to %s: %v", want.name, err)
		}
		if got := tree(t, e.ws.Dir()); !maps.Equal(got, want.state) {
			t.Errorf("after undo: %v\nwant %s: %v", got, want.name, want.state)
		}
	}
}
