package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// sandboxOwner stands for base+1000 of a user namespace mapping.
var sandboxOwner = Owner{UID: 101000, GID: 101000}

func needRoot(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "mounting overlays")
}

// runAs runs a shell script in dir as the sandbox user, as a run would.
func runAs(t testing.TB, o Owner, dir, script string) (string, error) {
	t.Helper()
	cmd := exec.Command("setpriv", fmt.Sprintf("--reuid=%d", o.UID), fmt.Sprintf("--regid=%d", o.GID), "--clear-groups", "sh", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestViewWritesBackOnClose(t *testing.T) {
	needRoot(t)
	ctx := t.Context()
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	if !w.Isolated() {
		t.Fatal("overlay views unavailable as root")
	}
	outside := filepath.Join(filepath.Dir(w.Dir()), "outside")
	mustDo(t, os.WriteFile(outside, []byte("outside"), 0o644))
	for p, data := range map[string]string{"keep.txt": "keep", "edit.txt": "old", "gone.txt": "bye", "dir/a": "a", "dir/b": "b", "olddir/x": "x", "opaque/old": "old"} {
		mustDo2(t)(w.Write(ctx, p, []byte(data)))
	}
	v, err := w.Open(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	out, err := runAs(t, sandboxOwner, v.Dir(), `set -e
		echo new >> edit.txt
		rm gone.txt
		rm -r olddir
		rm -rf opaque && mkdir opaque && echo fresh > opaque/new
		mkdir -p made/deep && printf 'csv,1\n' > made/deep/out.csv
		ln -s / escape
		ln -s `+outside+` outlink
		mkfifo fifo
		ln keep.txt hardlink
	`)
	if err != nil {
		t.Fatalf("run: %v: %s", err, out)
	}
	// Nothing is visible until Close.
	if _, err := os.Stat(filepath.Join(w.Dir(), "made")); err == nil {
		t.Error("a run's file is visible in the workspace before Close")
	}
	ch, err := v.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := &sandpit.Changes{
		Created:  []string{"hardlink", "made/deep/out.csv", "opaque/new"},
		Modified: []string{"edit.txt", "keep.txt"},
		Deleted:  []string{"gone.txt", "olddir/", "opaque/old"},
		Dropped:  []sandpit.DroppedPath{{Path: "escape", Reason: "symlink"}, {Path: "fifo", Reason: "fifo"}, {Path: "outlink", Reason: "symlink"}},
		// The counts; hardlink, out.csv, new, edit.txt and keep.txt are 27 bytes.
		CreatedCount: 3, ModifiedCount: 2, DeletedCount: 3, DroppedCount: 3, BytesWritten: 27,
	}
	ch.MergeMS = 0
	if fmt.Sprint(ch) != fmt.Sprint(want) {
		t.Errorf("Changes = %+v\nwant      %+v", ch, want)
	}
	for p, wantData := range map[string]string{"edit.txt": "oldnew\n", "keep.txt": "keep", "made/deep/out.csv": "csv,1\n", "opaque/new": "fresh\n", "hardlink": "keep", "dir/a": "a"} {
		got, err := w.Read(ctx, p, 0, 0)
		if err != nil {
			t.Errorf("Read(%s): %v", p, err)
			continue
		}
		if string(got.Data) != wantData {
			t.Errorf("Read(%s) = %q, want %q", p, got.Data, wantData)
		}
	}
	for _, p := range []string{"gone.txt", "olddir", "opaque/old", "escape", "outlink", "fifo"} {
		if _, err := os.Lstat(filepath.Join(w.Dir(), p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists after the merge (err %v)", p, err)
		}
	}
	// Everything that came back is a regular file or directory owned by the
	// sandbox user, with one link.
	filepath.WalkDir(w.Dir(), func(p string, d fs.DirEntry, err error) error {
		fi, _ := d.Info()
		st := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() && !fi.Mode().IsRegular() || st.Uid != sandboxOwner.UID || st.Gid != sandboxOwner.GID || !fi.IsDir() && st.Nlink != 1 {
			t.Errorf("%s: mode %v owner %d:%d links %d", p, fi.Mode(), st.Uid, st.Gid, st.Nlink)
		}
		return nil
	})
	if got, _ := os.ReadFile(outside); string(got) != "outside" {
		t.Errorf("file outside the workspace changed: %q", got)
	}
	if ents, _ := os.ReadDir(w.runsDir()); len(ents) != 0 {
		t.Errorf("run directories left behind: %v", ents)
	}
	// A second run sees the first run's files, as the sandbox user can write them.
	v2, err := w.Open(ctx, "run-2")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runAs(t, sandboxOwner, v2.Dir(), `cat made/deep/out.csv && echo more >> made/deep/out.csv && touch newfile`); err != nil {
		t.Fatalf("second run: %v: %s", err, out)
	}
	ch2, err := v2.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch2.Modified, []string{"made/deep/out.csv"}) || !slices.Equal(ch2.Created, []string{"newfile"}) {
		t.Errorf("second run's Changes = %+v", ch2)
	}
}

func TestViewQuota(t *testing.T) {
	needRoot(t)
	ctx := t.Context()
	const quota = 4 << 20
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner, Quota: quota})
	mustDo2(t)(w.Write(ctx, "before", []byte("before")))
	v, err := w.Open(ctx, "quota")
	if err != nil {
		t.Fatal(err)
	}
	out, err := runAs(t, sandboxOwner, v.Dir(), `dd if=/dev/zero of=big bs=1M count=12`)
	if err == nil || !strings.Contains(out, "No space left on device") {
		t.Fatalf("writing 3× the quota: err %v, output %q; want no space left", err, out)
	}
	// The bytes went to the run's tmpfs, not the workspace's disk.
	var sfs unix.Statfs_t
	mustDo(t, unix.Statfs(filepath.Join(w.runsDir(), "quota", "changes"), &sfs))
	if sfs.Type != unix.TMPFS_MAGIC {
		t.Errorf("changes are on filesystem type %#x, want tmpfs", sfs.Type)
	}
	if _, err := os.Stat(filepath.Join(w.Dir(), "big")); err == nil {
		t.Error("the workspace holds the big file before Close")
	}
	ch, err := v.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Documented: what fitted comes back as the run left it.
	fi, err := os.Stat(filepath.Join(w.Dir(), "big"))
	if err != nil || fi.Size() > quota || !slices.Equal(ch.Created, []string{"big"}) {
		t.Errorf("after the run: big %v (err %v), changes %+v; want a file of at most the quota", fi, err, ch)
	}
	if got, _ := w.Read(ctx, "before", 0, 0); string(got.Data) != "before" {
		t.Errorf("an untouched file changed: %q", got.Data)
	}
}

// TestViewMergeIsAtomicForReaders reads a file while a run's new version of
// it is merged: every read is the whole old or the whole new content.
func TestViewMergeIsAtomicForReaders(t *testing.T) {
	needRoot(t)
	ctx := t.Context()
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	old, neu := bytes.Repeat([]byte("o"), 64<<10), bytes.Repeat([]byte("n"), 512<<10)
	mustDo2(t)(w.Write(ctx, "f", old))
	for i := range 5 {
		v, err := w.Open(ctx, fmt.Sprintf("r%d", i))
		if err != nil {
			t.Fatal(err)
		}
		want := [][]byte{old, neu}[i%2]
		mustDo(t, os.WriteFile(filepath.Join(v.Dir(), "f"), [][]byte{neu, old}[i%2], 0o644))
		done := make(chan error)
		go func() {
			for {
				c, err := w.Read(ctx, "f", 0, 0)
				if err != nil {
					done <- err
					return
				}
				if !bytes.Equal(c.Data, old) && !bytes.Equal(c.Data, neu) {
					done <- fmt.Errorf("torn read of %d bytes", len(c.Data))
					return
				}
				if !bytes.Equal(c.Data, want) {
					done <- nil
					return
				}
			}
		}()
		if _, err := v.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestSweepRemovesLeftovers(t *testing.T) {
	needRoot(t)
	ctx := t.Context()
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	mustDo2(t)(w.Write(ctx, "precious", []byte("keep me")))
	v, err := w.Open(ctx, "crashed")
	if err != nil {
		t.Fatal(err)
	}
	mustDo(t, os.WriteFile(filepath.Join(v.Dir(), "half"), []byte("x"), 0o644))
	w.runs.RUnlock() // the server "crashed" with the view open

	w2, err := Open(w.Dir(), w.opts)
	if err != nil {
		t.Fatal(err)
	}
	sweepKeepsPrecious(t, w2)
	if _, err := os.Stat(filepath.Join(w.Dir(), "half")); err == nil {
		t.Error("a crashed run's change was merged")
	}
}

// A server killed inside mountRun, after the idmapped bind of the workspace
// and before the overlay, leaves runs/<id>/lower mounted (seen in
// TestLifecycleKillAtRandomPoints): Sweep unmounts it, and never removes
// anything through it.
func TestSweepRemovesALeftoverLowerBind(t *testing.T) {
	needRoot(t)
	ctx := t.Context()
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	mustDo2(t)(w.Write(ctx, "precious", []byte("keep me")))
	lower := filepath.Join(w.runsDir(), "killed", "lower")
	mustDo(t, os.MkdirAll(lower, 0o700))
	mustDo(t, unix.Mount(w.Dir(), lower, "", unix.MS_BIND, ""))
	t.Cleanup(func() { unix.Unmount(lower, unix.MNT_DETACH) })
	sweepKeepsPrecious(t, w)
}

// sweepKeepsPrecious sweeps w: the runs dir must end empty and the file
// "precious" must still read "keep me".
func sweepKeepsPrecious(t *testing.T, w *Workspace) {
	t.Helper()
	ctx := t.Context()
	if err := w.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(w.runsDir()); len(ents) != 0 {
		t.Errorf("Sweep left %v", ents)
	}
	if got, _ := w.Read(ctx, "precious", 0, 0); string(got.Data) != "keep me" {
		t.Errorf("Sweep damaged the workspace: %q", got.Data)
	}
}

func TestReplaceRefusedDuringRun(t *testing.T) {
	needRoot(t)
	ctx := t.Context()
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	v, err := w.Open(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	err = w.Replace(ctx, func(string, *os.Root) error { return nil }, nil)
	if !errors.Is(err, ErrBusy) {
		t.Errorf("Replace during a run = %v, want ErrBusy", err)
	}
	v.Close(ctx)
	if err := w.Replace(ctx, func(string, *os.Root) error { return nil }, nil); err != nil {
		t.Errorf("Replace after the run = %v", err)
	}
}

// BenchmarkViewNoChange: opening and closing a run's view that changes
// nothing, with the files the sandbox's own (the workspace given to the
// sandbox uid) and with them the workspace owner's (an idmapped layer).
func BenchmarkViewNoChange(b *testing.B) {
	needRoot(b)
	for _, tc := range []struct {
		name  string
		owner Owner
	}{{"sandbox-owned", sandboxOwner}, {"idmapped", Owner{UID: 4242, GID: 4242}}} {
		b.Run(tc.name, func(b *testing.B) {
			base := b.TempDir()
			w, err := Open(filepath.Join(base, "ws"), Options{StateDir: filepath.Join(base, "state"), Sandbox: &sandboxOwner, Owner: tc.owner})
			if err != nil {
				b.Fatal(err)
			}
			if (w.idmap != nil) != (tc.owner != sandboxOwner) {
				b.Fatalf("idmapped = %v", w.idmap != nil)
			}
			for i := range 1000 {
				w.Write(b.Context(), fmt.Sprintf("d%d/f%d", i%10, i), []byte("data"))
			}
			b.ResetTimer()
			for i := range b.N {
				v, err := w.Open(b.Context(), fmt.Sprintf("bench-%d", i))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := v.Close(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A run that changed nothing skips the merge; what it reports must be what
// the merge of an empty upper dir reports.
func TestNoChangesIsAnEmptyMerge(t *testing.T) {
	w := newWS(t, Options{})
	if err := os.WriteFile(filepath.Join(w.Dir(), "kept.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	upper := t.TempDir()
	if empty, err := isEmptyDir(upper); !empty || err != nil {
		t.Fatalf("isEmptyDir(empty) = %v, %v", empty, err)
	}
	got, want := noChanges(), w.merge(t.Context(), "run1", upper)
	want.MergeMS = got.MergeMS
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fast path reports %+v, the merge %+v", got, want)
	}
	if err := os.WriteFile(filepath.Join(upper, "new.txt"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if empty, err := isEmptyDir(upper); empty || err != nil {
		t.Errorf("isEmptyDir(one file) = %v, %v", empty, err)
	}
}
