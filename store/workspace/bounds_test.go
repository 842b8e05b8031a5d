package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/logring"
)

// Regression tests for the bounds a run's write-back keeps (security review
// 2026-11-30: M5, M6, H3, L2; issue 12 items 1, 2, 5 and 6). Each drives a
// real tmpfs and overlay as root, as a run would.

// openRun opens a view for a "run" whose program the test plays itself.
func openRun(t *testing.T, w *Workspace, id string) sandpit.View {
	t.Helper()
	needRoot(t)
	if !w.Isolated() {
		t.Fatal("overlay views unavailable as root")
	}
	v, err := w.Open(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	// A failed test must not leave mounts behind (Close runs once).
	t.Cleanup(func() { v.Close(context.Background()) })
	return v
}

// mkdirChain makes levels nested directories named name under dir with
// relative mkdirat/openat, as a program can (no PATH_MAX limit), and returns
// the relative path of the deepest.
func mkdirChain(t *testing.T, dir, name string, levels int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range levels {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		nfd, err := unix.Openat(fd, name, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		fd = nfd
	}
	// A file at the bottom, to be dropped with its directory.
	f, err := unix.Openat(fd, "bottom.txt", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err == nil {
		unix.Close(f)
	}
	unix.Close(fd)
}

// asMap is Changes as the model reads it (JSON), so tests see every field.
func asMap(t *testing.T, ch any) map[string]any {
	t.Helper()
	b, err := json.Marshal(ch)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func jsonSize(t *testing.T, v any) int {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

func num(m map[string]any, k string) int {
	f, _ := m[k].(float64)
	return int(f)
}

// diskBytes is the disk space the regular files under dir take (allocated
// blocks, not apparent size).
func diskBytes(t *testing.T, dir string) (disk, apparent int64) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			disk += fi.Sys().(*syscall.Stat_t).Blocks * 512
			apparent += fi.Size()
		}
		return nil
	})
	return disk, apparent
}

func exists(w *Workspace, p string) bool {
	_, err := os.Lstat(filepath.Join(w.Dir(), p))
	return err == nil
}

// TestMergeDeepTree: a tree deeper than PATH_MAX below the host's upper dir
// (issue 12 item 1, review M5). The merge used to build host paths, fail
// with ENAMETOOLONG half-way (entries sorted after the deep one lost), and
// return an error re-wrapped at every level, naming host paths. Now the
// deep part is dropped and reported, everything else is merged, and nothing
// the model reads names a host path.
func TestMergeDeepTree(t *testing.T) {
	tests := []struct {
		name   string
		dir    string
		levels int
	}{
		{"25 levels of 200-byte names", strings.Repeat("d", 200), 25},
		{"2100 levels of 1-byte names", "d", 2100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			needRoot(t)
			w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
			v := openRun(t, w, "deep")
			mustDo(t, os.WriteFile(filepath.Join(v.Dir(), "a_first.txt"), []byte("1"), 0o644))
			mustDo(t, os.WriteFile(filepath.Join(v.Dir(), "z_last.txt"), []byte("2"), 0o644))
			mkdirChain(t, v.Dir(), tt.dir, tt.levels)
			ch, err := v.Close(t.Context())
			if err != nil {
				t.Fatalf("Close = %.300v (%d bytes), want the deep part dropped, not an error", err, len(err.Error()))
			}
			if !exists(w, "a_first.txt") || !exists(w, "z_last.txt") {
				t.Errorf("a_first.txt merged %v, z_last.txt merged %v: want both", exists(w, "a_first.txt"), exists(w, "z_last.txt"))
			}
			b, _ := json.Marshal(ch)
			if len(b) > 70<<10 {
				t.Errorf("Changes are %d bytes of JSON", len(b))
			}
			for _, host := range []string{w.Dir(), w.opts.StateDir, "changes/upper"} {
				if strings.Contains(string(b), host) {
					t.Errorf("Changes name the host path %s", host)
				}
			}
			m := asMap(t, ch)
			if num(m, "dropped_count") < 1 {
				t.Errorf("Changes report nothing dropped: %.400s", b)
			}
			// What was kept is reachable by the file tools: within the
			// documented depth and length.
			err = fs.WalkDir(os.DirFS(w.Dir()), ".", func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if len(p) > MaxPathBytes || strings.Count(p, "/")+1 > MaxDepth {
					return fmt.Errorf("merged %d bytes deep, %d levels", len(p), strings.Count(p, "/")+1)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			if ents, _ := os.ReadDir(w.runsDir()); len(ents) != 0 {
				t.Errorf("run directories left behind: %v", ents)
			}
		})
	}
}

// TestMergeManyFilesBoundedChanges: a run that makes thousands of files with
// long names (issue 12 item 2, review M6). The change list was unbounded
// (13 MB for 100,000 files, more than MCP clients accept); now it lists at
// most MaxListed paths in MaxListedBytes, with counts of everything.
func TestMergeManyFilesBoundedChanges(t *testing.T) {
	needRoot(t)
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	mustDo2(t)(w.Write(t.Context(), "old/keep", []byte("x")))
	v := openRun(t, w, "many")
	dir := filepath.Join(v.Dir(), strings.Repeat("p", 200), strings.Repeat("q", 200))
	mustDo(t, os.MkdirAll(dir, 0o755))
	const n = 6000
	for i := range n {
		mustDo(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%05d%s", i, strings.Repeat("f", 200))), nil, 0o644))
	}
	ch, err := v.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if l := jsonSize(t, ch); l > 70<<10 {
		t.Errorf("Changes are %d bytes of JSON, want at most about 64 KiB", l)
	}
	m := asMap(t, ch)
	if got := num(m, "created_count"); got != n {
		t.Errorf("created_count = %d, want %d", got, n)
	}
	if m["truncated"] != true {
		t.Errorf("truncated = %v, want true", m["truncated"])
	}
	if ents, _ := os.ReadDir(filepath.Join(w.Dir(), strings.Repeat("p", 200), strings.Repeat("q", 200))); len(ents) != n {
		t.Errorf("%d files merged, want %d", len(ents), n)
	}
}

// TestMergeCapsFilesPerRun: MaxFiles bounds what one run brings back; the
// rest is dropped and counted, not merged (issue 12 item 2).
func TestMergeCapsFilesPerRun(t *testing.T) {
	needRoot(t)
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner, MaxFiles: 500})
	v := openRun(t, w, "cap")
	for i := range 800 {
		if err := os.WriteFile(filepath.Join(v.Dir(), fmt.Sprintf("f%04d", i)), []byte("x"), 0o644); err != nil {
			t.Fatalf("file %d: %v (the run may create MaxFiles and then some: only the merge caps)", i, err)
		}
	}
	ch, err := v.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	m := asMap(t, ch)
	ents, _ := os.ReadDir(w.Dir())
	if len(ents) != 500 || num(m, "created_count") != 500 || num(m, "dropped_count") != 300 {
		t.Errorf("%d files merged, created_count %d, dropped_count %d; want 500, 500, 300", len(ents), num(m, "created_count"), num(m, "dropped_count"))
	}
}

// TestDeletionsPastMaxFiles: a run that made MaxFiles files and deleted
// something in a directory sorted after them still has its deletion
// applied (the directory is the workspace's, not a new entry).
func TestDeletionsPastMaxFiles(t *testing.T) {
	needRoot(t)
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner, MaxFiles: 10})
	mustDo2(t)(w.Write(t.Context(), "zzz/old.txt", []byte("old")))
	mustDo2(t)(w.Write(t.Context(), "zzz/keep.txt", []byte("keep")))
	v := openRun(t, w, "past")
	mustDo(t, os.Mkdir(filepath.Join(v.Dir(), "aaa"), 0o755))
	for i := range 20 {
		mustDo(t, os.WriteFile(filepath.Join(v.Dir(), "aaa", fmt.Sprintf("f%02d", i)), nil, 0o644))
	}
	mustDo(t, os.Mkdir(filepath.Join(v.Dir(), "new-dir"), 0o755))
	mustDo(t, os.Remove(filepath.Join(v.Dir(), "zzz", "old.txt")))
	ch, err := v.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if exists(w, "zzz/old.txt") || !exists(w, "zzz/keep.txt") || exists(w, "new-dir") {
		t.Errorf("zzz/old.txt %v, zzz/keep.txt %v, new-dir %v; want the deletion applied, keep.txt kept, new-dir dropped: %s",
			exists(w, "zzz/old.txt"), exists(w, "zzz/keep.txt"), exists(w, "new-dir"), mustJSON(ch))
	}
	if ch.CreatedCount != 9 || ch.DroppedCount != 12 || ch.DeletedCount != 1 {
		t.Errorf("created %d, dropped %d, deleted %d; want 9 (aaa takes one of the 10), 12, 1", ch.CreatedCount, ch.DroppedCount, ch.DeletedCount)
	}
}

