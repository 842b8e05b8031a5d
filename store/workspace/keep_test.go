package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// settle waits out the racy window after the test's own writes, so that
// the next view can be fingerprinted (keep.go).
func settle() { time.Sleep(keepRacyWindow + 20*time.Millisecond) }

// everythingRacy makes every entry count as just changed until the test
// ends: a check that fresh entries are refused then holds however long the
// host takes between the write and the fingerprint.
func everythingRacy(t *testing.T) {
	old := keepRacyWindow
	keepRacyWindow = 24 * time.Hour
	t.Cleanup(func() { keepRacyWindow = old })
}

func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), " "+dir+" ")
}

// A session's next call takes the view its last call left only when that
// view is indistinguishable from a fresh one; every change to the
// workspace, or through the parked view, makes it mount another.
func TestKeeperReusesOnlyUnchangedViews(t *testing.T) {
	needRoot(t)
	for _, spare := range []bool{false, true} {
		for _, owner := range []Owner{sandboxOwner, {UID: 4242, GID: 4343}} {
			for _, tc := range []struct {
				name string
				// during runs in the first call's view; between runs after
				// it closed, with the parked view's dir.
				during  func(t *testing.T, w *Workspace, view string)
				between func(t *testing.T, w *Workspace, parked string)
				reused  bool
				// check looks at the second call's view.
				check func(t *testing.T, view string)
			}{
				{name: "nothing changed", reused: true},
				{
					name:    "write_file",
					between: func(t *testing.T, w *Workspace, _ string) { mustDo2(t)(w.Write(t.Context(), "b.txt", []byte("b"))) },
					check:   wantFile("b.txt", "b"),
				},
				{
					name: "a host edit of the same size",
					between: func(t *testing.T, w *Workspace, _ string) {
						mustDo(t, os.WriteFile(filepath.Join(w.Dir(), "a.txt"), []byte("A"), 0o644))
					},
					check: wantFile("a.txt", "A"),
				},
				{
					// The overlay cached the failed lookup: only a fresh
					// one shows the file another run brought.
					name: "another run's file after a failed lookup",
					during: func(t *testing.T, _ *Workspace, view string) {
						if _, err := os.Stat(filepath.Join(view, "c.txt")); err == nil {
							t.Fatal("c.txt exists before the other run")
						}
					},
					between: func(t *testing.T, w *Workspace, _ string) {
						v, err := w.Open(t.Context(), "other")
						mustDo(t, err)
						mustDo(t, os.WriteFile(filepath.Join(v.Dir(), "c.txt"), []byte("c"), 0o644))
						ch, err := v.Close(t.Context())
						mustDo(t, err)
						if !slices.Equal(ch.Created, []string{"c.txt"}) {
							t.Fatalf("other run created %v", ch.Created)
						}
					},
					check: wantFile("c.txt", "c"),
				},
				{
					name: "a restore",
					between: func(t *testing.T, w *Workspace, _ string) {
						mustDo(t, w.Replace(t.Context(), func(stage string, _ *os.Root) error {
							return os.WriteFile(filepath.Join(stage, "r.txt"), []byte("r"), 0o644)
						}, nil))
					},
					check: func(t *testing.T, view string) {
						wantFile("r.txt", "r")(t, view)
						if _, err := os.Stat(filepath.Join(view, "a.txt")); err == nil {
							t.Error("a.txt, gone with the restore, is still in the view")
						}
					},
				},
				{
					// A process the session left running writes through
					// the parked view: discarded, as when a view is released
					// under it.
					name: "a write through the parked view",
					between: func(t *testing.T, _ *Workspace, parked string) {
						mustDo(t, os.WriteFile(filepath.Join(parked, "late.txt"), []byte("late"), 0o644))
					},
					check: func(t *testing.T, view string) {
						if _, err := os.Stat(filepath.Join(view, "late.txt")); err == nil {
							t.Error("a write through the parked view shows in the next call's view")
						}
					},
				},
			} {
				name := tc.name
				if owner != sandboxOwner {
					name = "idmapped/" + name
				}
				if spare {
					name = "runs/" + name
				} else {
					name = "session/" + name
				}
				t.Run(name, func(t *testing.T) {
					ctx := t.Context()
					w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: owner})
					if (w.idmap != nil) != (owner != sandboxOwner) {
						testenv.Skip(t, fmt.Sprintf("idmapped mounts unavailable here (idmapped = %v)", w.idmap != nil))
					}
					mustDo2(t)(w.Write(ctx, "a.txt", []byte("a")))
					settle()
					// A session's keeper, or the workspace's own for runs.
					var k interface {
						Open(context.Context, string) (sandpit.View, error)
					} = w
					if !spare {
						sk := w.NewKeeper()
						defer sk.Release()
						k = sk
					}
					v1, err := k.Open(ctx, "call-1")
					mustDo(t, err)
					first := v1.Dir()
					if tc.during != nil {
						tc.during(t, w, first)
					}
					writersGone(v1)
					ch, err := v1.Close(ctx)
					mustDo(t, err)
					if len(ch.Created)+len(ch.Modified)+len(ch.Deleted) != 0 {
						t.Fatalf("first call changed %+v", ch)
					}
					if !mounted(t, first) {
						t.Fatal("a call that changed nothing did not keep its view")
					}
					if tc.between != nil {
						tc.between(t, w, first)
					}
					v2, err := k.Open(ctx, "call-2")
					mustDo(t, err)
					if got := v2.Dir() == first; got != tc.reused {
						t.Errorf("view reused = %v, want %v", got, tc.reused)
					}
					if !tc.reused && mounted(t, first) {
						t.Error("the parked view was not released")
					}
					if tc.check != nil {
						tc.check(t, v2.Dir())
					} else {
						wantFile("a.txt", "a")(t, v2.Dir())
					}
					_, err = v2.Close(ctx)
					mustDo(t, err)
					w.Close()
				})
			}
		}
	}
}

