package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// slowWorkspace takes delay to open a view, as recording the undo state of a
// large workspace does (BeforeRun hashes what changed).
type slowWorkspace struct {
	dir   string
	delay time.Duration
}

func (w slowWorkspace) Open(ctx context.Context, runID string) (sandpit.View, error) {
	select {
	case <-time.After(w.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return plainView{w.dir}, nil
}

type plainView struct{ dir string }

func (v plainView) Dir() string { return v.dir }
func (v plainView) Close(context.Context) (*sandpit.Changes, error) {
	return &sandpit.Changes{}, nil
}

// TestWorkspaceOpenIsNotRunTime: the deadline started before the workspace
// view was opened, so a slow open (0.9 s after a run wrote 200 MiB) was
// charged to the program, and a quick program was reported as a timeout
// (security review M8). The timeout now starts when the sandbox gets the
// request; the open is reported apart.
func TestWorkspaceOpenIsNotRunTime(t *testing.T) {
	r := newRuntime(t)
	// The program needs far less than its timeout, on any host: 2 s was
	// within reach of a cold start at load 12. The open takes longer.
	const timeout, delay = 15 * time.Second, 20 * time.Second
	res := run(t, r, sandpit.Request{
		Language:  "python",
		Code:      "print('ok')",
		Timeout:   timeout,
		Workspace: slowWorkspace{dir: t.TempDir(), delay: delay},
	})
	if res.Status != sandpit.StatusSuccess || res.Stdout != "ok\n" {
		t.Errorf("status %s, stdout %q; want success: the program needs far less than its %s", res.Status, res.Stdout, timeout)
	}
	if res.WorkspaceOpenMS < delay.Milliseconds() {
		t.Errorf("workspace_open_ms = %d, want at least %d", res.WorkspaceOpenMS, delay.Milliseconds())
	}
	if res.DurationMS >= delay.Milliseconds() {
		t.Errorf("duration_ms = %d includes the workspace open (%d ms)", res.DurationMS, res.WorkspaceOpenMS)
	}
}
