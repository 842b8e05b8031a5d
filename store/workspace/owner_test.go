package workspace

import (
	"context"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// asUser runs fn on a thread whose filesystem ids are o's, as a sandbox
// process's are on the host; the thread is discarded afterwards.
func asUser(t *testing.T, o Owner, fn func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread dies with the goroutine
		unix.Setfsgid(int(o.GID))
		unix.Setfsuid(int(o.UID))
		errc <- fn()
	}()
	return <-errc
}

func ownerOf(t *testing.T, p string) Owner {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return Owner{UID: st.Uid, GID: st.Gid}
}

// A workspace owned by a user stays theirs: runs (the sandbox's host uid)
// can change its files and add new ones, and everything on disk belongs to
// the workspace's owner, not to the sandbox's mapped uid (lifecycle issue,
// "host-side ownership").
func TestFilesStayTheWorkspaceOwners(t *testing.T) {
	testenv.NeedRoot(t, "mounting overlays and idmapped binds")
	base := t.TempDir()
	os.Chmod(base, 0o755)
	user := Owner{UID: 4242, GID: 4343}
	sandbox := Owner{UID: 0x70000000 + 1000, GID: 0x70000000 + 1000}
	dir := filepath.Join(base, "project")
	must(t, os.MkdirAll(filepath.Join(dir, "src"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "src", "main.py"), []byte("print(1)\n"), 0o644))
	for _, p := range []string{dir, filepath.Join(dir, "src"), filepath.Join(dir, "src", "main.py")} {
		must(t, os.Lchown(p, int(user.UID), int(user.GID)))
	}
	w, err := Open(dir, Options{StateDir: filepath.Join(base, "state"), Sandbox: &sandbox, RequireOverlay: true})
	if err != nil {
		t.Fatal(err)
	}
	if w.Owner() != user {
		t.Fatalf("Owner = %v, want the directory's owner %v", w.Owner(), user)
	}
	if w.idmap == nil {
		t.Fatal("no idmapped layer: this kernel cannot keep the owner's files (the test needs Linux 5.19+)")
	}
	v, err := w.Open(context.Background(), "run1")
	if err != nil {
		t.Fatal(err)
	}
	// The view's host path runs through root-only dirs (a sandbox sees it
	// through a bind): open it as root, act below it as the sandbox user.
	root, err := os.OpenRoot(v.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	err = asUser(t, sandbox, func() error {
		// Changing the owner's file, and creating files and directories.
		if err := root.WriteFile("src/main.py", []byte("print(2)\n"), 0o644); err != nil {
			return err
		}
		if err := root.MkdirAll("out/plots", 0o755); err != nil {
			return err
		}
		return root.WriteFile("out/plots/a.csv", []byte("x\n1\n"), 0o644)
	})
	if err != nil {
		t.Fatalf("the sandbox user cannot write the owner's workspace: %v", err)
	}
	ch, err := v.Close(context.Background())
	if err != nil || ch.Discarded {
		t.Fatalf("merge: %v %+v", err, ch)
	}
	if _, err := w.Write(context.Background(), "notes.txt", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{".", "src", "src/main.py", "out", "out/plots", "out/plots/a.csv", "notes.txt"} {
		if got := ownerOf(t, filepath.Join(dir, rel)); got != user {
			t.Errorf("%s is owned by %v on the host, want the workspace owner %v", rel, got, user)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "src", "main.py")); string(b) != "print(2)\n" {
		t.Errorf("main.py = %q after the run", b)
	}
}

// Without an idmapped layer (no overlay), the sandbox could not write the
// owner's files: the workspace falls back to the sandbox's uid, as before.
func TestOwnerFallsBackWithoutOverlay(t *testing.T) {
	testenv.NeedRoot(t, "chown")
	dir := filepath.Join(t.TempDir(), "ws")
	must(t, os.Mkdir(dir, 0o755))
	sandbox := Owner{UID: 0x70000000 + 1000, GID: 0x70000000 + 1000}
	w, err := Open(dir, Options{Sandbox: &sandbox}) // no StateDir: runs bind it directly
	if err != nil {
		t.Fatal(err)
	}
	if w.Owner() != sandbox || ownerOf(t, dir) != sandbox {
		t.Errorf("owner %v, dir %v; want both %v", w.Owner(), ownerOf(t, dir), sandbox)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
