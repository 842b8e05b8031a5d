package mcp

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// liveRunner writes its output at once, then waits to be released or
// cancelled, as a long program would.
type liveRunner struct {
	started chan sandpit.Request
	release chan struct{}
	every   time.Duration // when set, writes a line this often until released
}

func newLiveRunner() *liveRunner {
	return &liveRunner{started: make(chan sandpit.Request, 8), release: make(chan struct{})}
}

func (r *liveRunner) Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	if req.WatchUsage != nil {
		req.WatchUsage(func() sandpit.Usage { return sandpit.Usage{CPUUserMS: 7, MemoryPeakBytes: 1 << 20} })
	}
	req.Output(sandpit.Stdout, []byte("hello\n"))
	r.started <- req
	var tick <-chan time.Time
	if r.every > 0 {
		t := time.NewTicker(r.every)
		defer t.Stop()
		tick = t.C
	}
	out := "hello\n"
	for i := 0; ; i++ {
		select {
		case <-tick:
			line := strings.Repeat("x", i%3) + "tick\n"
			out += line
			req.Output(sandpit.Stdout, []byte(line))
			continue
		case <-r.release:
			return &sandpit.Result{ID: req.ID, Language: req.Language, Status: sandpit.StatusSuccess, Stdout: out, Started: time.Now()}, nil
		case <-ctx.Done():
			return &sandpit.Result{ID: req.ID, Language: req.Language, Status: sandpit.StatusCancelled, Stdout: out, Started: time.Now()}, nil
		}
	}
}

func (r *liveRunner) Languages() []sandpit.Language {
	return []sandpit.Language{{Name: "python"}}
}

// A background run answers at once; get_run shows it running with its
// output so far, then its result; a subscriber of sandbox://runs/{id} is
// notified when it ends.
func TestBackgroundRun(t *testing.T) {
	for _, proto := range []string{mcpgo.LATEST_LEGACY_PROTOCOL_VERSION, mcpgo.LATEST_PROTOCOL_VERSION} {
		t.Run(proto, func(t *testing.T) { testBackgroundRun(t, proto) })
	}
}

func testBackgroundRun(t *testing.T, proto string) {
	lr := newLiveRunner()
	runs := NewRuns(2)
	t.Cleanup(runs.Close)
	f := newFixtureProto(t, proto, func(c *Config) { c.Runner, c.Runs = lr, runs })
	updated := make(chan string, 4)
	f.c.OnNotification(func(n mcpgo.JSONRPCNotification) {
		if n.Method == "notifications/resources/updated" {
			uri, _ := n.Params.AdditionalFields["uri"].(string)
			updated <- uri
		}
	})
	var start RunCodeResult
	if res := f.call(t, "run_code", map[string]any{"language": "python", "code": "work()", "background": true}, &start); res.IsError {
		t.Fatal(text(res))
	}
	if start.Status != "running" || !start.Background || start.ID == "" {
		t.Fatalf("start: %+v", start)
	}
	<-lr.started
	subscribeRun(t, f.c, proto, start.ID)
	var live RunRecord
	f.call(t, "get_run", map[string]any{"id": start.ID}, &live)
	if live.Status != "running" || live.StdoutHead != "hello\n" || live.Code != "work()" || !live.Background {
		t.Fatalf("running: %+v", live)
	}
	close(lr.release)
	select {
	case uri := <-updated:
		if uri != "sandbox://runs/"+start.ID {
			t.Fatalf("updated %s", uri)
		}
	case <-time.After(testenv.Patience):
		t.Fatal("no notifications/resources/updated")
	}
	var done RunRecord
	f.call(t, "get_run", map[string]any{"id": start.ID}, &done)
	if done.Status != "success" || done.StdoutHead != "hello\n" {
		t.Fatalf("done: %+v", done)
	}
}