// TestRunCanDeleteALargeDirectory: overlay whiteouts take tmpfs inodes, so
// `rm -rf` of a directory with more files than the run's inode limit failed
// with ENOSPC (issue 12 item 6). The limit now covers what the workspace
// holds.
func TestRunCanDeleteALargeDirectory(t *testing.T) {
	needRoot(t)
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner, MaxFiles: 1000})
	big := filepath.Join(w.Dir(), "big")
	mustDo(t, os.MkdirAll(big, 0o755))
	mustDo(t, os.Chown(big, int(sandboxOwner.UID), int(sandboxOwner.GID)))
	for i := range 3000 {
		f := filepath.Join(big, fmt.Sprintf("f%05d", i))
		mustDo(t, os.WriteFile(f, nil, 0o644))
		mustDo(t, os.Chown(f, int(sandboxOwner.UID), int(sandboxOwner.GID)))
	}
	w.used = -1 // files written behind its back
	v := openRun(t, w, "rmrf")
	if out, err := runAs(t, sandboxOwner, v.Dir(), "rm -rf big 2>&1 | head -3"); err != nil || out != "" {
		t.Fatalf("rm -rf big in the run: %v: %s", err, out)
	}
	ch, err := v.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if exists(w, "big") {
		t.Error("big is still in the workspace")
	}
	if m := asMap(t, ch); fmt.Sprint(m["deleted"]) != "[big/]" {
		t.Errorf("deleted = %v, want [big/]", m["deleted"])
	}
}

