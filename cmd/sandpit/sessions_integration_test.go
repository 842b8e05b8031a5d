package main

// Sessions, live output, cancellation and background runs, end to end: a
// real `sandpit serve` driven over stdio by mcp-go's client. Timings are
// logged, and bounded only generously (a shared, loaded CI host).

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd"
	"github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/mcp"
)

func callOn(t *testing.T, c *client.Client, tool string, args map[string]any) *mcpgo.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	var req mcpgo.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return res
}

func structured[T any](t *testing.T, r *mcpgo.CallToolResult) T {
	t.Helper()
	var out T
	if r.IsError {
		t.Fatalf("tool error: %s", text(r))
	}
	b, _ := json.Marshal(r.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return out
}

func sessionCall(t *testing.T, c *client.Client, session, code string, extra ...any) mcp.RunCodeResult {
	t.Helper()
	args := map[string]any{"language": "python", "code": code, "session": session}
	for i := 0; i+1 < len(extra); i += 2 {
		args[extra[i].(string)] = extra[i+1]
	}
	return runResult(t, callOn(t, c, "run_code", args))
}

// State is kept across calls; two sessions see neither each other's
// variables nor /tmp; list_sessions, sandbox://sessions and
// get_sandbox_metrics show them with their memory; close_session ends one.
func TestMCPSessions(t *testing.T) {
	s := newLifecycleStore(t)
	srv, _ := s.start(t)
	c := srv.client

	r := sessionCall(t, c, "a", "import os\nx = 1\nopen('/tmp/a-only', 'w').write('a')")
	if r.Status != "success" || r.Session == nil || !r.Session.New {
		t.Fatalf("first call: %+v", r)
	}
	r = sessionCall(t, c, "a", "x += 1\nprint('x', x)")
	if r.Stdout != "x 2\n" || r.Session.New || r.Session.Call != 2 {
		t.Fatalf("second call: %+v", r)
	}
	r = sessionCall(t, c, "a", "x += 1\n{'x': x, 'tmp': os.path.exists('/tmp/a-only')}")
	if r.Value != "{'x': 3, 'tmp': True}" || r.Session.Call != 3 {
		t.Fatalf("third call: value %q, %+v", r.Value, r.Session)
	}
	if txt := text(callOn(t, c, "run_code", map[string]any{"language": "python", "session": "a", "code": "x"})); !strings.Contains(txt, "--- value ---\n| 3\n") {
		t.Errorf("text of a value: %q", txt)
	}
	r = sessionCall(t, c, "b", "import os\n('x' in globals(), os.path.exists('/tmp/a-only'))")
	if r.Value != "(False, False)" {
		t.Fatalf("session b sees a: %q", r.Value)
	}
	// Files a session call writes land in the workspace like any run's.
	r = sessionCall(t, c, "b", "open('from-b.txt', 'w').write('b')")
	if r.Files == nil || len(r.Files.Created) != 1 || r.Files.Created[0] != "from-b.txt" {
		t.Fatalf("workspace changes: %+v", r.Files)
	}
	// A figure left open at the end of a call comes back as an image, as a
	// notebook shows it; a workspace file run by path runs in the
	// session's namespace.
	res := callOn(t, c, "run_code", map[string]any{"language": "python", "session": "b", "code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('from a session')"})
	images := 0
	for _, block := range res.Content {
		if _, ok := block.(mcpgo.ImageContent); ok {
			images++
		}
	}
	if r := runResult(t, res); r.Status != "success" || images != 1 || r.Files == nil || len(r.Files.Created) != 1 || r.Files.Created[0] != "figure-1.png" {
		t.Fatalf("figure: %d images, %+v\n%s", images, r, text(res))
	}
	callOn(t, c, "write_file", map[string]any{"path": "lib.py", "content": "def double(v):\n    return 2 * v\nloaded = True\n"})
	if r := runResult(t, callOn(t, c, "run_code", map[string]any{"language": "python", "session": "b", "path": "lib.py"})); r.Status != "success" {
		t.Fatalf("run lib.py in the session: %+v", r)
	}
	if r := sessionCall(t, c, "b", "double(21) if loaded else None"); r.Value != "42" {
		t.Fatalf("after running lib.py: %+v", r)
	}
	list := structured[mcp.SessionsResult](t, callOn(t, c, "list_sessions", map[string]any{}))
	if len(list.Sessions) != 2 || list.Sessions[0].Name != "a" || list.Sessions[0].Calls != 4 || list.Sessions[0].MemoryBytes == 0 {
		t.Fatalf("list_sessions: %+v", list)
	}
	for _, si := range list.Sessions {
		t.Logf("session %s: memory %d KiB (peak %d KiB)", si.Name, si.MemoryBytes>>10, si.MemoryPeakBytes>>10)
	}
	m := structured[mcp.MetricsResult](t, callOn(t, c, "get_sandbox_metrics", map[string]any{}))
	if m.Sessions == nil || m.Sessions.Open != 2 || m.Sessions.MemoryBytes == 0 {
		t.Fatalf("metrics sessions: %+v", m.Sessions)
	}
	rr, err := c.ReadResource(t.Context(), mcpgo.ReadResourceRequest{Params: mcpgo.ReadResourceParams{URI: "sandbox://sessions"}})
	if err != nil || len(rr.Contents) != 1 || !strings.Contains(rr.Contents[0].(mcpgo.TextResourceContents).Text, `"name": "b"`) {
		t.Fatalf("sandbox://sessions: %v %+v", err, rr)
	}
	undo := callOn(t, c, "undo_last_run", map[string]any{})
	if !strings.Contains(text(undo), "sessions keep what their calls left in memory") {
		t.Errorf("undo_last_run does not say memory stays: %s", text(undo))
	}
	closed := structured[mcp.CloseSessionResult](t, callOn(t, c, "close_session", map[string]any{"name": "a"}))
	if closed.Closed.Name != "a" {
		t.Fatalf("close_session: %+v", closed)
	}
	if res := callOn(t, c, "close_session", map[string]any{"name": "a"}); !res.IsError {
		t.Errorf("closing it again: %s", text(res))
	}
	r = sessionCall(t, c, "a", "'x' in globals()")
	if r.Value != "False" || !r.Session.New || !strings.Contains(r.Session.Previous, "closed") {
		t.Fatalf("a after close: %q %+v", r.Value, r.Session)
	}
}

// An idle session ends by itself; the next call starts afresh and says so.
func TestMCPSessionIdleExpiry(t *testing.T) {
	s := newLifecycleStore(t)
	srv, _ := s.start(t, "--session-idle", "2s")
	sessionCall(t, srv.client, "i", "v = 1")
	deadline := time.Now().Add(testenv.Patience)
	for {
		list := structured[mcp.SessionsResult](t, callOn(t, srv.client, "list_sessions", map[string]any{}))
		if len(list.Sessions) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session still open: %+v", list.Sessions)
		}
		time.Sleep(200 * time.Millisecond)
	}
	r := sessionCall(t, srv.client, "i", "'v' in globals()")
	if r.Value != "False" || !strings.Contains(r.Session.Previous, "idle") {
		t.Fatalf("after expiry: %q %+v", r.Value, r.Session)
	}
}

