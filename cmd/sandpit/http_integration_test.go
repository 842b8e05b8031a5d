package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/instance"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// httpServer is a `sandpit serve --listen` of a test, on a loopback port
// the kernel picked, with its own state and data dirs.
type httpServer struct {
	url      string // the MCP endpoint
	base     string // scheme://host:port
	data     string // --data-dir
	state    string
	instance string
	cmd      *exec.Cmd
	stderr   *syncBuffer
	exited   chan struct{}
}

// startHTTP starts sandpit serve --listen 127.0.0.1:0 with data (a
// --data-dir, made when "") and waits for the address it logs.
func startHTTP(t *testing.T, data string, extra ...string) *httpServer {
	t.Helper()
	return startHTTPWith(t, httpOpts{data: data}, extra...)
}

// httpOpts place a test's HTTP server: "" takes a fresh temp dir, and
// port 0.
type httpOpts struct{ data, state, listen string }

func startHTTPWith(t *testing.T, o httpOpts, extra ...string) *httpServer {
	t.Helper()
	dir := t.TempDir()
	if o.data == "" {
		o.data = filepath.Join(dir, "data")
	}
	if o.state == "" {
		o.state = filepath.Join(dir, "state")
	}
	if o.listen == "" {
		o.listen = "127.0.0.1:0"
	}
	data := o.data
	srv := &httpServer{data: data, state: o.state, instance: testenv.Instance(t),
		stderr: &syncBuffer{}, exited: make(chan struct{})}
	args := append([]string{"serve", "--listen", o.listen,
		"--address", testenv.Containerd(t), "--no-start", "--build-images=false", "--memory-mb", "256", "--timeout", "1m",
		"--instance", srv.instance, "--state-dir", srv.state, "--data-dir", data,
	}, extra...)
	srv.cmd = exec.Command(binPath, args...)
	pr, pw := io.Pipe()
	srv.cmd.Stderr = io.MultiWriter(srv.stderr, pw)
	if err := srv.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { srv.cmd.Wait(); pw.Close(); close(srv.exited) }()
	t.Cleanup(func() { srv.stop(t) })
	urlRE := regexp.MustCompile(`url=(https?://[^ ]+)/mcp`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := urlRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case srv.base = <-found:
	case <-srv.exited:
		t.Fatalf("sandpit serve --listen exited: %v\n%s", srv.cmd.ProcessState, srv.stderr.String())
	case <-time.After(testenv.Patience):
		t.Fatalf("sandpit serve --listen logged no address in %v:\n%s", testenv.Patience, srv.stderr.String())
	}
	srv.url = srv.base + "/mcp"
	return srv
}

// stop sends SIGTERM and waits for the server to exit and release its
// instance.
func (srv *httpServer) stop(t *testing.T) {
	select {
	case <-srv.exited:
	default:
		srv.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-srv.exited:
		case <-time.After(testenv.Patience):
			t.Errorf("sandpit serve --listen did not exit %v after SIGTERM", testenv.Patience)
			srv.cmd.Process.Kill()
			<-srv.exited
		}
	}
	root := filepath.Join(srv.state, "instances")
	if !testenv.Poll(testenv.Patience, func() bool { return instance.Holder(root, srv.instance) == 0 }) {
		t.Errorf("instance %s still held after the server exited", srv.instance)
	}
	if t.Failed() {
		t.Logf("server stderr:\n%s", srv.stderr.String())
	}
}