// TestMergeAllOrNothing: a merge that is cut short leaves the workspace as
// it was, never half-merged (issue 12 item 6).
func TestMergeAllOrNothing(t *testing.T) {
	needRoot(t)
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	mustDo2(t)(w.Write(t.Context(), "old.txt", []byte("old")))
	v := openRun(t, w, "cut")
	const n = 3000
	for i := range n {
		mustDo(t, os.WriteFile(filepath.Join(v.Dir(), fmt.Sprintf("f%05d", i)), []byte("data"), 0o644))
	}
	mustDo(t, os.Remove(filepath.Join(v.Dir(), "old.txt")))
	// Cut short soon after it starts: when the first files show in the
	// workspace or in the merge's staging directory.
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for ctx.Err() == nil {
			a, _ := os.ReadDir(w.Dir())
			b, _ := os.ReadDir(filepath.Join(w.Dir(), ".sandpit-tmp-merge-cut"))
			if len(a)+len(b) > 10 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	ch, err := v.Close(ctx)
	cancel()
	ents, _ := os.ReadDir(w.Dir())
	var visible int
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "f") {
			visible++
		}
	}
	t.Logf("Close: %d files merged, err %v", visible, err)
	switch {
	case visible == 0 && exists(w, "old.txt"):
		if m := asMap(t, ch); m["discarded"] != true || m["reason"] == "" {
			t.Errorf("a discarded merge says %v", m)
		}
	case visible == n && !exists(w, "old.txt"):
	default:
		t.Errorf("half-merged: %d of %d files, old.txt present %v", visible, n, exists(w, "old.txt"))
	}
}

// TestMergeTimeout: the copy phase has its own bound (MergeTimeout); past
// it the run's changes are discarded whole and the workspace is unchanged
// (issue 12 item 6: a merge took 31 s after a 10 s run).
func TestMergeTimeout(t *testing.T) {
	needRoot(t)
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner, MergeTimeout: time.Nanosecond})
	mustDo2(t)(w.Write(t.Context(), "old.txt", []byte("old")))
	v := openRun(t, w, "slow")
	mustDo(t, os.WriteFile(filepath.Join(v.Dir(), "new.txt"), []byte("new"), 0o644))
	mustDo(t, os.Remove(filepath.Join(v.Dir(), "old.txt")))
	ch, err := v.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Discarded || !strings.Contains(ch.Reason, "1ns") || len(ch.Created)+len(ch.Deleted) != 0 {
		t.Errorf("Changes = %s, want discarded, saying the bound", mustJSON(ch))
	}
	if exists(w, "new.txt") || !exists(w, "old.txt") {
		t.Errorf("the workspace changed: new.txt %v, old.txt %v", exists(w, "new.txt"), exists(w, "old.txt"))
	}
	if ents, _ := os.ReadDir(w.Dir()); len(ents) != 1 {
		t.Errorf("the workspace holds %v", ents)
	}
}