// subscribeRun subscribes c to sandbox://runs/id as a client of protocol
// proto does: resources/subscribe, or a subscriptions/listen stream.
func subscribeRun(t *testing.T, c *client.Client, proto, id string) {
	t.Helper()
	uri := "sandbox://runs/" + id
	if proto != mcpgo.LATEST_PROTOCOL_VERSION {
		// The 2025 protocol's resources/subscribe, which the 2026 one replaced.
		//lint:ignore SA1019 legacy clients still send it
		if err := c.Subscribe(t.Context(), mcpgo.SubscribeRequest{Params: mcpgo.SubscribeParams{URI: uri}}); err != nil {
			t.Fatal(err)
		}
		return
	}
	acked := make(chan struct{}, 1)
	c.OnNotification(func(n mcpgo.JSONRPCNotification) {
		if n.Method == string(mcpgo.MethodNotificationSubscriptionsAcknowledged) {
			select {
			case acked <- struct{}{}:
			default:
			}
		}
	})
	stop, err := c.ListenAsync(t.Context(), mcpgo.SubscriptionFilter{ResourceSubscriptions: []string{uri}}, func(err error) { t.Errorf("listen: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	select {
	case <-acked:
	case <-time.After(testenv.Patience):
		t.Fatal("subscriptions/listen not acknowledged")
	}
}

// cancel_run stops a background run; past the limit of background runs, a
// new one is refused with the reason.
func TestCancelRunAndBackgroundLimit(t *testing.T) {
	lr := newLiveRunner()
	runs := NewRuns(1)
	t.Cleanup(runs.Close)
	f := newFixture(t, func(c *Config) { c.Runner, c.Runs = lr, runs })
	var start RunCodeResult
	f.call(t, "run_code", map[string]any{"language": "python", "code": "a", "background": true}, &start)
	<-lr.started
	res := f.call(t, "run_code", map[string]any{"language": "python", "code": "b", "background": true}, nil)
	if !res.IsError || !strings.Contains(text(res), "1 background runs are in flight") {
		t.Fatalf("over the limit: %s", text(res))
	}
	var rec RunRecord
	if res := f.call(t, "cancel_run", map[string]any{"id": start.ID}, &rec); res.IsError {
		t.Fatal(text(res))
	}
	if rec.Status != "cancelled" || rec.StdoutHead != "hello\n" {
		t.Fatalf("cancelled: %+v", rec)
	}
	if res := f.call(t, "cancel_run", map[string]any{"id": start.ID}, nil); res.IsError || !strings.Contains(text(res), "already ended") {
		t.Fatalf("cancel again: %s", text(res))
	}
}

// Close cancels background runs and waits until they are recorded.
func TestRunsCloseCancelsBackground(t *testing.T) {
	lr := newLiveRunner()
	runs := NewRuns(2)
	f := newFixture(t, func(c *Config) { c.Runner, c.Runs = lr, runs })
	var start RunCodeResult
	f.call(t, "run_code", map[string]any{"language": "python", "code": "a", "background": true}, &start)
	<-lr.started
	runs.Close()
	r, err := f.db.Get(t.Context(), start.ID)
	if err != nil || r.Status != "cancelled" {
		t.Fatalf("after Close: %+v %v", r, err)
	}
}

// A call with a progress token gets progress notifications with its newest
// output while it runs, spaced by at least progressInterval.
func TestProgressNotifications(t *testing.T) {
	lr := newLiveRunner()
	lr.every = 50 * time.Millisecond
	f := newFixture(t, func(c *Config) { c.Runner = lr })
	var mu sync.Mutex
	var progress []float64
	var messages []string
	f.c.OnNotification(func(n mcpgo.JSONRPCNotification) {
		if n.Method != "notifications/progress" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		p, _ := n.Params.AdditionalFields["progress"].(float64)
		m, _ := n.Params.AdditionalFields["message"].(string)
		progress = append(progress, p)
		messages = append(messages, m)
	})
	// The run lasts until two notifications came, the newer with a tick
	// in it (a fixed 2 s was too short for a host at load 12 to deliver
	// them).
	go func() {
		<-lr.started
		testenv.Poll(testenv.Patience, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(progress) >= 2 && strings.Contains(messages[len(messages)-1], "tick")
		})
		close(lr.release)
	}()
	req := mcpgo.CallToolRequest{}
	req.Params.Name = "run_code"
	req.Params.Arguments = map[string]any{"language": "python", "code": "loop()"}
	req.Params.Meta = &mcpgo.Meta{ProgressToken: 7}
	res, err := f.c.CallTool(t.Context(), req)
	if err != nil || res.IsError {
		t.Fatalf("%v %s", err, text(res))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) < 2 {
		t.Fatalf("progress notifications: %v", progress)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i]-progress[i-1] < progressInterval.Seconds()-0.001 {
			t.Errorf("progress %v: two closer than %s", progress, progressInterval)
		}
	}
	last := messages[len(messages)-1]
	if !strings.Contains(last, "tick") || strings.Count(last, "\n") > progressLines {
		t.Errorf("last message %q", last)
	}
}