// A call past its timeout is interrupted and the session goes on; a call
// that runs out of memory loses the session and says what it held.
func TestMCPSessionTimeoutAndOOM(t *testing.T) {
	s := newLifecycleStore(t)
	srv, _ := s.start(t, "--memory-mb", "128")
	c := srv.client
	sessionCall(t, c, "t", "import time\ntotal = 10")
	t0 := time.Now()
	// 10 s: 'working' must be printed before the timeout, on any host.
	r := sessionCall(t, c, "t", "print('working', flush=True)\ntime.sleep(600)", "timeout_seconds", 10)
	t.Logf("timeout 10 s → result after %s", time.Since(t0))
	if r.Status != "timeout" || !strings.Contains(r.Stderr, "KeyboardInterrupt") || r.Stdout != "working\n" {
		t.Fatalf("timeout: %+v", r)
	}
	r = sessionCall(t, c, "t", "total + 1")
	if r.Status != "success" || r.Value != "11" || r.Session.New {
		t.Fatalf("after the interrupt: %+v", r)
	}
	r = sessionCall(t, c, "t", "hog = []\nwhile True: hog.append(bytearray(16 << 20))", "timeout_seconds", 60)
	if r.Status != "session_lost" || !r.Session.Lost || !r.Usage.OOMKilled || !strings.Contains(r.Session.LostReason, "memory") {
		t.Fatalf("oom: %+v %+v", r, r.Session)
	}
	if !strings.Contains(strings.Join(r.Session.LostNames, " "), "total") {
		t.Errorf("lost names %v lack total", r.Session.LostNames)
	}
	r = sessionCall(t, c, "t", "'total' in globals()")
	if r.Value != "False" || !r.Session.New {
		t.Fatalf("after the loss: %+v", r)
	}
}