// token creates a sandpit token for tenant name in data.
func token(t *testing.T, data, name string) string {
	t.Helper()
	out, err := exec.Command(binPath, "token", "create", "--data-dir", data, name).Output()
	if err != nil {
		t.Fatalf("sandpit token create %s: %v", name, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// httpClient connects mcp-go's Streamable HTTP client with token.
func httpClient(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var init mcpgo.InitializeRequest
	init.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcpgo.Implementation{Name: "sandpit-http-e2e", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return c
}

func structuredMap(t *testing.T, r *mcpgo.CallToolResult) map[string]any {
	t.Helper()
	b, _ := json.Marshal(r.StructuredContent)
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

// readResource reads uri; it returns the text, or the error's text.
func readResource(t *testing.T, c *client.Client, uri string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	var req mcpgo.ReadResourceRequest
	req.Params.URI = uri
	res, err := c.ReadResource(ctx, req)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range res.Contents {
		if tc, ok := c.(mcpgo.TextResourceContents); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), nil
}

// Two tenants on one HTTP server: nothing of one is visible to, nameable
// by or cancellable by the other — files, runs, history, sessions,
// snapshots, background runs, resources, metrics — and another tenant's
// id is "not found" exactly as an id that never existed (issue 25).
func TestHTTPTenantsIsolated(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	ta, tb := token(t, data, "alice"), token(t, data, "bob")
	srv := startHTTP(t, data)
	alice := httpClient(t, srv.url, ta)
	bob := httpClient(t, srv.url, tb)

	// alice's state: a file, a run that wrote one, a session, a snapshot,
	// a background run still going.
	if r := call(t, alice, "write_file", map[string]any{"path": "secret.txt", "content": "alice's"}); r.IsError {
		t.Fatal(text(r))
	}
	run := runResult(t, call(t, alice, "run_code", map[string]any{"language": "python",
		"code": "open('made.txt','w').write('x'); print(open('secret.txt').read())"}))
	if run.Stdout != "alice's\n" {
		t.Fatalf("alice's run: %+v", run)
	}
	if r := runResult(t, call(t, alice, "run_code", map[string]any{"language": "python", "session": "s", "code": "v = 'alice-session'"})); r.Session == nil || !r.Session.New {
		t.Fatalf("alice's session: %+v", r)
	}
	snap := structuredMap(t, call(t, alice, "create_state_snapshot", map[string]any{"description": "alice"}))
	snapID, _ := snap["snapshot_id"].(string)
	bg := runResult(t, call(t, alice, "run_code", map[string]any{"language": "bash", "code": "sleep 50", "background": true, "timeout_seconds": 55}))
	if snapID == "" || bg.ID == "" {
		t.Fatalf("snapshot %v, background run %+v", snap, bg)
	}

	// What bob sees of a name of alice's must be what he sees of one that
	// never existed, with the name swapped.
	same := func(what, aliceText, aliceID, neverText, neverID string) {
		t.Helper()
		if strings.ReplaceAll(aliceText, aliceID, "ID") != strings.ReplaceAll(neverText, neverID, "ID") {
			t.Errorf("%s: bob told apart alice's %q from one that never existed:\n  alice's: %s\n  never:   %s", what, aliceID, aliceText, neverText)
		}
	}
	never := "0123456789abcdef"
	for _, tc := range []struct{ tool, arg, id string }{
		{"get_run", "id", run.ID},
		{"get_run", "id", bg.ID},
		{"cancel_run", "id", bg.ID},
		{"restore_state_snapshot", "snapshot_id", snapID},
		{"diff_state_snapshot", "snapshot_id", snapID},
		{"delete_state_snapshot", "snapshot_id", snapID},
	} {
		a := call(t, bob, tc.tool, map[string]any{tc.arg: tc.id})
		n := call(t, bob, tc.tool, map[string]any{tc.arg: never})
		if !a.IsError {
			t.Errorf("bob's %s of alice's %s succeeded: %s", tc.tool, tc.id, text(a))
		}
		same(tc.tool, text(a), tc.id, text(n), never)
	}
	for _, tc := range []struct{ tool, path string }{{"read_file", "secret.txt"}, {"read_file", "made.txt"}, {"delete_file", "secret.txt"}} {
		a := call(t, bob, tc.tool, map[string]any{"path": tc.path})
		n := call(t, bob, tc.tool, map[string]any{"path": "never.txt"})
		if !a.IsError {
			t.Errorf("bob's %s %s succeeded: %s", tc.tool, tc.path, text(a))
		}
		same(tc.tool, text(a), tc.path, text(n), "never.txt")
	}
	for _, uri := range []string{"sandbox://runs/" + run.ID, "sandbox://workspace/secret.txt"} {
		_, errA := readResource(t, bob, uri)
		_, errN := readResource(t, bob, strings.NewReplacer(run.ID, never, "secret.txt", "never.txt").Replace(uri))
		if errA == nil {
			t.Errorf("bob read %s", uri)
			continue
		}
		same(uri, errA.Error(), strings.TrimPrefix(strings.TrimPrefix(uri, "sandbox://runs/"), "sandbox://workspace/"), errN.Error(),
			strings.TrimPrefix(strings.TrimPrefix(strings.NewReplacer(run.ID, never, "secret.txt", "never.txt").Replace(uri), "sandbox://runs/"), "sandbox://workspace/"))
	}
	// Lists: bob's are his own.
	if l := text(call(t, bob, "list_files", map[string]any{})); strings.Contains(l, "secret") || strings.Contains(l, "made") {
		t.Errorf("bob's list_files shows alice's files: %s", l)
	}
	if h := text(call(t, bob, "get_execution_history", map[string]any{})); strings.Contains(h, run.ID) || strings.Contains(h, bg.ID) {
		t.Errorf("bob's history shows alice's runs: %s", h)
	}
	if s := text(call(t, bob, "list_state_snapshots", map[string]any{})); strings.Contains(s, snapID) {
		t.Errorf("bob's snapshots show alice's: %s", s)
	}
	if s := text(call(t, bob, "list_sessions", map[string]any{})); strings.Contains(s, `"s"`) || strings.Contains(s, "alice") {
		t.Errorf("bob's sessions show alice's: %s", s)
	}
	if r := call(t, bob, "close_session", map[string]any{"name": "s"}); !r.IsError {
		t.Errorf("bob closed alice's session: %s", text(r))
	}
	if m := text(call(t, bob, "get_sandbox_metrics", map[string]any{})); strings.Contains(m, run.ID) {
		t.Errorf("bob's metrics name alice's run: %s", m)
	}
	// The server's log (all tenants' runs) and the host's paths are no
	// tenant's to read.
	if _, err := readResource(t, bob, "sandbox://logs"); err == nil {
		t.Error("a tenant can read the server's log")
	}
	if st, err := readResource(t, bob, "sandbox://status"); err != nil || strings.Contains(st, testenv.Containerd(t)) || strings.Contains(st, srv.data) {
		t.Errorf("sandbox://status for a tenant (err %v) names host paths: %s", err, st)
	}
	// bob's session "s" is his own, fresh.
	if r := runResult(t, call(t, bob, "run_code", map[string]any{"language": "python", "session": "s", "code": "'v' in globals()"})); r.Session == nil || !r.Session.New || r.Value != "False" {
		t.Errorf("bob's session s: %+v", r)
	}
	// bob's undo takes back bob's run only.
	runResult(t, call(t, bob, "run_code", map[string]any{"language": "bash", "code": "echo b > bob.txt"}))
	if r := call(t, bob, "undo_last_run", map[string]any{}); r.IsError {
		t.Fatalf("bob's undo: %s", text(r))
	}

	// alice's world is whole: her session, files, snapshot and the
	// background run bob tried to cancel.
	if r := runResult(t, call(t, alice, "run_code", map[string]any{"language": "python", "session": "s", "code": "v"})); r.Value != "'alice-session'" {
		t.Errorf("alice's session after bob: %+v", r)
	}
	if r := call(t, alice, "read_file", map[string]any{"path": "made.txt"}); r.IsError {
		t.Errorf("alice's made.txt after bob's undo: %s", text(r))
	}
	if g := structuredMap(t, call(t, alice, "get_run", map[string]any{"id": bg.ID})); g["status"] != "running" {
		t.Errorf("alice's background run after bob's cancel_run: %v", g["status"])
	}
	if r := call(t, alice, "cancel_run", map[string]any{"id": bg.ID}); r.IsError {
		t.Errorf("alice cancelling her own run: %s", text(r))
	}
	if r := call(t, alice, "diff_state_snapshot", map[string]any{"snapshot_id": snapID}); r.IsError {
		t.Errorf("alice's snapshot after bob: %s", text(r))
	}
}

// The official Go SDK (2026-07-28, stateless) and a legacy SSE client are
// two tenants like any others: each reaches its own workspace only; one
// tenant over two transports is one tenant.
func TestHTTPGoSDKAndLegacySSE(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	tc, td := token(t, data, "carol"), token(t, data, "dave")
	srv := startHTTP(t, data)

	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	sdk := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "sandpit-e2e", Version: "1"}, nil)
	cs, err := sdk.Connect(ctx, &mcpsdk.StreamableClientTransport{Endpoint: srv.url, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerRT{tc, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatalf("go-sdk connect: %v", err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Errorf("go-sdk negotiated %s, want 2026-07-28", v)
	}
	res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: "run_code", Arguments: map[string]any{"language": "python", "code": "open('carol.txt','w').write('c'); print('carol ran')"}})
	if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcpsdk.TextContent).Text, "carol ran") {
		t.Fatalf("go-sdk run_code: %v %+v", err, res)
	}

	sse, err := client.NewSSEMCPClient(srv.base+"/sse", client.WithHeaders(map[string]string{"Authorization": "Bearer " + td}))
	if err != nil {
		t.Fatal(err)
	}
	if err := sse.Start(ctx); err != nil {
		t.Fatalf("SSE start: %v", err)
	}
	defer sse.Close()
	var init mcpgo.InitializeRequest
	init.Params.ProtocolVersion = "2024-11-05"
	init.Params.ClientInfo = mcpgo.Implementation{Name: "sandpit-e2e-sse", Version: "1"}
	if _, err := sse.Initialize(ctx, init); err != nil {
		t.Fatalf("SSE initialize: %v", err)
	}
	if r := call(t, sse, "read_file", map[string]any{"path": "carol.txt"}); !r.IsError {
		t.Errorf("dave (SSE) read carol's file: %s", text(r))
	}
	if r := runResult(t, call(t, sse, "run_code", map[string]any{"language": "bash", "code": "ls; echo dave ran"})); r.Stdout != "dave ran\n" {
		t.Errorf("dave's run over SSE sees %q", r.Stdout)
	}
	// carol over legacy SSE is carol: her file is there.
	sc, err := client.NewSSEMCPClient(srv.base+"/sse", client.WithHeaders(map[string]string{"Authorization": "Bearer " + tc}))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if _, err := sc.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	if r := call(t, sc, "read_file", map[string]any{"path": "carol.txt"}); r.IsError {
		t.Errorf("carol over SSE cannot read her own file: %s", text(r))
	}
}

type bearerRT struct {
	token string
	next  http.RoundTripper
}

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// A server killed with -9 while HTTP clients are connected and a run is in
// flight: the clients get errors, not hangs; a server started again on the
// same port and data dir serves them with their workspaces, and its
// janitor removes everything the dead one left (issue 25).
func TestHTTPKill9(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	ta, tb := token(t, data, "alice"), token(t, data, "bob")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	st := lifecycleStore{addr: testenv.Containerd(t), dir: t.TempDir()}
	st.state = filepath.Join(st.dir, "state")
	t.Cleanup(func() {
		if out, err := exec.Command(binPath, "gc", "--address", st.addr, "--no-start", "--state-dir", st.state).CombinedOutput(); err != nil {
			t.Errorf("sandpit gc after the test: %v\n%s", err, out)
		}
	})
	first := startHTTPWith(t, httpOpts{data: data, state: st.state, listen: addr})
	alice, bob := httpClient(t, first.url, ta), httpClient(t, first.url, tb)
	call(t, alice, "write_file", map[string]any{"path": "kept.txt", "content": "before the crash"})
	inflight := make(chan error, 1)
	go func() {
		var req mcpgo.CallToolRequest
		req.Params.Name = "run_code"
		req.Params.Arguments = map[string]any{"language": "python", "code": "import time\nprint('started', flush=True)\ntime.sleep(60)", "timeout_seconds": 60}
		_, err := bob.CallTool(t.Context(), req)
		inflight <- err
	}()
	waitRunning(t, st, first.instance)
	first.cmd.Process.Kill()
	<-first.exited
	select {
	case err := <-inflight:
		if err == nil {
			t.Error("bob's call in flight returned no error when the server died")
		}
	case <-time.After(testenv.Patience):
		t.Fatal("bob's call in flight hangs after the server died")
	}
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	// (Ping is no request at all in the 2026-07-28 era: list the tools.)
	if _, err := alice.ListTools(ctx, mcpgo.ListToolsRequest{}); err == nil {
		t.Error("alice's tools/list succeeded with the server dead")
	}
	before := leftovers(t, st, first.instance)
	if len(before) == 0 {
		t.Fatal("the killed server left nothing: the test cannot see a janitor work")
	}

	second := startHTTPWith(t, httpOpts{data: data, state: st.state, listen: addr})
	alice2 := httpClient(t, second.url, ta)
	if r := call(t, alice2, "read_file", map[string]any{"path": "kept.txt"}); r.IsError || !strings.Contains(text(r), "before the crash") {
		t.Errorf("alice's file after the restart: %s", text(r))
	}
	if r := runResult(t, call(t, httpClient(t, second.url, tb), "run_code", map[string]any{"language": "bash", "code": "echo again"})); r.Stdout != "again\n" {
		t.Errorf("bob after the restart: %+v", r)
	}
	assertNothingLeft(t, st, first.instance, testenv.Patience)
}

// Per-tenant quotas over HTTP: CPU time per hour, workspace size and
// sessions are each tenant's own — one tenant at its limit is refused with
// a reason while another goes on (issue 25).
func TestHTTPTenantQuotas(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	ta, tb := token(t, data, "alice"), token(t, data, "bob")
	srv := startHTTP(t, data, "--tenant-cpu-per-hour", "300ms", "--tenant-workspace-max-size", "64KiB", "--tenant-max-sessions", "1")
	alice, bob := httpClient(t, srv.url, ta), httpClient(t, srv.url, tb)

	// Sessions: alice's second is refused, bob's first is not.
	runResult(t, call(t, alice, "run_code", map[string]any{"language": "python", "session": "a", "code": "1"}))
	if r := call(t, alice, "run_code", map[string]any{"language": "python", "session": "b", "code": "1"}); !r.IsError || !strings.Contains(text(r), "sessions are open") {
		t.Errorf("alice's second session: %s", text(r))
	}
	runResult(t, call(t, bob, "run_code", map[string]any{"language": "python", "session": "a", "code": "1"}))

	// Workspace size: alice's 100 KiB file does not fit in 64 KiB.
	big := strings.Repeat("x", 100<<10)
	if r := call(t, alice, "write_file", map[string]any{"path": "big.txt", "content": big}); !r.IsError {
		t.Errorf("alice wrote 100 KiB into a 64 KiB workspace")
	}
	if r := call(t, bob, "write_file", map[string]any{"path": "small.txt", "content": "fits"}); r.IsError {
		t.Errorf("bob's small file: %s", text(r))
	}

	// CPU: alice burns a second of CPU time; her next run is refused with
	// the reason and when it frees, bob's runs go on.
	burn := "import time\nt = time.process_time()\nwhile time.process_time() - t < 1: pass\nprint('burnt')"
	if r := runResult(t, call(t, alice, "run_code", map[string]any{"language": "python", "code": burn, "timeout_seconds": 60})); r.Stdout != "burnt\n" {
		t.Fatalf("alice's burn: %+v", r)
	}
	r := call(t, alice, "run_code", map[string]any{"language": "bash", "code": "echo next"})
	if !r.IsError || !strings.Contains(text(r), "CPU time in the last hour") || !strings.Contains(text(r), "wait until") {
		t.Errorf("alice past her CPU budget: %s", text(r))
	}
	if r := runResult(t, call(t, bob, "run_code", map[string]any{"language": "bash", "code": "echo bob"})); r.Stdout != "bob\n" {
		t.Errorf("bob beside alice's spent budget: %+v", r)
	}
	// The operator's view shows both, alice with her CPU.
	out, err := exec.Command(binPath, "tenants", "--data-dir", data, "--json").Output()
	if err != nil {
		t.Fatalf("sandpit tenants: %v", err)
	}
	var reports []TenantReport
	if err := json.Unmarshal(out, &reports); err != nil {
		t.Fatalf("sandpit tenants --json: %v\n%s", err, out)
	}
	hist, err := exec.Command(binPath, "history", "--data-dir", data, "--tenant", "bob", "--json").Output()
	if err != nil || !strings.Contains(string(hist), "echo bob") || strings.Contains(string(hist), "burnt") {
		t.Errorf("sandpit history --tenant bob: %v\n%s", err, hist)
	}
	if len(reports) != 2 || reports[0].Name != "alice" || reports[0].CPUHourMS < 900 || reports[0].Runs < 2 || reports[0].TokenCreated.IsZero() || reports[1].Name != "bob" {
		t.Errorf("sandpit tenants: %+v", reports)
	}
}

// A client whose HTTP connection goes away mid-call cancels its run, as a
// stdio client's EOF does: the sandbox is killed and the run recorded as
// cancelled (issue 25).
func TestHTTPDisconnectCancelsRun(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	tok := token(t, data, "alice")
	srv := startHTTP(t, data, "--pool=0") // the run's is the only sandbox
	st := lifecycleStore{addr: testenv.Containerd(t), state: srv.state}

	post := func(ctx context.Context, session, body string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tok)
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		return http.DefaultClient.Do(req)
	}
	resp, err := post(t.Context(), "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || session == "" {
		t.Fatalf("initialize: %s, session %q", resp.Status, session)
	}
	if resp, err := post(t.Context(), session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err == nil {
		resp.Body.Close()
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		resp, err := post(ctx, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_code","arguments":{"language":"python","code":"import time\nprint('started', flush=True)\ntime.sleep(60)","timeout_seconds":60}}}`)
		if err == nil {
			io.Copy(io.Discard, resp.Body) // until the connection goes
			resp.Body.Close()
		}
		done <- err
	}()
	waitRunning(t, st, srv.instance)
	cancel() // the client goes away
	<-done
	if !testenv.Poll(testenv.Patience, func() bool { return liveTasks(t, st, srv.instance) == 0 }) {
		t.Fatal("the run's sandbox still runs after its client disconnected")
	}
	c := httpClient(t, srv.url, tok)
	if !testenv.Poll(testenv.Patience, func() bool {
		return strings.Contains(text(call(t, c, "get_execution_history", map[string]any{})), "cancelled")
	}) {
		t.Errorf("the disconnected run is not recorded as cancelled: %s", text(call(t, c, "get_execution_history", map[string]any{})))
	}
}

// A stdio server given --data-dir keeps its workspace, snapshots and
// history there (the stores' own flags still win), and refuses the HTTP
// flags without --listen.
func TestStdioDataDir(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	c := startServer(t, nil, "--address", testenv.Containerd(t), "--no-start", "--build-images=false",
		"--instance", testenv.Instance(t), "--state-dir", filepath.Join(dir, "state"), "--data-dir", data)
	if r := call(t, c, "write_file", map[string]any{"path": "here.txt", "content": "x"}); r.IsError {
		t.Fatal(text(r))
	}
	runResult(t, call(t, c, "run_code", map[string]any{"language": "bash", "code": "echo hi"}))
	for _, p := range []string{"workspace/here.txt", "history.db", "snapshots"} {
		if _, err := os.Stat(filepath.Join(data, p)); err != nil {
			t.Errorf("--data-dir: %s: %v", p, err)
		}
	}
	out, err := exec.Command(binPath, "serve", "--tls-cert", "x.pem").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--tls-cert needs --listen") {
		t.Errorf("serve --tls-cert without --listen: %v %s", err, out)
	}
}

// sandpit ui beside a running stdio server (issue 28): the pages show the
// server's history, run output and workspace as it writes them; nothing
// can be changed through them; it serves no MCP and only on loopback.
func TestUIBesideStdioServer(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	c := startServer(t, nil, "--address", testenv.Containerd(t), "--no-start", "--build-images=false",
		"--instance", testenv.Instance(t), "--state-dir", filepath.Join(dir, "state"), "--data-dir", data)
	run := runResult(t, call(t, c, "run_code", map[string]any{"language": "bash", "code": "echo '<b>from stdio</b>' > made.txt; cat made.txt"}))
	if run.Status != "success" {
		t.Fatalf("run: %+v", run)
	}
	tok := token(t, data, "me")

	if out, err := exec.Command(binPath, "ui", "--listen", "0.0.0.0:0", "--data-dir", data).CombinedOutput(); err == nil || !strings.Contains(string(out), "loopback") {
		t.Errorf("ui on 0.0.0.0: %v %s", err, out)
	}
	ui := exec.Command(binPath, "ui", "--listen", "127.0.0.1:0", "--data-dir", data)
	stderr := &syncBuffer{}
	ui.Stderr = stderr
	if err := ui.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ui.Process.Signal(syscall.SIGTERM); ui.Wait() })
	urlRE := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+)/`)
	var base string
	if !testenv.Poll(testenv.Patience, func() bool {
		m := urlRE.FindStringSubmatch(stderr.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}) {
		t.Fatalf("sandpit ui logged no address:\n%s", stderr.String())
	}
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if st, body := get("/runs"); st != 200 || !strings.Contains(body, run.ID) {
		t.Errorf("/runs: %d, lists run %s: %v", st, run.ID, strings.Contains(body, run.ID))
	}
	if st, body := get("/runs/" + run.ID); st != 200 || !strings.Contains(body, "&lt;b&gt;from stdio&lt;/b&gt;") || strings.Contains(body, "rerun") {
		t.Errorf("/runs/%s: %d; escaped output shown: %v; offers to run again: %v", run.ID, st, strings.Contains(body, "&lt;b&gt;from stdio"), strings.Contains(body, "rerun"))
	}
	if st, body := get("/workspace"); st != 200 || !strings.Contains(body, "made.txt") {
		t.Errorf("/workspace: %d\n%s", st, body)
	}
	// A run made after ui started shows too: it reads, it does not copy.
	later := runResult(t, call(t, c, "run_code", map[string]any{"language": "bash", "code": "echo later"}))
	if _, body := get("/runs"); !strings.Contains(body, later.ID) {
		t.Error("a run recorded after ui started is not listed")
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/runs/"+run.ID+"/rerun", strings.NewReader(""))
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("POST rerun through the read-only ui: %s", res.Status)
	}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	req, _ = http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(init))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if res, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "serves no MCP") {
			t.Errorf("initialize on ui: %s %s", res.Status, b)
		}
	}
	if res, err := http.Get(base + "/runs"); err == nil {
		res.Body.Close()
		if res.Request.URL.Path != "/login" {
			t.Errorf("/runs without a token ended at %s", res.Request.URL)
		}
	}
}

// A session ends with its server; the next server on the same data dir
// says so on the first call naming it (store/ledger), rather than running
// the call in a new, empty session as if nothing had been there.
func TestHTTPSessionLostAcrossRestart(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	tok := token(t, data, "alice")
	first := startHTTP(t, data)
	c := httpClient(t, first.url, tok)
	if r := runResult(t, call(t, c, "run_code", map[string]any{"language": "python", "session": "work", "code": "x = 1"})); r.Status != "success" {
		t.Fatalf("session call: %+v", r)
	}
	// A session closed by its caller is not reported lost later.
	if r := runResult(t, call(t, c, "run_code", map[string]any{"language": "python", "session": "done", "code": "y = 2"})); r.Status != "success" {
		t.Fatalf("session call: %+v", r)
	}
	if r := call(t, c, "close_session", map[string]any{"name": "done"}); r.IsError {
		t.Fatalf("close_session: %s", text(r))
	}
	first.stop(t)

	second := startHTTP(t, data)
	c2 := httpClient(t, second.url, tok)
	r := runResult(t, call(t, c2, "run_code", map[string]any{"language": "python", "session": "work", "code": "print(x)"}))
	if r.Status != "session_lost" || r.Session == nil || !strings.Contains(r.Session.LostReason, "instance "+first.instance) {
		t.Errorf("the first call naming a session of the stopped server: %+v (session %+v), want session_lost naming that server", r, r.Session)
	}
	if r := runResult(t, call(t, c2, "run_code", map[string]any{"language": "python", "session": "work", "code": "print(3)"})); r.Status != "success" || !r.Session.New {
		t.Errorf("the next call: %+v, want a new session", r)
	}
	if r := runResult(t, call(t, c2, "run_code", map[string]any{"language": "python", "session": "done", "code": "print(4)"})); r.Status != "success" || !r.Session.New {
		t.Errorf("a session closed with close_session, named again: %+v, want simply a new session", r)
	}
}
