package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/store/history"
)

// mergingRunner's first run, once cancelled, takes until merged is closed
// to end, as a run whose workspace changes are still being merged does.
// Every later run reports whether the first was in the history when it
// started.
type mergingRunner struct {
	db      *history.DB
	first   chan string // the first run's id, once it runs
	merged  chan struct{}
	later   chan error // per later run: nil if it started after the first was recorded
	firstID string
}

func (r *mergingRunner) Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	if req.Code == "first" {
		r.first <- req.ID
		<-ctx.Done()
		<-r.merged
		return &sandpit.Result{ID: req.ID, Language: req.Language, Status: sandpit.StatusCancelled, Started: time.Now(),
			Files: &sandpit.Changes{Created: []string{"a.txt"}, Modified: []string{}, Deleted: []string{}, CreatedCount: 1}}, nil
	}
	_, err := r.db.Get(context.WithoutCancel(ctx), r.firstID)
	if err != nil {
		err = fmt.Errorf("a later run started before the cancelled run ended and was recorded: %w", err)
	}
	r.later <- err
	return &sandpit.Result{ID: req.ID, Language: req.Language, Status: sandpit.StatusSuccess, Started: time.Now()}, nil
}

func (r *mergingRunner) Languages() []sandpit.Language { return []sandpit.Language{{Name: "python"}} }

// A call cancelled by the client (notifications/cancelled) goes on until
// its sandbox is gone and its workspace changes are merged; the client
// does not wait for that. The next call that could see the workspace or
// the history waits for it: a run_code sent right after the cancellation
// starts only once the cancelled run is recorded (and so merged), and a
// get_run of it answers with its record.
func TestNextCallWaitsForCancelledRun(t *testing.T) {
	db, err := history.Open(t.Context(), filepath.Join(t.TempDir(), "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	mr := &mergingRunner{db: db, first: make(chan string, 1), merged: make(chan struct{}), later: make(chan error, 4)}
	runs := NewRuns(2)
	t.Cleanup(runs.Close)
	waiting := make(chan struct{}, 8)
	runs.onSettle = func() { waiting <- struct{}{} }
	srv := NewServer(Config{Runner: mr, History: db, Runs: runs, Logger: slog.New(slog.DiscardHandler)})

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ServeStdio(ctx, srv, inR, outW, 4, 0, slog.New(slog.DiscardHandler)) }()
	replies := make(chan map[string]any, 16)
	go func() {
		r := bufio.NewReader(outR)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			var m map[string]any
			if json.Unmarshal(line, &m) == nil {
				replies <- m
			}
		}
	}()
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	reply := func(id float64) map[string]any {
		t.Helper()
		for {
			select {
			case m := <-replies:
				if m["id"] == id {
					return m
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no reply to %v", id)
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	reply(1)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_code","arguments":{"language":"python","code":"first"}}}`)
	mr.firstID = <-mr.first
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"user"}}`)
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_code","arguments":{"language":"python","code":"second"}}}`)
	// The fixed server holds the second call until the first has ended:
	// let the first end once a call waits for it. Without the wait the
	// second run starts at once and reports the first missing.
	var later error
	select {
	case <-waiting:
	case later = <-mr.later:
	}
	close(mr.merged)
	if later == nil {
		later = <-mr.later
	}
	if later != nil {
		t.Fatal(later)
	}
	if m := reply(3); m["error"] != nil {
		t.Fatalf("second call: %v", m)
	}
	send(fmt.Sprintf(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"get_run","arguments":{"id":%q}}}`, mr.firstID))
	m := reply(4)
	res, _ := m["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	if sc["status"] != "cancelled" {
		t.Fatalf("get_run of the cancelled run: %v", m)
	}
	inW.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio did not return at EOF")
	}
}
