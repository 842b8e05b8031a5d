package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// keptWorkspace hands out views that record whether the runtime said their
// writers are gone (store/workspace keeps such a view for the next run).
type keptWorkspace struct {
	dir    string
	opened func(ctx context.Context) // called when a view opens
	gone   *atomic.Bool
	closed *atomic.Bool
}

func (w keptWorkspace) Open(ctx context.Context, runID string) (sandpit.View, error) {
	if w.opened != nil {
		w.opened(ctx)
	}
	return goneView(w), nil
}

type goneView keptWorkspace

func (v goneView) Dir() string  { return v.dir }
func (v goneView) WritersGone() { v.gone.Store(true) }
func (v goneView) Close(context.Context) (*sandpit.Changes, error) {
	v.closed.Store(true)
	return &sandpit.Changes{}, nil
}

// The workspace keeps a run's view for the next run only when the runtime
// says no process of the run is left to write through it: after the run's
// sandbox exited, never after an error, when it may still be alive (review
// 2026-12-01, L3). Warm (pooled) and cold runs.
func TestRunSaysWritersGoneOnlyAfterExit(t *testing.T) {
	for _, pool := range []int{0, 1} {
		r := newRuntime(t, withPool(pool, time.Minute))
		for _, tc := range []struct {
			name     string
			cancel   bool // the run's context ends while its view opens: an error
			wantGone bool
		}{
			{name: "exited", wantGone: true},
			{name: "error", cancel: true},
		} {
			t.Run(tc.name+map[int]string{0: "/cold", 1: "/warm"}[pool], func(t *testing.T) {
				if pool > 0 {
					waitReady(t, r, "python", 1)
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				w := keptWorkspace{dir: t.TempDir(), gone: new(atomic.Bool), closed: new(atomic.Bool)}
				if tc.cancel {
					w.opened = func(context.Context) { cancel() }
				}
				res, err := r.Run(ctx, sandpit.Request{Language: "python", Code: "print('ok')", Workspace: w})
				if tc.cancel != (err != nil) {
					t.Fatalf("Run: %+v, %v", res, err)
				}
				if !w.closed.Load() {
					t.Fatal("the view was not closed")
				}
				if got := w.gone.Load(); got != tc.wantGone {
					t.Errorf("WritersGone said = %v, want %v", got, tc.wantGone)
				}
			})
		}
	}
}