// writersGone says, as the runtime does once a run's sandbox exited, that
// nothing writes through v any more (the spare keeps only such views).
func writersGone(v sandpit.View) {
	if g, ok := v.(interface{ WritersGone() }); ok {
		g.WritersGone()
	}
}

func wantFile(name, data string) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != data {
			t.Errorf("%s in the view = %q, %v; want %q", name, b, err, data)
		}
	}
}

// A call that changes something is merged, and its view is not kept.
func TestKeeperMergesChangesAndKeepsNothing(t *testing.T) {
	needRoot(t)
	ctx := t.Context()
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	settle()
	k := w.NewKeeper()
	defer k.Release()
	v1, err := k.Open(ctx, "call-1")
	mustDo(t, err)
	first := v1.Dir()
	mustDo(t, os.WriteFile(filepath.Join(first, "out.txt"), []byte("out"), 0o644))
	ch, err := v1.Close(ctx)
	mustDo(t, err)
	if !slices.Equal(ch.Created, []string{"out.txt"}) {
		t.Fatalf("created %v, want [out.txt]", ch.Created)
	}
	if mounted(t, first) {
		t.Error("the view of a call that changed the workspace stays mounted")
	}
	wantFile("out.txt", "out")(t, w.Dir())
	settle()
	v2, err := k.Open(ctx, "call-2")
	mustDo(t, err)
	if v2.Dir() == first {
		t.Error("a released view was handed out again")
	}
	wantFile("out.txt", "out")(t, v2.Dir())
	v2.Close(ctx)
}

