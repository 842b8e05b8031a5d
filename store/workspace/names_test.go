package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

// TestWriteDirectoryPathRefused: write_file("newdir/") made a regular file
// named newdir (issue 12 item 5).
func TestWriteDirectoryPathRefused(t *testing.T) {
	w := newWS(t, Options{})
	for _, p := range []string{"newdir/", "a/b/", "c/.", "d/./"} {
		if _, err := w.Write(t.Context(), p, []byte("x")); !errors.Is(err, ErrIsDir) {
			t.Errorf("Write(%q) = %v, want ErrIsDir", p, err)
		}
	}
	if ents, _ := os.ReadDir(w.Dir()); len(ents) != 0 {
		t.Errorf("the workspace holds %v", ents)
	}
}

// TestReservedTempNames: names starting with .sandpit-tmp- are sandpit's own
// temporary files, which snapshots skip and restores remove: a user file of
// that name was silently lost (review L2). The prefix is now reserved: file
// tools refuse it and a run's such files do not come back.
func TestReservedTempNames(t *testing.T) {
	w := newWS(t, Options{Sandbox: &sandboxOwner, Owner: sandboxOwner})
	ctx := t.Context()
	for _, p := range []string{".sandpit-tmp-draft.md", "notes/.sandpit-tmp-x", ".sandpit-tmp-dir/f"} {
		if _, err := w.Write(ctx, p, []byte("important")); !errors.Is(err, ErrInvalidPath) || !strings.Contains(sandpit.HintOf(err), "reserved") {
			t.Errorf("Write(%q) = %v (hint %q), want ErrInvalidPath saying the name is reserved", p, err, sandpit.HintOf(err))
		}
	}
	if os.Geteuid() != 0 {
		return
	}
	v := openRun(t, w, "tmpnames")
	mustDo(t, os.WriteFile(filepath.Join(v.Dir(), ".sandpit-tmp-mine"), []byte("x"), 0o644))
	mustDo(t, os.WriteFile(filepath.Join(v.Dir(), "ok.txt"), []byte("x"), 0o644))
	ch, err := v.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if exists(w, ".sandpit-tmp-mine") || !exists(w, "ok.txt") {
		t.Errorf("after the merge: .sandpit-tmp-mine %v, ok.txt %v", exists(w, ".sandpit-tmp-mine"), exists(w, "ok.txt"))
	}
	if !strings.Contains(mustJSON(ch), "reserved") {
		t.Errorf("Changes do not say why .sandpit-tmp-mine was dropped: %s", mustJSON(ch))
	}
}
