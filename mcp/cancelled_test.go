package mcp

import (
	"context"
	"fmt"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

// earlyRunner is a run cancelled before its program starts (while its
// sandbox is created, or it waits for admission): the runtime then returns
// the cancellation as an error, with no result.
type earlyRunner struct{ started chan sandpit.Request }

func (r *earlyRunner) Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	r.started <- req
	<-ctx.Done()
	return nil, fmt.Errorf("sandbox create: %w", ctx.Err())
}

func (r *earlyRunner) Languages() []sandpit.Language { return []sandpit.Language{{Name: "python"}} }

// A run cancelled before its program started is recorded as cancelled all
// the same, whether cancel_run or the server's shutdown (its client went
// away) stopped it: cancel_run answers with its record, not "not found".
func TestEarlyCancelledRunsAreRecorded(t *testing.T) {
	for _, how := range []string{"cancel_run", "Runs.Close"} {
		t.Run(how, func(t *testing.T) {
			er := &earlyRunner{started: make(chan sandpit.Request, 1)}
			runs := NewRuns(2)
			t.Cleanup(runs.Close)
			f := newFixture(t, func(c *Config) { c.Runner, c.Runs = er, runs })
			var start RunCodeResult
			if res := f.call(t, "run_code", map[string]any{"language": "python", "code": "slow()", "background": true}, &start); res.IsError {
				t.Fatal(text(res))
			}
			<-er.started
			if how == "cancel_run" {
				var rec RunRecord
				res := f.call(t, "cancel_run", map[string]any{"id": start.ID}, &rec)
				if res.IsError || rec.Status != "cancelled" || rec.Code != "slow()" {
					t.Fatalf("cancel_run: %s", text(res))
				}
			} else {
				runs.Close()
			}
			r, err := f.db.Get(t.Context(), start.ID)
			if err != nil || r.Status != "cancelled" || r.Code != "slow()" || r.Language != "python" {
				t.Fatalf("history: %+v %v", r, err)
			}
		})
	}
}