// An entry changed within the racy window cannot be fingerprinted: a
// change in the same clock tick might not show, so the view is not kept.
func TestKeeperRefusesRacyWorkspace(t *testing.T) {
	needRoot(t)
	everythingRacy(t)
	ctx := t.Context()
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	k := w.NewKeeper()
	defer k.Release()
	mustDo2(t)(w.Write(ctx, "fresh.txt", []byte("x")))
	v1, err := k.Open(ctx, "call-1")
	mustDo(t, err)
	first := v1.Dir()
	v1.Close(ctx)
	if mounted(t, first) {
		t.Error("a view fingerprinted right after a change was kept")
	}
}

// Release unmounts the parked view and removes its directory; a view open
// at that moment is released when it closes, never parked.
func TestKeeperRelease(t *testing.T) {
	needRoot(t)
	ctx := t.Context()
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	settle()
	k := w.NewKeeper()
	releasedWhileOpen(t, w, k.Open, k.Release, "Release")
	// Another keeper: its parked view goes with Release.
	k2 := w.NewKeeper()
	v3, err := k2.Open(ctx, "call-3")
	mustDo(t, err)
	third := v3.Dir()
	v3.Close(ctx)
	if !mounted(t, third) {
		t.Fatal("not parked")
	}
	k2.Release()
	if mounted(t, third) {
		t.Error("Release left the parked view mounted")
	}
	if ents, _ := os.ReadDir(w.runsDir()); len(ents) != 0 {
		t.Errorf("run dirs left after Release: %v", ents)
	}
}

var _ sandpit.ViewKeeper = (*keeper)(nil)

// A workspace too big to fingerprint cheaply gets a fresh view per call,
// as runs do.
func TestKeeperSkipsBigWorkspaces(t *testing.T) {
	needRoot(t)
	ctx := t.Context()
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	for i := range keepMaxEntries + 1 {
		mustDo2(t)(w.Write(ctx, fmt.Sprintf("d%d/f%d", i%8, i), []byte("x")))
	}
	settle()
	k := w.NewKeeper()
	defer k.Release()
	v, err := k.Open(ctx, "call-1")
	mustDo(t, err)
	dir := v.Dir()
	v.Close(ctx)
	if mounted(t, dir) {
		t.Errorf("a view of a workspace past %d entries was kept", keepMaxEntries)
	}
}

// Runs share the workspace's spare view; Close releases it, and views
// closed afterwards are released too.
func TestWorkspaceCloseReleasesTheSpare(t *testing.T) {
	needRoot(t)
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	settle()
	releasedWhileOpen(t, w, w.Open, w.Close, "Close")
}

// releasedWhileOpen opens a view, closes it (it must stay mounted, kept),
// opens the next (it must be the kept one), releases while that one is
// open, then closes it: nothing may stay mounted or in the runs dir.
func releasedWhileOpen(t *testing.T, w *Workspace, open func(context.Context, string) (sandpit.View, error), release func(), what string) {
	t.Helper()
	ctx := t.Context()
	v1, err := open(ctx, "call-1")
	mustDo(t, err)
	first := v1.Dir()
	writersGone(v1)
	v1.Close(ctx)
	if !mounted(t, first) {
		t.Fatal("a call that changed nothing left no kept view")
	}
	v2, err := open(ctx, "call-2")
	mustDo(t, err)
	if v2.Dir() != first {
		t.Fatal("the kept view was not reused")
	}
	release()
	v2.Close(ctx)
	if mounted(t, first) {
		t.Errorf("a view closed after %s is still mounted", what)
	}
	ents, err := os.ReadDir(w.runsDir())
	mustDo(t, err)
	if len(ents) != 0 {
		t.Errorf("run dirs left after %s: %v", what, ents)
	}
}

