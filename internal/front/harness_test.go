package front

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// fakeAuth knows tokens by value: a unit stand-in for the real
// authenticator (the auth package's), which this package does not test.
type fakeAuth map[string]auth.Principal

func (a fakeAuth) Authenticate(_ context.Context, r *http.Request) (auth.Principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return auth.Principal{}, auth.ErrNoCredentials
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return auth.Principal{}, auth.ErrInvalidToken
	}
	p, ok := a[tok]
	if !ok {
		return auth.Principal{}, auth.ErrInvalidToken
	}
	return p, nil
}

var testAuth = fakeAuth{
	"tok-alice": {Tenant: "alice", Scopes: auth.AllScopes, Via: "token"},
	"tok-bob":   {Tenant: "bob", Scopes: auth.AllScopes, Via: "token"},
	"tok-files": {Tenant: "carol", Scopes: []string{auth.ScopeFiles}, Via: "oauth"},
}

// tenants builds real mcp-go servers, one per tenant, with tools named
// after sandpit's (so the scope table applies):
//
//	list_supported_languages  answers the tenant its context carries
//	read_file                 same, but needs sandpit:files
//	run_code                  sends a progress notification, then blocks
//	                          until released or its context ends
type tenants struct {
	mu      sync.Mutex
	builds  map[string]int
	started chan string // tenant, when run_code starts
	ended   chan error  // run_code's context error when it ends (nil: released)
	release chan struct{}
}

func newTenants() *tenants {
	return &tenants{builds: map[string]int{}, started: make(chan string, 16), ended: make(chan error, 16), release: make(chan struct{})}
}

func (ts *tenants) Server(_ context.Context, tenant string) (*server.MCPServer, error) {
	ts.mu.Lock()
	ts.builds[tenant]++
	ts.mu.Unlock()
	s := server.NewMCPServer("test-"+tenant, "1")
	whoami := func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		p, ok := auth.FromContext(ctx)
		if !ok {
			return mcpgo.NewToolResultError("no principal"), nil
		}
		return mcpgo.NewToolResultText(p.Tenant), nil
	}
	s.AddTool(mcpgo.NewTool("list_supported_languages"), whoami)
	s.AddTool(mcpgo.NewTool("read_file"), whoami)
	s.AddTool(mcpgo.NewTool("run_code"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		if m := req.Params.Meta; m != nil && m.ProgressToken != nil {
			tok := m.ProgressToken
			server.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress",
				map[string]any{"progressToken": tok, "progress": 1, "message": "started"})
		}
		ts.started <- tenant
		select {
		case <-ts.release:
			ts.ended <- nil
			return mcpgo.NewToolResultText("released"), nil
		case <-ctx.Done():
			ts.ended <- ctx.Err()
			return nil, ctx.Err()
		}
	})
	return s, nil
}

func (ts *tenants) buildCount(tenant string) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.builds[tenant]
}

// waitStarted waits for run_code to start.
func (ts *tenants) waitStarted(t *testing.T) string {
	t.Helper()
	select {
	case who := <-ts.started:
		return who
	case <-time.After(testenv.Patience):
		t.Fatal("run_code never started")
		return ""
	}
}

// waitEnded waits for run_code to end and returns its context's error.
func (ts *tenants) waitEnded(t *testing.T) error {
	t.Helper()
	select {
	case err := <-ts.ended:
		return err
	case <-time.After(testenv.Patience):
		t.Fatal("run_code never ended")
		return nil
	}
}

// running is a front serving on loopback.
type running struct {
	f       *Front
	url     string // base URL
	addr    string
	tenants *tenants
	stop    func() error // cancels Serve and returns its error
}

// start serves a front on 127.0.0.1:0; edit changes the config first.
func start(t *testing.T, edit func(*Config)) *running {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := newTenants()
	cfg := Config{
		Addr:    ln.Addr().String(),
		Auth:    testAuth,
		Tenants: ts,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(&tlog{t}, nil))
	}
	if edit != nil {
		edit(&cfg)
	}
	f, err := New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Serve(ctx, ln) }()
	var once sync.Once
	var serveErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case serveErr = <-done:
			case <-time.After(testenv.Patience):
				serveErr = errors.New("Serve did not return")
			}
		})
		return serveErr
	}
	t.Cleanup(func() {
		close(ts.release)
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	return &running{f: f, url: scheme + "://" + ln.Addr().String(), addr: ln.Addr().String(), tenants: ts, stop: stop}
}

type tlog struct{ t *testing.T }

func (l *tlog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// post sends one JSON-RPC message to path with token (and session id, if
// any) and returns the response, body read.
func (rn *running) post(t *testing.T, path, token, session string, msg any, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, rn.url+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func rpc(id int, method string, params any) map[string]any {
	m := map[string]any{"jsonrpc": "2.0", "method": method}
	if id != 0 {
		m["id"] = id
	}
	if params != nil {
		m["params"] = params
	}
	return m
}

func callParams(tool string) map[string]any {
	return map[string]any{"name": tool, "arguments": map[string]any{}}
}

var initParams = map[string]any{
	"protocolVersion": "2025-06-18",
	"capabilities":    map[string]any{},
	"clientInfo":      map[string]any{"name": "raw", "version": "1"},
}

// initialize opens a legacy Streamable HTTP session for token and returns
// its id.
func (rn *running) initialize(t *testing.T, token string) string {
	t.Helper()
	resp, body := rn.post(t, "/mcp", token, "", rpc(1, "initialize", initParams))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize: %s %s", resp.Status, body)
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatal("initialize gave no session id")
	}
	resp, body = rn.post(t, "/mcp", token, sid, rpc(0, "notifications/initialized", nil), "Mcp-Protocol-Version", "2025-06-18")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized: %s %s", resp.Status, body)
	}
	return sid
}

// toolText returns the text of a tools/call response body, JSON or SSE.
func toolText(t *testing.T, body []byte) string {
	t.Helper()
	data := body
	if bytes.HasPrefix(body, []byte("event:")) || bytes.Contains(body, []byte("\ndata: ")) {
		// the last data line is the response
		sc := bufio.NewScanner(bytes.NewReader(body))
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				data = []byte(d)
			}
		}
	}
	var r struct {
		Result struct {
			Content []struct{ Text string } `json:"content"`
			IsError bool                    `json:"isError"`
		} `json:"result"`
		Error *struct{ Message string } `json:"error"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("response %q: %v", body, err)
	}
	if r.Error != nil {
		t.Fatalf("JSON-RPC error: %s", r.Error.Message)
	}
	if len(r.Result.Content) == 0 {
		t.Fatalf("no content in %s", body)
	}
	return fmt.Sprint(r.Result.Content[0].Text)
}
