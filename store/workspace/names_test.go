package workspace

import (
	"errors"
	"os"
	"testing"
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