// The fingerprint sees every kind of change to the tree, refuses trees
// past keepMaxEntries (also one flat directory written on the host, which
// the workspace's count does not know of), and refuses fresh entries.
func TestFingerprint(t *testing.T) {
	w := newWS(t, Options{})
	for _, p := range []string{"a.txt", "d/b.txt", "d/e/c.txt"} {
		mustDo(t, os.MkdirAll(filepath.Join(w.Dir(), filepath.Dir(p)), 0o755))
		mustDo(t, os.WriteFile(filepath.Join(w.Dir(), p), []byte("x"), 0o644))
	}
	func() {
		old := keepRacyWindow
		defer func() { keepRacyWindow = old }()
		keepRacyWindow = 24 * time.Hour // "just now", however slow the host
		if fp := w.fingerprint(); fp.ok {
			t.Error("a tree changed just now was fingerprinted")
		}
	}()
	settle()
	base := w.fingerprint()
	if !base.ok {
		t.Fatal("no fingerprint of a settled tree")
	}
	if again := w.fingerprint(); again != base {
		t.Fatal("two fingerprints of an unchanged tree differ")
	}
	for _, change := range []struct {
		name string
		do   func(root string) error
	}{
		{"same-size edit deep down", func(r string) error { return os.WriteFile(filepath.Join(r, "d/e/c.txt"), []byte("y"), 0o644) }},
		{"chmod", func(r string) error { return os.Chmod(filepath.Join(r, "a.txt"), 0o600) }},
		{"new empty dir", func(r string) error { return os.Mkdir(filepath.Join(r, "d/new"), 0o755) }},
		{"remove", func(r string) error { return os.Remove(filepath.Join(r, "d/b.txt")) }},
		{"symlink", func(r string) error { return os.Symlink("/etc/passwd", filepath.Join(r, "link")) }},
	} {
		settle()
		before := w.fingerprint()
		mustDo(t, change.do(w.Dir()))
		settle()
		if after := w.fingerprint(); !after.ok || after == before {
			t.Errorf("%s: fingerprint ok=%v, unchanged=%v", change.name, after.ok, after == before)
		}
	}
	flat := filepath.Join(w.Dir(), "flat")
	mustDo(t, os.Mkdir(flat, 0o755))
	for i := range keepMaxEntries + 10 {
		mustDo(t, os.WriteFile(filepath.Join(flat, fmt.Sprint(i)), nil, 0o644))
	}
	settle()
	if fp := w.fingerprint(); fp.ok {
		t.Errorf("a tree past %d entries was fingerprinted", keepMaxEntries)
	}
}

// The workspace's spare view is handed to the next run, whatever sandbox
// that run gets: a run's view is kept for it only when the caller says no
// process of the run can write through it any more (WritersGone: its
// sandbox exited). A run that ended in an error (a dead shim, a sandbox
// that did not die after SIGKILL) may have left writers behind: its view is
// released, so their writes never land in the next run's view after the
// "upper is empty" check (review 2026-12-01, L3). A session's own keeper
// parks without it: its next call is the same sandbox's, by design.
func TestSpareKeepsOnlyViewsWhoseWritersAreGone(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name    string
		session bool // a session's keeper, not the spare
		gone    bool // WritersGone before Close
		reused  bool
	}{
		{name: "run with writers maybe alive"},
		{name: "run with writers gone", gone: true, reused: true},
		{name: "session call", session: true, reused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
			if !w.Isolated() {
				t.Fatal("overlay views unavailable as root")
			}
			mustDo2(t)(w.Write(ctx, "a.txt", []byte("a")))
			settle()
			open := w.Open
			if tc.session {
				k := w.NewKeeper()
				defer k.Release()
				open = k.Open
			}
			v1, err := open(ctx, "run-1")
			mustDo(t, err)
			first := v1.Dir()
			if tc.gone {
				writersGone(v1)
			}
			_, err = v1.Close(ctx)
			mustDo(t, err)
			if got := mounted(t, first); got != tc.reused {
				t.Errorf("view kept mounted after Close = %v, want %v", got, tc.reused)
			}
			v2, err := open(ctx, "run-2")
			mustDo(t, err)
			if got := v2.Dir() == first; got != tc.reused {
				t.Errorf("next view reused = %v, want %v", got, tc.reused)
			}
			_, err = v2.Close(ctx)
			mustDo(t, err)
		})
	}
}
