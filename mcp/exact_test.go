package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit"
)

// Ids are matched exactly: an id with a space added names no run, so
// cancel_run("<id> ") stops nothing, and get_run and sandbox://runs/{id}
// find nothing, whether the run is in flight or recorded.
func TestRunIDsAreExact(t *testing.T) {
	lr := newLiveRunner()
	runs := NewRuns(2)
	t.Cleanup(runs.Close)
	f := newFixture(t, func(c *Config) { c.Runner, c.Runs = lr, runs })
	var start RunCodeResult
	if res := f.call(t, "run_code", map[string]any{"language": "python", "code": "work()", "background": true}, &start); res.IsError {
		t.Fatal(text(res))
	}
	<-lr.started
	for _, id := range []string{start.ID + " ", " " + start.ID, start.ID + "\n", strings.ToUpper(start.ID)} {
		for _, tool := range []string{"get_run", "cancel_run"} {
			if res := f.call(t, tool, map[string]any{"id": id}, nil); !res.IsError {
				t.Errorf("%s(%q) of a run in flight: %s, want not found", tool, id, text(res))
			}
		}
	}
	var live RunRecord
	f.call(t, "get_run", map[string]any{"id": start.ID}, &live)
	if live.Status != "running" {
		t.Fatalf("after cancel_run of near ids: %+v, want it still running", live)
	}
	close(lr.release)
	var done RunRecord
	if res := f.call(t, "cancel_run", map[string]any{"id": start.ID}, &done); res.IsError || done.Status != "success" {
		t.Fatalf("the exact id: %s", text(res))
	}
	for _, id := range []string{start.ID + " ", " " + start.ID} {
		if res := f.call(t, "get_run", map[string]any{"id": id}, nil); !res.IsError {
			t.Errorf("get_run(%q) of a recorded run: %s, want not found", id, text(res))
		}
		req := mcpgo.ReadResourceRequest{}
		req.Params.URI = "sandbox://runs/" + id
		if _, err := f.c.ReadResource(t.Context(), req); err == nil {
			t.Errorf("sandbox://runs/%s: found, want not found", id)
		}
	}
}

// An error quotes at most the first maxQuotedRunes characters of any value
// it quotes, whichever package wrote it: a 4,000-character session name or
// id is not echoed whole.
func TestErrorsQuoteBounded(t *testing.T) {
	long := strings.Repeat("é", 4000)
	tests := []struct {
		name     string
		err      error
		max      int    // characters of error text at most
		wantHead string // what it must still show
	}{
		{"runtime's session name error", fmt.Errorf("%w: session name %q: use 1 to 64 letters", sandpit.ErrInvalidArgument, long), 300,
			`session name "` + strings.Repeat("é", maxQuotedRunes) + `"… (4000 characters): use 1 to 64 letters`},
		{"two quoted values", fmt.Errorf("%w: %q and %q", sandpit.ErrNotFound, long, long), 400, `"… (4000 characters) and "`},
		{"quoted control characters", fmt.Errorf("%w: %q", sandpit.ErrInvalidArgument, strings.Repeat("\x1b[2J\n", 1000)), 300, `"\x1b[2J\n\x1b[2J\n`},
		{"short values stay whole", fmt.Errorf("run %q: %w", "abc", sandpit.ErrNotFound), 100, `run "abc": not found`},
		{"unquoted echo", fmt.Errorf("%w: name %s is too long", sandpit.ErrInvalidArgument, long), maxErrorRunes + 100, "ééé"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := text(toolError(slog.New(slog.DiscardHandler), "run_code", tt.err))
			if n := utf8.RuneCountInString(got); n > tt.max {
				t.Errorf("error text of %d characters, want at most %d: %.200q", n, tt.max, got)
			}
			if !strings.Contains(got, tt.wantHead) {
				t.Errorf("error text %.300q lacks %q", got, tt.wantHead)
			}
		})
	}
	// Over MCP: get_run of a 4,000-character id.
	f := newFixture(t, nil)
	res := f.call(t, "get_run", map[string]any{"id": long}, nil)
	if got := text(res); !res.IsError || utf8.RuneCountInString(got) > 400 || !strings.Contains(got, "not found") {
		t.Errorf("get_run of a long id: %d characters: %.300q", utf8.RuneCountInString(got), got)
	}
}

// namedSessions is a SessionManager that records the names it is asked for.
type namedSessions struct{ closed []string }

func (s *namedSessions) Sessions() []sandpit.SessionInfo { return nil }
func (s *namedSessions) CloseSession(_ context.Context, name string) (sandpit.SessionInfo, error) {
	s.closed = append(s.closed, name)
	return sandpit.SessionInfo{Name: name}, nil
}

// Session names reach the runtime as the caller wrote them: "a " is not
// session "a" (the runtime refuses it as a name).
func TestSessionNamesAreExact(t *testing.T) {
	sessions := &namedSessions{}
	cfg := Config{Runner: &scriptedRunner{}, Sessions: sessions}
	cfg.defaults()
	for _, name := range []string{"a ", " a", "a"} {
		req, err := cfg.runRequest(RunCodeArgs{Language: "python", Code: "1", Session: name})
		if err != nil || req.Session != name {
			t.Errorf("run_code session %q: request session %q, %v", name, req.Session, err)
		}
	}
	f := newFixture(t, func(c *Config) { c.Sessions = sessions })
	f.call(t, "close_session", map[string]any{"name": "a "}, nil)
	if len(sessions.closed) != 1 || sessions.closed[0] != "a " {
		t.Errorf("close_session(%q) closed %q", "a ", sessions.closed)
	}
}
