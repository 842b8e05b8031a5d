package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolve checks Resolve's guarantee on arbitrary input: it fails with a
// PathError, or returns a path inside the root that goes through no symlink.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"", ".", "a", "../x", "/etc/passwd", "a/../../x", "link/etc", "/workspace/a", "/workspace/../etc", "a\x00b", "dir/./../dir/f", "données/✓"} {
		f.Add(s)
	}
	root := f.TempDir()
	w, err := Open(filepath.Join(root, "ws"), Options{})
	if err != nil {
		f.Fatal(err)
	}
	os.MkdirAll(filepath.Join(w.Dir(), "dir", "sub"), 0o755)
	os.Symlink("/", filepath.Join(w.Dir(), "link"))
	os.Symlink("../../..", filepath.Join(w.Dir(), "dir", "up"))
	f.Fuzz(func(t *testing.T, p string) {
		got, err := w.Resolve(p)
		if err != nil {
			var pe *PathError
			if !errors.As(err, &pe) {
				t.Fatalf("Resolve(%q) error %v is not a *PathError", p, err)
			}
			return
		}
		rel, err := filepath.Rel(w.Dir(), got)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
			t.Fatalf("Resolve(%q) = %q, outside %q", p, got, w.Dir())
		}
		q := w.Dir()
		for _, part := range strings.Split(rel, "/") {
			q = filepath.Join(q, part)
			fi, err := os.Lstat(q)
			if err != nil {
				break
			}
			if fi.Mode()&os.ModeSymlink != 0 {
				t.Fatalf("Resolve(%q) = %q goes through symlink %q", p, got, q)
			}
		}
	})
}