// Without a progress token, no progress is sent.
func TestNoProgressWithoutToken(t *testing.T) {
	lr := newLiveRunner()
	lr.every = 20 * time.Millisecond
	f := newFixture(t, func(c *Config) { c.Runner = lr })
	var n int
	var mu sync.Mutex
	f.c.OnNotification(func(m mcpgo.JSONRPCNotification) {
		if m.Method == "notifications/progress" {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})
	go func() {
		<-lr.started
		time.Sleep(600 * time.Millisecond)
		close(lr.release)
	}()
	f.run(t, "python", "x")
	mu.Lock()
	defer mu.Unlock()
	if n != 0 {
		t.Fatalf("%d progress notifications without a token", n)
	}
}

func TestLineTail(t *testing.T) {
	var lt lineTail
	lt.write([]byte("a\nb\nc\nd\ne\nf\ng"))
	if got := lt.lines(); got != "c\nd\ne\nf\ng" {
		t.Fatalf("got %q", got)
	}
	lt = lineTail{}
	lt.write([]byte(strings.Repeat("é", 3000)))
	if got := lt.lines(); len(got) > progressBytes || !strings.HasPrefix(got, "é") {
		t.Fatalf("long line: %d bytes", len(got))
	}
}

// Live shows the runs in flight; CancelByPerson stops one and its record
// says a person cancelled it; cancel_run's runs say nothing of the kind.
func TestLiveAndCancelByPerson(t *testing.T) {
	lr := newLiveRunner()
	runs := NewRuns(2)
	t.Cleanup(runs.Close)
	f := newFixture(t, func(c *Config) { c.Runner, c.Runs = lr, runs })
	var a, b RunCodeResult
	f.call(t, "run_code", map[string]any{"language": "python", "code": "first()", "background": true}, &a)
	<-lr.started
	f.call(t, "run_code", map[string]any{"language": "python", "code": "second()", "background": true}, &b)
	<-lr.started
	live := runs.Live()
	if len(live) != 2 || live[0].ID != a.ID || live[1].ID != b.ID {
		t.Fatalf("Live: %+v, want %s then %s", live, a.ID, b.ID)
	}
	if l := live[0]; l.Code != "first()" || l.Language != "python" || !l.Background || l.StdoutBytes != 6 || l.Tail != "hello" || l.Stopping || l.Usage.CPUUserMS != 7 || l.Usage.MemoryPeakBytes != 1<<20 {
		t.Errorf("Live[0]: %+v", l)
	}
	found, ended, err := runs.CancelByPerson(t.Context(), a.ID, testenv.Patience)
	if err != nil || !found || !ended {
		t.Fatalf("CancelByPerson: found %v ended %v err %v", found, ended, err)
	}
	if found, _, err := runs.CancelByPerson(t.Context(), "nosuchrun", time.Second); found || err != nil {
		t.Errorf("CancelByPerson of no run: found %v err %v", found, err)
	}
	if res := f.call(t, "cancel_run", map[string]any{"id": b.ID}, nil); res.IsError {
		t.Fatal(text(res))
	}
	if live := runs.Live(); len(live) != 0 {
		t.Errorf("Live after both ended: %+v", live)
	}
	for id, want := range map[string]string{a.ID: "person", b.ID: ""} {
		r, err := f.db.Get(t.Context(), id)
		if err != nil || r.Status != "cancelled" || r.CancelledBy != want {
			t.Errorf("run %s: status %q cancelled_by %q (err %v), want cancelled by %q", id, r.Status, r.CancelledBy, err, want)
		}
	}
}