// TestMergeSparseFiles: sparse files cost the run's tmpfs one page each but
// were copied densely onto the host disk (review H3: 32 KiB of quota became
// 256 MiB). The merge now copies only data, and counts apparent size
// against the run's write budget (Quota by default).
func TestMergeSparseFiles(t *testing.T) {
	needRoot(t)
	const quota = 64 << 20
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner, Quota: quota})
	v := openRun(t, w, "sparse")
	for i := range 8 {
		f, err := os.Create(filepath.Join(v.Dir(), fmt.Sprintf("hole%d", i)))
		mustDo(t, err)
		_, err = f.WriteAt([]byte{byte(i + 1)}, 32<<20-1)
		mustDo(t, err)
		f.Close()
	}
	ch, err := v.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	disk, apparent := diskBytes(t, w.Dir())
	t.Logf("merged: %d bytes apparent, %d bytes on disk; changes %s", apparent, disk, mustJSON(ch))
	if disk > 1<<20 {
		t.Errorf("merged sparse files take %d bytes of disk, want the data only", disk)
	}
	if apparent > quota {
		t.Errorf("merged %d bytes of apparent size, more than the run's budget %d", apparent, quota)
	}
	m := asMap(t, ch)
	if num(m, "created_count") != 2 || num(m, "dropped_count") != 6 {
		t.Errorf("created_count %d, dropped_count %d; want 2 and 6", num(m, "created_count"), num(m, "dropped_count"))
	}
	got, err := w.Read(t.Context(), "hole1", 32<<20-1, 1)
	if err != nil || string(got.Data) != "\x02" {
		t.Errorf("last byte of hole1 = %q, %v", got.Data, err)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestRunsRespectMaxSize: runs never consulted the workspace-wide cap, so
// repeated runs grew the workspace without bound (review H3). What would
// take it past MaxSize is dropped, and the change list says so.
func TestRunsRespectMaxSize(t *testing.T) {
	needRoot(t)
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner, Quota: 1 << 20, MaxSize: 2 << 20})
	chunk := make([]byte, 900<<10)
	dropped := 0
	for i := range 6 {
		v := openRun(t, w, fmt.Sprintf("run%d", i))
		mustDo(t, os.WriteFile(filepath.Join(v.Dir(), fmt.Sprintf("blob%d", i)), chunk, 0o644))
		ch, err := v.Close(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		dropped += num(asMap(t, ch), "dropped_count")
	}
	_, apparent := diskBytes(t, w.Dir())
	if apparent > 2<<20 {
		t.Errorf("the workspace holds %d bytes after 6 runs, MaxSize is %d", apparent, 2<<20)
	}
	if dropped != 4 {
		t.Errorf("%d files reported dropped, want 4", dropped)
	}
}

// TestDroppedPathsLogBounded: the merge logged every dropped path in one
// record, which the log ring kept whole (review M6: 35 MiB).
func TestDroppedPathsLogBounded(t *testing.T) {
	needRoot(t)
	ring := logring.New(1000, slog.LevelInfo)
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner, Logger: slog.New(ring.Handler(nil))})
	v := openRun(t, w, "links")
	dir := filepath.Join(v.Dir(), strings.Repeat("p", 250), strings.Repeat("q", 250))
	mustDo(t, os.MkdirAll(dir, 0o755))
	for i := range 5000 {
		mustDo(t, os.Symlink("x", filepath.Join(dir, fmt.Sprintf("%05d%s", i, strings.Repeat("l", 240)))))
	}
	ch, err := v.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if l := jsonSize(t, ch); l > 70<<10 {
		t.Errorf("Changes are %d bytes", l)
	}
	for _, r := range ring.Records(0) {
		if l := jsonSize(t, r); l > 4<<10 {
			t.Errorf("log record %q is %d bytes of JSON", r.Message, l)
		}
	}
}

// TestMergeOpaqueNested: a directory the run removed and recreated loses
// all its old content, at every depth below it, and files rewritten at the
// same paths count as modified.
func TestMergeOpaqueNested(t *testing.T) {
	needRoot(t)
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	for _, p := range []string{"d/sub/old", "d/sub/x", "d/top", "d/gone/deep/f", "keep"} {
		mustDo2(t)(w.Write(t.Context(), p, []byte("old")))
	}
	v := openRun(t, w, "opaque")
	if out, err := runAs(t, sandboxOwner, v.Dir(), "rm -rf d && mkdir -p d/sub && echo new > d/sub/x && echo new > d/fresh"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ch, err := v.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.WalkDir(w.Dir(), func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(w.Dir(), p)
		got = append(got, rel)
		return nil
	})
	if want := ". d d/fresh d/sub d/sub/x keep"; strings.Join(got, " ") != want {
		t.Errorf("workspace = %v, want %s", got, want)
	}
	if fmt.Sprint(ch.Created, ch.Modified, ch.Deleted) != "[d/fresh] [d/sub/x] [d/gone/ d/sub/old d/top]" {
		t.Errorf("changes = %s", mustJSON(ch))
	}
}
