package shim

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// A shim exiting shares its state root with the next shim of its instance
// (a restarted server's), which may already serve from it: at exit it
// destroys only the containers it made. (The state here is not a real
// container's, so destroying one removes its dir: what is left shows what
// was spared.)
func TestDestroyLeftoversOnlyMine(t *testing.T) {
	tests := []struct {
		name string
		mine func(string) bool
		left []string
	}{
		{"at start: everything a dead shim left", nil, nil},
		{"at exit: only what this shim made", func(id string) bool { return id == "mine" }, []string{"theirs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for _, id := range []string{"mine", "theirs"} {
				if err := os.MkdirAll(filepath.Join(root, id), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			destroyLeftovers(root, tt.mine, slog.New(slog.DiscardHandler))
			entries, err := os.ReadDir(root)
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, e := range entries {
				left = append(left, e.Name())
			}
			if len(left) != len(tt.left) || len(left) > 0 && left[0] != tt.left[0] {
				t.Errorf("left %v, want %v", left, tt.left)
			}
		})
	}
}