// A call with a progressToken gets notifications/progress with its output
// so far while it runs, at most every 250 ms; its result is unchanged.
func TestMCPProgress(t *testing.T) {
	s := newLifecycleStore(t)
	srv, _ := s.start(t)
	type note struct {
		at       time.Time
		progress float64
		message  string
	}
	var mu sync.Mutex
	var notes []note
	listen(t, srv)
	srv.client.OnNotification(func(n mcpgo.JSONRPCNotification) {
		if n.Method != "notifications/progress" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		p, _ := n.Params.AdditionalFields["progress"].(float64)
		m, _ := n.Params.AdditionalFields["message"].(string)
		if tok := n.Params.AdditionalFields["progressToken"]; tok != "tok-1" {
			t.Errorf("progress token %v", tok)
		}
		notes = append(notes, note{time.Now(), p, m})
	})
	for _, session := range []string{"", "p"} {
		t.Run("session="+session, func(t *testing.T) {
			mu.Lock()
			notes = nil
			mu.Unlock()
			var req mcpgo.CallToolRequest
			req.Params.Name = "run_code"
			args := map[string]any{"language": "python", "code": "import time\nfor i in range(6):\n    print('step', i, flush=True)\n    time.sleep(0.5)"}
			if session != "" {
				args["session"] = session
			}
			req.Params.Arguments = args
			req.Params.Meta = &mcpgo.Meta{ProgressToken: "tok-1"}
			res, err := srv.client.CallTool(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			done := time.Now()
			r := runResult(t, res)
			if r.Status != "success" || r.Stdout != "step 0\nstep 1\nstep 2\nstep 3\nstep 4\nstep 5\n" {
				t.Fatalf("result: %+v", r)
			}
			mu.Lock()
			defer mu.Unlock()
			var before []note
			for _, n := range notes {
				if n.at.Before(done) {
					before = append(before, n)
				}
			}
			if len(before) < 2 {
				t.Fatalf("%d progress notifications before the result: %+v", len(before), notes)
			}
			sawStep := false
			for i, n := range before {
				t.Logf("progress %.3f: %q", n.progress, n.message)
				if strings.Contains(n.message, "step 1") {
					sawStep = true
				}
				if i > 0 && n.progress-before[i-1].progress < 0.249 {
					t.Errorf("progress %.3f then %.3f: closer than 250 ms", before[i-1].progress, n.progress)
				}
			}
			if !sawStep {
				t.Errorf("no progress message has the output so far")
			}
		})
	}
}

// notifications/cancelled for a run in flight kills its sandbox well before
// its own timeout, and the history records it as cancelled with its output
// so far. A cancelled session call is interrupted and its session lives on.
func TestMCPCancel(t *testing.T) {
	s := newLifecycleStore(t)
	// The runs' own timeout is 10 minutes, far past every wait below: what
	// ends them is the cancel, however slow the host.
	srv, _ := s.start(t, "--pool=0", "--max-timeout", "10m")
	inst := srv.instanceOf(t)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		var req mcpgo.CallToolRequest
		req.Params.Name = "run_code"
		// The program names itself once it has printed, so the cancel
		// below comes after the print however slow the host (a fixed
		// pause did not, under CI's parallel packages).
		req.Params.Arguments = map[string]any{"language": "python", "code": "print('started', flush=True)\nopen('/proc/self/comm', 'w').write('sandpit-spin')\nwhile True: pass", "timeout_seconds": 600}
		_, err := srv.client.CallTool(ctx, req)
		errc <- err
	}()
	waitRunning(t, s, inst)
	testenv.WaitProcessNamed(t, "sandpit-spin")
	t0 := time.Now()
	cancel() // mcp-go's client sends notifications/cancelled
	<-errc
	var gone time.Duration
	for {
		if left := leftovers(t, s, inst); len(containersIn(left)) == 0 {
			gone = time.Since(t0)
			break
		}
		if time.Since(t0) > testenv.Patience {
			t.Fatalf("the cancelled run's sandbox is still there: %v", leftovers(t, s, inst))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("cancel → sandbox gone: %s (the run's own timeout: 600 s)", gone)
	// The client stopped waiting at its cancel; the server records the run
	// once its sandbox is destroyed, which may be after the container is
	// gone from containerd's list.
	h := cancelledRuns(t, srv, 1)
	rec := structured[mcp.RunRecord](t, callOn(t, srv.client, "get_run", map[string]any{"id": h.Runs[0].ID}))
	if !strings.Contains(rec.StdoutHead, "started") {
		t.Errorf("cancelled run's output: %q", rec.StdoutHead)
	}

	// A session call: interrupted, the session lives on.
	sessionCall(t, srv.client, "s", "n = 0")
	ctx, cancel = context.WithCancel(t.Context())
	go func() {
		var req mcpgo.CallToolRequest
		req.Params.Name = "run_code"
		// It names itself once n has grown, so that the cancel comes
		// after that however slow the host (a 300 ms pause did not
		// promise it).
		req.Params.Arguments = map[string]any{"language": "python", "session": "s", "code": "import time\nn += 1\nopen('/proc/self/comm', 'w').write('sandpit-sloop')\nwhile True:\n    n += 1\n    time.sleep(0.01)", "timeout_seconds": 600}
		_, err := srv.client.CallTool(ctx, req)
		errc <- err
	}()
	testenv.WaitProcessNamed(t, "sandpit-sloop")
	t0 = time.Now()
	cancel()
	<-errc
	var r mcp.RunCodeResult
	for {
		// The interrupted call may still be finishing: busy until it has.
		res := callOn(t, srv.client, "run_code", map[string]any{"language": "python", "session": "s", "code": "n > 0"})
		if !res.IsError {
			r = runResult(t, res)
			break
		}
		if time.Since(t0) > testenv.Patience {
			t.Fatalf("session still busy: %s", text(res))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("cancel → session call interrupted and the session free again: %s", time.Since(t0))
	if r.Value != "True" || r.Session.New {
		t.Fatalf("after the cancelled call: %+v", r)
	}
	cancelledRuns(t, srv, 2)
}

// cancelledRuns waits (bounded) until the history holds want cancelled runs.
func cancelledRuns(t *testing.T, srv *serveProc, want int) mcp.HistoryResult {
	t.Helper()
	deadline := time.Now().Add(testenv.Patience)
	for {
		h := structured[mcp.HistoryResult](t, callOn(t, srv.client, "get_execution_history", map[string]any{"status": "cancelled"}))
		if len(h.Runs) == want {
			return h
		}
		if len(h.Runs) > want || time.Now().After(deadline) {
			t.Fatalf("history of cancelled runs: %d, want %d: %+v", len(h.Runs), want, h)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// listen makes the client deliver notifications to its handlers (the
// lifecycle helper starts only the transport).
func listen(t *testing.T, srv *serveProc) {
	if err := srv.client.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func containersIn(left []string) []string {
	var out []string
	for _, l := range left {
		if strings.HasPrefix(l, "container ") {
			out = append(out, l)
		}
	}
	return out
}

// A background run returns its id at once; get_run shows it running with
// its output so far, then its result; subscribers of sandbox://runs/{id}
// hear when it ends; cancel_run stops another.
func TestMCPBackgroundRun(t *testing.T) {
	s := newLifecycleStore(t)
	srv, _ := s.start(t)
	c := srv.client
	updated := make(chan string, 8)
	listen(t, srv)
	c.OnNotification(func(n mcpgo.JSONRPCNotification) {
		if n.Method == "notifications/resources/updated" {
			uri, _ := n.Params.AdditionalFields["uri"].(string)
			updated <- uri
		}
	})
	t0 := time.Now()
	start := runResult(t, callOn(t, c, "run_code", map[string]any{"language": "python", "background": true,
		"code": "import time\nfor i in range(4):\n    print('part', i, flush=True)\n    time.sleep(0.5)\nprint('done')"}))
	t.Logf("background run_code answered in %s", time.Since(t0))
	if start.Status != "running" || !start.Background || start.ID == "" {
		t.Fatalf("background start: %+v", start)
	}
	uri := "sandbox://runs/" + start.ID
	// This client speaks protocol 2026-07-28: subscriptions/listen.
	stop, err := c.ListenAsync(t.Context(), mcpgo.SubscriptionFilter{ResourceSubscriptions: []string{uri}}, func(err error) { t.Errorf("listen: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	sawRunning := false
	var final mcp.RunRecord
	for deadline := time.Now().Add(testenv.Patience); ; {
		rec := structured[mcp.RunRecord](t, callOn(t, c, "get_run", map[string]any{"id": start.ID}))
		if rec.Status != "running" {
			final = rec
			break
		}
		if strings.Contains(rec.StdoutHead, "part 0") {
			sawRunning = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running: %+v", rec)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !sawRunning || final.Status != "success" || !strings.HasSuffix(final.StdoutHead, "part 3\ndone\n") {
		t.Fatalf("saw running with output: %v; final %+v", sawRunning, final)
	}
	select {
	case got := <-updated:
		if got != uri {
			t.Errorf("updated %q, want %q", got, uri)
		}
	case <-time.After(testenv.Patience):
		t.Errorf("no notifications/resources/updated for %s", uri)
	}

	// Cancelled once it runs (it names itself), not after a fixed second
	// in which a loaded host may not have started it.
	long := runResult(t, callOn(t, c, "run_code", map[string]any{"language": "python", "background": true, "timeout_seconds": 60, "code": "open('/proc/self/comm', 'w').write('sandpit-bgspin')\nwhile True: pass"}))
	testenv.WaitProcessNamed(t, "sandpit-bgspin")
	rec := structured[mcp.RunRecord](t, callOn(t, c, "cancel_run", map[string]any{"id": long.ID}))
	if rec.Status != "cancelled" {
		t.Fatalf("cancel_run: %+v", rec)
	}
}

// After kill -9 of its server, a session's sandbox ends by itself (its
// REPL sees its stdin close), long before its age limit.
func TestMCPSessionDiesWithServer(t *testing.T) {
	s := newLifecycleStore(t)
	srv, _ := s.start(t, "--pool=0")
	inst := srv.instanceOf(t)
	sessionCall(t, srv.client, "k", "k = 1")
	if n := runningSandboxes(t, s, inst); n != 1 {
		t.Fatalf("%d running sandboxes, want the session's", n)
	}
	t0 := time.Now()
	srv.cmd.Process.Kill()
	srv.waitExit(t, 10*time.Second)
	for runningSandboxes(t, s, inst) > 0 {
		if time.Since(t0) > testenv.Patience { // its age limit is 4 hours
			t.Fatalf("the session's sandbox still runs %v after its server died", testenv.Patience)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("session sandbox stopped %s after its server was killed", time.Since(t0))
}

// runningSandboxes counts instance's sandboxes whose task is running.
func runningSandboxes(t *testing.T, s lifecycleStore, instance string) int {
	t.Helper()
	c, ctx := containerdClient(t, s.addr)
	defer c.Close()
	ctrs, err := c.Containers(ctx, s.owned(instance))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ctr := range ctrs {
		if task, err := ctr.Task(ctx, nil); err == nil {
			if st, err := task.Status(ctx); err == nil && st.Status == containerd.Running {
				n++
			}
		}
	}
	return n
}

// Server exit (EOF on stdin) closes every session and cancels background
// runs (recorded as cancelled): nothing is left.
func TestMCPExitClosesSessions(t *testing.T) {
	s := newLifecycleStore(t)
	srv, _ := s.start(t)
	inst := srv.instanceOf(t)
	sessionCall(t, srv.client, "one", "a = 1")
	sessionCall(t, srv.client, "two", "b = 2")
	// Closed once it runs (it names itself), not after a fixed second.
	bg := runResult(t, callOn(t, srv.client, "run_code", map[string]any{"language": "python", "background": true, "timeout_seconds": 60, "code": "import time\nprint('bg', flush=True)\nopen('/proc/self/comm', 'w').write('sandpit-bgexit')\ntime.sleep(60)"}))
	testenv.WaitProcessNamed(t, "sandpit-bgexit")
	srv.stdin.Close()
	took := srv.waitExit(t, 30*time.Second)
	t.Logf("exit with 2 sessions and a background run: %s", took)
	assertNothingLeft(t, s, inst, 10*time.Second)
	db, err := sql.Open("sqlite3", filepath.Join(s.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var status string
	if err := db.QueryRow(`SELECT status FROM runs WHERE id = ?`, bg.ID).Scan(&status); err != nil || status != "cancelled" {
		t.Errorf("background run at exit: %q %v", status, err)
	}
}

// `sandpit run` shows the program's output as it is written, not at the end.
func TestRunStreamsOutput(t *testing.T) {
	addr := testenv.Containerd(t)
	// The program sleeps 20 s between its lines: the first must arrive
	// while it still runs. (Timing the gap between the first line and the
	// exit failed when a loaded host delivered the line late.)
	cmd := exec.Command(binPath, "run", "--address", addr, "--no-start", "--state-dir", filepath.Join(t.TempDir(), "state"), "--timeout", "2m",
		"-l", "python", "import time\nprint('first', flush=True)\ntime.sleep(20)\nprint('second')")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	rd := bufio.NewReader(out)
	line, err := rd.ReadString('\n')
	first := time.Since(t0)
	if err != nil || line != "first\n" {
		t.Fatalf("first line %q: %v", line, err)
	}
	// Still running (not a zombie): the line came before the end.
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	_, fields, _ := strings.Cut(string(stat), ") ")
	running := fields != "" && fields[0] != 'Z'
	rest, _ := io.ReadAll(rd)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("first line after %s, exit after %s", first, time.Since(t0))
	if !running {
		t.Errorf("the first line came only when sandpit run had exited (state %.1q)", fields)
	}
	if string(rest) != "second\n" {
		t.Errorf("after the first line: %q, want the second", rest)
	}
}

// A session keeps its call's workspace view between calls when the call
// changed nothing (store/workspace/keep.go); every change to the workspace
// in between — write_file, a host edit of the same size, another run's
// file after the session's failed lookup of it, an undo — must show in
// the next call, and the kept view must go with the server.
func TestMCPSessionSeesWorkspaceChanges(t *testing.T) {
	s := newLifecycleStore(t)
	srv, _ := s.start(t)
	inst := srv.instanceOf(t)
	c := srv.client
	callOn(t, c, "write_file", map[string]any{"path": "a.txt", "content": "1"})
	// Past the racy window: entries changed in the last 50 ms are not
	// fingerprinted, and the view would not be kept at all.
	time.Sleep(200 * time.Millisecond)
	const probe = "import os\n(open('a.txt').read(), os.path.exists('n.txt'), os.path.exists('m.txt'))"
	for i := range 3 {
		if r := sessionCall(t, c, "ws", probe); r.Value != "('1', False, False)" {
			t.Fatalf("call %d: %q (%s)", i+1, r.Value, r.Stderr)
		}
	}
	// Single-use runs share the workspace's spare view the same way.
	runProbe := func() string {
		r := runResult(t, callOn(t, c, "run_code", map[string]any{"language": "python", "code": "import os\nprint" + strings.TrimPrefix(probe, "import os\n")}))
		return strings.TrimSpace(r.Stdout)
	}
	for i := range 2 {
		if got := runProbe(); got != "1 False False" {
			t.Fatalf("run %d: %q", i+1, got)
		}
	}
	callOn(t, c, "write_file", map[string]any{"path": "n.txt", "content": "n"})
	if got := runProbe(); got != "1 True False" {
		t.Fatalf("a run after write_file: %q", got)
	}
	if r := sessionCall(t, c, "ws", probe); r.Value != "('1', True, False)" {
		t.Fatalf("after write_file: %q", r.Value)
	}
	time.Sleep(200 * time.Millisecond)
	sessionCall(t, c, "ws", probe)
	if err := os.WriteFile(filepath.Join(s.dir, "workspace", "a.txt"), []byte("2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := sessionCall(t, c, "ws", probe); r.Value != "('2', True, False)" {
		t.Fatalf("after a host edit: %q", r.Value)
	}
	time.Sleep(200 * time.Millisecond)
	sessionCall(t, c, "ws", probe)
	if r := runResult(t, callOn(t, c, "run_code", map[string]any{"language": "python", "code": "open('m.txt', 'w').write('m')"})); r.Status != "success" {
		t.Fatalf("run: %+v", r)
	}
	if r := sessionCall(t, c, "ws", probe); r.Value != "('2', True, True)" {
		t.Fatalf("after another run's file: %q", r.Value)
	}
	// The kept view predates a run that the undo takes back: the
	// workspace's content is then what the view showed, but not the same
	// tree (a restore swaps the root).
	time.Sleep(200 * time.Millisecond)
	const probeU = "import os\nos.listdir('.')"
	before := sessionCall(t, c, "ws", probeU).Value
	if r := runResult(t, callOn(t, c, "run_code", map[string]any{"language": "python", "code": "open('u.txt', 'w').write('u')"})); r.Status != "success" {
		t.Fatalf("run: %+v", r)
	}
	if res := callOn(t, c, "undo_last_run", map[string]any{}); res.IsError {
		t.Fatalf("undo: %s", text(res))
	}
	if r := sessionCall(t, c, "ws", probeU); r.Status != "success" || r.Value != before {
		t.Fatalf("after undo: %q (%s), want %q", r.Value, r.Stderr, before)
	}
	srv.stdin.Close()
	srv.waitExit(t, 30*time.Second)
	assertNothingLeft(t, s, inst, 10*time.Second)
}
