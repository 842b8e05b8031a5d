package shim

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v2"
)

// The shim lives as long as its server: the ids it remembers (to destroy
// only its own at exit) must not grow with every sandbox it ever made. An
// id is kept only while its container may still have state in the root.
func TestMadeForgetsWhatIsGone(t *testing.T) {
	root := t.TempDir()
	s := newService(context.Background(), root, nil, nil, slog.New(slog.DiscardHandler))
	// Creates that fail before anything exists (a bundle without a spec)
	// leave nothing to destroy.
	for _, id := range []string{"a", "b", "c"} {
		if _, err := s.Create(t.Context(), &taskAPI.CreateTaskRequest{ID: id, Bundle: t.TempDir()}); err == nil {
			t.Fatalf("create %s without a spec succeeded", id)
		}
	}
	if n := len(s.made); n != 0 {
		t.Errorf("after 3 failed creates the shim remembers %d ids, want 0", n)
	}

	tests := []struct {
		name  string
		state bool // the container's state dir is still there
		keep  bool
	}{
		{name: "destroyed: its state is gone", state: false, keep: false},
		{name: "destroy failed: its state is left, exit must still destroy it", state: true, keep: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "x" + filepath.Base(t.Name())
			s.mu.Lock()
			s.made[id] = true
			s.mu.Unlock()
			if tt.state {
				if err := os.Mkdir(filepath.Join(root, id), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			s.forget(id)
			if got := s.madeHere(id); got != tt.keep {
				t.Errorf("madeHere(%s) = %v, want %v", id, got, tt.keep)
			}
		})
	}
}
