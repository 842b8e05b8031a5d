package front

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/mcp"
)

func TestUnauthenticated(t *testing.T) {
	rn := start(t, nil)
	meta := rn.url + "/.well-known/oauth-protected-resource"
	plain := `Bearer resource_metadata="` + meta + `"`
	invalid := `Bearer error="invalid_token", resource_metadata="` + meta + `"`
	for _, path := range []string{"/mcp", "/sse", "/message?sessionId=x"} {
		for _, tc := range []struct {
			name, method, auth string
			status             int
			challenge          string
		}{
			{"no token", http.MethodPost, "", 401, plain},
			{"unknown token", http.MethodPost, "Bearer nope", 401, invalid},
			{"not bearer", http.MethodPost, "Basic YTpi", 401, invalid},
			{"GET no token", http.MethodGet, "", 401, plain},
		} {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				req, _ := http.NewRequest(tc.method, rn.url+path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
				req.Header.Set("Content-Type", "application/json")
				if tc.auth != "" {
					req.Header.Set("Authorization", tc.auth)
				}
				resp, body := do(t, req)
				if resp.StatusCode != tc.status {
					t.Fatalf("got %s %s, want %d", resp.Status, body, tc.status)
				}
				if got := resp.Header.Get("WWW-Authenticate"); got != tc.challenge {
					t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
				}
			})
		}
	}
	if n := rn.tenants.buildCount("alice") + rn.tenants.buildCount("bob"); n != 0 {
		t.Errorf("%d tenant servers built for unauthenticated requests", n)
	}
}

func TestQueryTokenRefused(t *testing.T) {
	rn := start(t, nil)
	for _, q := range []string{"access_token=tok-alice", "a=1&ACCESS_TOKEN=tok-alice", "access%5Ftoken=tok-alice"} {
		req, _ := http.NewRequest(http.MethodGet, rn.url+"/mcp?"+q, nil)
		req.Header.Set("Authorization", "Bearer tok-alice")
		resp, body := do(t, req)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "query") {
			t.Errorf("%s: got %s %s, want 400 naming the query", q, resp.Status, body)
		}
		if h := resp.Header.Get("WWW-Authenticate"); !strings.Contains(h, `error="invalid_request"`) {
			t.Errorf("%s: WWW-Authenticate %q", q, h)
		}
	}
}

func TestProtectedResourceMetadata(t *testing.T) {
	rn := start(t, func(c *Config) { c.AuthorizationServers = []string{"https://issuer.example"} })
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		req, _ := http.NewRequest(http.MethodGet, rn.url+path, nil)
		resp, body := do(t, req)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s", path, resp.Status)
		}
		var doc struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			ScopesSupported      []string `json:"scopes_supported"`
			BearerMethods        []string `json:"bearer_methods_supported"`
		}
		if err := json.Unmarshal(body, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Resource != rn.url+"/mcp" || fmt.Sprint(doc.AuthorizationServers) != "[https://issuer.example]" ||
			fmt.Sprint(doc.ScopesSupported) != fmt.Sprint(auth.AllScopes) || fmt.Sprint(doc.BearerMethods) != "[header]" {
			t.Errorf("%s: %s", path, body)
		}
	}
}

func TestTenantsCannotReachEachOthersSessions(t *testing.T) {
	rn := start(t, nil)
	sid := rn.initialize(t, "tok-alice")
	resp, body := rn.post(t, "/mcp", "tok-alice", sid, rpc(2, "tools/call", callParams("list_supported_languages")), "Mcp-Protocol-Version", "2025-06-18")
	if resp.StatusCode != 200 || toolText(t, body) != "alice" {
		t.Fatalf("alice's own session: %s %s", resp.Status, body)
	}
	// Bob presenting alice's session id: unknown, as one never made.
	resp, body = rn.post(t, "/mcp", "tok-bob", sid, rpc(2, "tools/call", callParams("list_supported_languages")), "Mcp-Protocol-Version", "2025-06-18")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob with alice's session: %s %s, want 404", resp.Status, body)
	}
	never := "mcp-session-" + strings.Repeat("A", 26)
	resp2, _ := rn.post(t, "/mcp", "tok-alice", never, rpc(2, "ping", nil), "Mcp-Protocol-Version", "2025-06-18")
	if resp2.StatusCode != http.StatusNotFound {
		t.Errorf("a session never made: %s, want 404", resp2.Status)
	}
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		req, _ := http.NewRequest(method, rn.url+"/mcp", nil)
		req.Header.Set("Authorization", "Bearer tok-bob")
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		if resp, body := do(t, req); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s by bob of alice's session: %s %s, want 404", method, resp.Status, body)
		}
	}
	// Alice's session survived bob's DELETE.
	resp, body = rn.post(t, "/mcp", "tok-alice", sid, rpc(3, "ping", nil), "Mcp-Protocol-Version", "2025-06-18")
	if resp.StatusCode != 200 {
		t.Errorf("alice after bob's DELETE: %s %s", resp.Status, body)
	}
	// Legacy SSE: bob posting to alice's stream.
	sse := openSSE(t, rn, "tok-alice")
	resp, body = rn.post(t, sse.endpoint, "tok-bob", "", rpc(1, "ping", nil))
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob posting to alice's SSE session: %s %s, want 404", resp.Status, body)
	}
	resp, body = rn.post(t, sse.endpoint, "", "", rpc(1, "ping", nil))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unauthenticated post to alice's SSE session: %s %s, want 401", resp.Status, body)
	}
	if rn.tenants.buildCount("alice") != 1 || rn.tenants.buildCount("bob") != 1 {
		t.Errorf("builds: alice %d bob %d, want one each", rn.tenants.buildCount("alice"), rn.tenants.buildCount("bob"))
	}
}

func TestScopes(t *testing.T) {
	rn := start(t, nil)
	sid := rn.initialize(t, "tok-files")
	meta := rn.url + "/.well-known/oauth-protected-resource"
	for _, tc := range []struct {
		name   string
		msg    any
		status int
		scope  string
	}{
		{"tool of another group", rpc(2, "tools/call", callParams("run_code")), 403, auth.ScopeRun},
		{"tool of its group", rpc(3, "tools/call", callParams("read_file")), 200, ""},
		{"unknown tool needs every scope", rpc(4, "tools/call", callParams("no_such_tool")), 403, strings.Join(auth.AllScopes, " ")},
		{"resource of another group", rpc(5, "resources/read", map[string]any{"uri": "sandbox://runs/1"}), 403, auth.ScopeRun},
		{"prompt of another group", rpc(6, "prompts/get", map[string]any{"name": "diagnose_validation_error"}), 403, auth.ScopeData},
		{"listing needs no scope", rpc(7, "tools/list", nil), 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rn.post(t, "/mcp", "tok-files", sid, tc.msg, "Mcp-Protocol-Version", "2025-06-18")
			if resp.StatusCode != tc.status {
				t.Fatalf("got %s %s, want %d", resp.Status, body, tc.status)
			}
			if tc.status != 403 {
				return
			}
			want := fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q, resource_metadata="%s"`, tc.scope, meta)
			if got := resp.Header.Get("WWW-Authenticate"); got != want {
				t.Errorf("WWW-Authenticate %q, want %q", got, want)
			}
			if !strings.Contains(string(body), tc.scope) {
				t.Errorf("body %s does not name %s", body, tc.scope)
			}
		})
	}
	if got := toolText(t, mustPost(t, rn, "/mcp", "tok-files", sid, rpc(8, "tools/call", callParams("read_file")))); got != "carol" {
		t.Errorf("read_file answered %q, want carol", got)
	}
	// A batch is refused whole, whatever its members.
	resp, body := rn.post(t, "/mcp", "tok-alice", "", []any{rpc(1, "ping", nil), rpc(2, "tools/call", callParams("run_code"))})
	if resp.StatusCode != 400 || !strings.Contains(string(body), "batch") || !strings.Contains(string(body), "-32600") {
		t.Errorf("batch: %s %s", resp.Status, body)
	}
}

func mustPost(t *testing.T, rn *running, path, token, sid string, msg any) []byte {
	t.Helper()
	resp, body := rn.post(t, path, token, sid, msg, "Mcp-Protocol-Version", "2025-06-18")
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %s %s", path, resp.Status, body)
	}
	return body
}

func TestMalformedJSONRPC(t *testing.T) {
	rn := start(t, nil)
	for _, body := range []string{"{not json", "", "42", `"str"`, "[1,2", "\x00\xff"} {
		req, _ := http.NewRequest(http.MethodPost, rn.url+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer tok-alice")
		resp, got := do(t, req)
		if resp.StatusCode != 400 || !strings.Contains(string(got), "-32700") {
			t.Errorf("%q: %s %s, want 400 with a parse error", body, resp.Status, got)
		}
	}
}

func TestOriginAndHost(t *testing.T) {
	rn := start(t, func(c *Config) {
		c.AllowedOrigins = []string{"https://app.example"}
		c.AllowedHosts = []string{"mcp.example"}
	})
	_, port, _ := net.SplitHostPort(rn.addr)
	for _, tc := range []struct {
		name, origin, host string
		status             int
	}{
		{"no origin", "", "", 200},
		{"own origin", rn.url, "", 200},
		{"localhost origin", "http://localhost:" + port, "", 200},
		{"configured origin", "https://app.example", "", 200},
		{"foreign origin", "https://evil.example", "", 403},
		{"null origin", "null", "", 403},
		{"loopback origin of another port", "http://localhost:1", "", 403},
		{"localhost host", "", "localhost:" + port, 200},
		{"configured host, any port", "", "mcp.example:8443", 200},
		{"rebinding host", "", "evil.example:" + port, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, rn.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer tok-alice")
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, body := do(t, req)
			if resp.StatusCode != tc.status {
				t.Errorf("got %s %s, want %d", resp.Status, body, tc.status)
			}
			if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
				r, _ := http.NewRequest(http.MethodDelete, rn.url+"/mcp", nil)
				r.Header.Set("Authorization", "Bearer tok-alice")
				r.Header.Set("Mcp-Session-Id", sid)
				do(t, r)
			}
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	rn := start(t, func(c *Config) { c.Limits.MaxBodyBytes = 1 << 10 })
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 2<<10) + `"}}`
	for _, chunked := range []bool{false, true} {
		var body io.Reader = strings.NewReader(big)
		if chunked {
			body = io.MultiReader(strings.NewReader(big)) // no length known: chunked
		}
		req, _ := http.NewRequest(http.MethodPost, rn.url+"/mcp", body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer tok-alice")
		resp, got := do(t, req)
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("chunked %v: %s %s, want 413", chunked, resp.Status, got)
		}
	}
	// Just under the bound passes.
	ok := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	req, _ := http.NewRequest(http.MethodPost, rn.url+"/mcp", strings.NewReader(ok+strings.Repeat(" ", 1<<10-len(ok))))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer tok-alice")
	if resp, got := do(t, req); resp.StatusCode != 200 {
		t.Errorf("a body of exactly the bound: %s %s", resp.Status, got)
	}
}

// rawConn opens a TCP connection to rn.
func rawConn(t *testing.T, rn *running) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", rn.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readStatus reads a response's status line from c, or returns the error
// that ended the connection.
func readStatus(c net.Conn) (string, error) {
	c.SetReadDeadline(time.Now().Add(testenv.Patience))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func TestSlowClients(t *testing.T) {
	rn := start(t, func(c *Config) {
		c.Limits.ReadHeaderTimeout = 300 * time.Millisecond
		c.Limits.BodyTimeout = 300 * time.Millisecond
		c.Limits.MaxHeaderBytes = 4 << 10
	})
	t.Run("slow header", func(t *testing.T) {
		c := rawConn(t, rn)
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nX-Slow: ", rn.addr)
		// Never finished: the server must hang up (it may answer 408 first).
		line, err := readStatus(c)
		if err == nil && !strings.Contains(line, "408") {
			t.Fatalf("got %q, want the connection closed", line)
		}
		if err != nil && !errors.Is(err, io.EOF) && !isReset(err) {
			t.Fatalf("read: %v (want EOF: the server hung up)", err)
		}
	})
	t.Run("slow body", func(t *testing.T) {
		c := rawConn(t, rn)
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer tok-alice\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"", rn.addr)
		line, err := readStatus(c)
		if err != nil || !strings.Contains(line, "408") {
			t.Fatalf("got %q %v, want 408", line, err)
		}
	})
	t.Run("header too large", func(t *testing.T) {
		c := rawConn(t, rn)
		fmt.Fprintf(c, "GET /mcp HTTP/1.1\r\nHost: %s\r\nX-Big: %s\r\n\r\n", rn.addr, strings.Repeat("x", 16<<10))
		line, err := readStatus(c)
		if err != nil || !strings.Contains(line, "431") {
			t.Fatalf("got %q %v, want 431", line, err)
		}
	})
	t.Run("a call outlives the body deadline", func(t *testing.T) {
		sid := rn.initialize(t, "tok-alice")
		type result struct {
			resp *http.Response
			body []byte
		}
		done := make(chan result, 1)
		go func() {
			resp, body := rn.post(t, "/mcp", "tok-alice", sid, rpc(2, "tools/call", callParams("run_code")), "Mcp-Protocol-Version", "2025-06-18")
			done <- result{resp, body}
		}()
		rn.tenants.waitStarted(t)
		time.Sleep(time.Second) // past BodyTimeout (300ms): a deadline left armed would fire
		rn.tenants.release <- struct{}{}
		if err := rn.tenants.waitEnded(t); err != nil {
			t.Fatalf("the call was cancelled: %v", err)
		}
		r := <-done
		if r.resp == nil {
			t.FailNow()
		}
		if r.resp.StatusCode != 200 || toolText(t, r.body) != "released" {
			t.Fatalf("%s %s", r.resp.Status, r.body)
		}
	})
}

// fire posts a message to /mcp from any goroutine.
func fire(rn *running, token, sid string, msg any) (*http.Response, []byte, error) {
	b, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, rn.url+"/mcp", strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset")
}

func TestConnectionCap(t *testing.T) {
	rn := start(t, func(c *Config) { c.Limits.MaxConns = 2 })
	held := make([]net.Conn, 2)
	for i := range held {
		held[i] = rawConn(t, rn)
		// A full exchange: the server has accepted it, and it stays open.
		fmt.Fprintf(held[i], "GET /.well-known/oauth-protected-resource HTTP/1.1\r\nHost: %s\r\n\r\n", rn.addr)
		resp, err := http.ReadResponse(bufio.NewReader(held[i]), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("held connection %d: %v %v", i, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(rn.url + "/.well-known/oauth-protected-resource")
	if err != nil {
		t.Fatalf("third connection: %v, want a 503", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third connection: %s, want 503", resp.Status)
	}
	held[0].Close()
	testenv.Eventually(t, "a connection is served once one is closed", func() bool {
		resp, err := client.Get(rn.url + "/.well-known/oauth-protected-resource")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

func TestSessionAndStreamBounds(t *testing.T) {
	rn := start(t, func(c *Config) {
		c.Limits.MaxSessionsPerTenant = 2
		c.Limits.MaxStreamsPerTenant = 2
	})
	s1 := rn.initialize(t, "tok-alice")
	rn.initialize(t, "tok-alice")
	resp, body := rn.post(t, "/mcp", "tok-alice", "", rpc(1, "initialize", initParams))
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "sessions") {
		t.Fatalf("third session: %s %s, want 429", resp.Status, body)
	}
	req, _ := http.NewRequest(http.MethodGet, rn.url+"/sse", nil)
	req.Header.Set("Authorization", "Bearer tok-alice")
	if resp, body := do(t, req); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("an SSE stream past the session bound: %s %s, want 429", resp.Status, body)
	}
	rn.initialize(t, "tok-bob") // another tenant's bound is its own
	req, _ = http.NewRequest(http.MethodDelete, rn.url+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer tok-alice")
	req.Header.Set("Mcp-Session-Id", s1)
	if resp, body := do(t, req); resp.StatusCode != 200 {
		t.Fatalf("DELETE: %s %s", resp.Status, body)
	}
	s3 := rn.initialize(t, "tok-alice")

	// Streams: two calls in flight take both slots.
	for range 2 {
		go fire(rn, "tok-alice", s3, rpc(2, "tools/call", callParams("run_code")))
		rn.tenants.waitStarted(t)
	}
	resp, body = rn.post(t, "/mcp", "tok-alice", s3, rpc(3, "ping", nil), "Mcp-Protocol-Version", "2025-06-18")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a third stream: %s %s, want 429", resp.Status, body)
	}
	resp, _ = rn.post(t, "/mcp", "tok-bob", "", rpc(1, "initialize", initParams))
	if resp.StatusCode != 200 {
		t.Fatalf("bob while alice's streams are full: %s", resp.Status)
	}
	for range 2 {
		rn.tenants.release <- struct{}{}
		rn.tenants.waitEnded(t)
	}
	testenv.Eventually(t, "a stream slot frees", func() bool {
		resp, _ := rn.post(t, "/mcp", "tok-alice", s3, rpc(4, "ping", nil), "Mcp-Protocol-Version", "2025-06-18")
		return resp.StatusCode == 200
	})
}

// TestLegacySSECallBound: a call sent as a legacy SSE message runs after
// its POST is answered, so the call itself holds a stream slot.
func TestLegacySSECallBound(t *testing.T) {
	rn := start(t, func(c *Config) { c.Limits.MaxStreamsPerTenant = 3 })
	sse := openSSE(t, rn, "tok-alice") // holds one slot
	for i, m := range []any{rpc(1, "initialize", initParams), rpc(0, "notifications/initialized", nil)} {
		if resp, body := rn.post(t, sse.endpoint, "tok-alice", "", m); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("message %d: %s %s", i, resp.Status, body)
		}
	}
	for id := 2; id <= 3; id++ { // each holds one more
		if resp, body := rn.post(t, sse.endpoint, "tok-alice", "", rpc(id, "tools/call", callParams("run_code"))); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("call %d: %s %s", id, resp.Status, body)
		}
		rn.tenants.waitStarted(t)
	}
	resp, body := rn.post(t, sse.endpoint, "tok-alice", "", rpc(4, "tools/call", callParams("run_code")))
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a call past the bound: %s %s, want 429", resp.Status, body)
	}
	rn.tenants.release <- struct{}{}
	rn.tenants.waitEnded(t)
	testenv.Eventually(t, "a finished call frees its slot", func() bool {
		resp, _ := rn.post(t, sse.endpoint, "tok-alice", "", rpc(5, "ping", nil))
		return resp.StatusCode == http.StatusAccepted
	})
}

func TestSessionIdleExpiry(t *testing.T) {
	rn := start(t, func(c *Config) { c.SessionIdle = time.Second })
	sid := rn.initialize(t, "tok-alice")
	// Polled from inside: a request would count as activity.
	testenv.Eventually(t, "the idle session is forgotten", func() bool {
		return !rn.f.tenantFor("alice").ids.known(sid)
	})
	resp, body := rn.post(t, "/mcp", "tok-alice", sid, rpc(2, "ping", nil), "Mcp-Protocol-Version", "2025-06-18")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an expired session: %s %s, want 404", resp.Status, body)
	}
}

// TestDisconnectCancels: a client that goes away mid-call cancels the
// call's context, on each transport.
func TestDisconnectCancels(t *testing.T) {
	rn := start(t, nil)
	t.Run("streamable", func(t *testing.T) {
		sid := rn.initialize(t, "tok-alice")
		c := rawConn(t, rn)
		body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_code","arguments":{}}}`
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer tok-alice\r\nMcp-Session-Id: %s\r\nMcp-Protocol-Version: 2025-06-18\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s",
			rn.addr, sid, len(body), body)
		rn.tenants.waitStarted(t)
		c.Close()
		if err := rn.tenants.waitEnded(t); !errors.Is(err, context.Canceled) {
			t.Fatalf("run_code ended with %v, want its context cancelled", err)
		}
	})
	t.Run("modern", func(t *testing.T) {
		c := rawConn(t, rn)
		body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_code","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer tok-alice\r\nMcp-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: run_code\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s",
			rn.addr, len(body), body)
		who := waitStartedOrAnswer(t, rn, c)
		if who != "alice" {
			t.Fatalf("started for %q", who)
		}
		c.Close()
		if err := rn.tenants.waitEnded(t); !errors.Is(err, context.Canceled) {
			t.Fatalf("run_code ended with %v, want its context cancelled", err)
		}
	})
	t.Run("legacy SSE", func(t *testing.T) {
		sse := openSSE(t, rn, "tok-alice")
		for i, m := range []any{rpc(1, "initialize", initParams), rpc(0, "notifications/initialized", nil), rpc(2, "tools/call", callParams("run_code"))} {
			if resp, body := rn.post(t, sse.endpoint, "tok-alice", "", m); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("message %d: %s %s", i, resp.Status, body)
			}
		}
		rn.tenants.waitStarted(t)
		sse.close()
		if err := rn.tenants.waitEnded(t); !errors.Is(err, context.Canceled) {
			t.Fatalf("run_code ended with %v, want its context cancelled", err)
		}
	})
}

// waitStartedOrAnswer waits for run_code to start, failing with the
// server's answer if it answers instead.
func waitStartedOrAnswer(t *testing.T, rn *running, c net.Conn) string {
	t.Helper()
	answered := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return
		}
		b, _ := io.ReadAll(resp.Body)
		answered <- resp.Status + " " + string(b)
	}()
	select {
	case who := <-rn.tenants.started:
		return who
	case a := <-answered:
		t.Fatalf("answered instead of running: %s", a)
	case <-time.After(testenv.Patience):
		t.Fatal("run_code never started")
	}
	return ""
}

type sseStream struct {
	endpoint string
	events   chan string // data of each message event
	close    func()
}

// openSSE opens a legacy SSE stream and reads its endpoint event.
func openSSE(t *testing.T, rn *running, token string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rn.url+"/sse", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /sse: %s %s", resp.Status, b)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("no endpoint event: %v", err)
		}
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			events := make(chan string, 64)
			go func() {
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
						select {
						case events <- d:
						default:
						}
					}
				}
			}()
			return &sseStream{endpoint: d, events: events, close: func() { cancel(); resp.Body.Close() }}
		}
	}
}

func TestShutdownCancelsCalls(t *testing.T) {
	rn := start(t, nil)
	sid := rn.initialize(t, "tok-alice")
	go func() {
		req, _ := http.NewRequest(http.MethodPost, rn.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_code","arguments":{}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer tok-alice")
		req.Header.Set("Mcp-Session-Id", sid)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	rn.tenants.waitStarted(t)
	if err := rn.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := rn.tenants.waitEnded(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("run_code ended with %v, want cancelled by the shutdown", err)
	}
}

func TestTenantSourceErrors(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("quota: %w", sandpit.ErrResourceExhausted), 429},
		{fmt.Errorf("disk: %w", sandpit.ErrUnavailable), 503},
		{errors.New("broken"), 500},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			calls := 0
			rn := start(t, func(c *Config) {
				c.Tenants = TenantSourceFunc(func(context.Context, string) (*server.MCPServer, error) {
					calls++
					return nil, tc.err
				})
			})
			for range 2 {
				resp, body := rn.post(t, "/mcp", "tok-alice", "", rpc(1, "initialize", initParams))
				if resp.StatusCode != tc.status {
					t.Errorf("got %s %s, want %d", resp.Status, body, tc.status)
				}
				if tc.status == 500 && strings.Contains(string(body), "broken") {
					t.Errorf("an internal error's text reached the client: %s", body)
				}
			}
			if calls != 2 {
				t.Errorf("source asked %d times, want again after a failure", calls)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	src := newTenants()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // in the error
	}{
		{"non-loopback without TLS", Config{Addr: "192.0.2.1:8080", Auth: testAuth, Tenants: src}, "not loopback"},
		{"no-auth on non-loopback", Config{Addr: "192.0.2.1:8080", InsecureHTTP: true, InsecureNoAuth: true, Tenants: src}, "no authentication"},
		{"no authenticator", Config{Addr: "127.0.0.1:8080", Tenants: src}, "no authenticator"},
		{"no tenants", Config{Addr: "127.0.0.1:8080", Auth: testAuth}, "tenant source"},
		{"unspecified host without public URL", Config{Addr: "0.0.0.0:8080", InsecureHTTP: true, Auth: testAuth, Tenants: src}, "public URL"},
		{"unreadable TLS files", Config{Addr: "127.0.0.1:8443", TLSCert: "/nonexistent.pem", TLSKey: "/nonexistent.key", Auth: testAuth, Tenants: src}, "TLS certificate"},
		{"cert without key", Config{Addr: "127.0.0.1:8443", TLSCert: "/x.pem", Auth: testAuth, Tenants: src}, "both"},
		{"public URL with a path", Config{Addr: "127.0.0.1:8080", PublicURL: "http://127.0.0.1:8080/x", Auth: testAuth, Tenants: src}, "no path"},
		{"bad address", Config{Addr: "localhost", Auth: testAuth, Tenants: src}, "host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
			if !errors.Is(err, sandpit.ErrInvalidArgument) {
				t.Errorf("%v is not an invalid argument", err)
			}
		})
	}
	for _, ok := range []Config{
		{Addr: "127.0.0.1:8080", InsecureNoAuth: true, Tenants: src},
		{Addr: "[::1]:8080", Auth: testAuth, Tenants: src},
		{Addr: "0.0.0.0:8080", InsecureHTTP: true, PublicURL: "https://mcp.example", Auth: testAuth, Tenants: src},
	} {
		if _, err := New(ok); err != nil {
			t.Errorf("%+v: %v", ok.Addr, err)
		}
	}
}

func TestNoAuthLoopback(t *testing.T) {
	rn := start(t, func(c *Config) { c.Auth = nil; c.InsecureNoAuth = true })
	sid := rn.initialize(t, "")
	if got := toolText(t, mustPost(t, rn, "/mcp", "", sid, rpc(2, "tools/call", callParams("list_supported_languages")))); got != NoAuthTenant {
		t.Errorf("tenant %q, want %q", got, NoAuthTenant)
	}
}

// An initialize whose session id was made counts once, not twice, while
// its handler returns: a concurrent initialize below the cap is not
// refused (found by sandpit bench --http: "31 live sessions (the limit
// 32)").
func TestSessionReservationBecomesSession(t *testing.T) {
	f := &Front{cfg: Config{Limits: Limits{MaxSessionsPerTenant: 2}}, tenants: map[string]*tenant{}}
	tn := f.tenantFor("alice")
	r1, ok := tn.reserveSession()
	if !ok {
		t.Fatal("first reservation refused")
	}
	tn.ids.Generate() // the first initialize made its session, and has not returned
	r2, ok := tn.reserveSession()
	if !ok {
		t.Fatalf("second initialize refused with 1 session live (reserved %d, consumed %d)", tn.reserved, tn.consumed)
	}
	tn.ids.Generate()
	r1()
	r2()
	r1() // idempotent
	if tn.reserved != 0 || tn.consumed != 0 || tn.liveSessions() != 2 {
		t.Fatalf("after both returned: reserved %d consumed %d live %d", tn.reserved, tn.consumed, tn.liveSessions())
	}
	if _, ok := tn.reserveSession(); ok {
		t.Fatal("a third session past the cap of 2")
	}
	// A reservation that never became a session (initialize failed) ends.
	id := tn.ids.Generate()
	tn.ids.Terminate(id)
	if tn.liveSessions() != 2 {
		t.Fatalf("live %d", tn.liveSessions())
	}
}

// Bodies held at once are bounded over all connections: while one client
// trickles a body that takes the whole budget, another's is refused 503 at
// once (not read); once the first is gone, bodies are read again.
func TestBodiesInFlightBounded(t *testing.T) {
	rn := start(t, func(c *Config) {
		c.Limits.MaxBodyBytes = 64 << 10
		c.Limits.MaxBodyBytesInFlight = 64 << 10
	})
	slow := rawConn(t, rn)
	fmt.Fprintf(slow, "POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer tok-alice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", rn.addr, 60<<10)
	ping := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	post := func() int {
		req, _ := http.NewRequest(http.MethodPost, rn.url+"/mcp", strings.NewReader(ping+strings.Repeat(" ", 8<<10)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer tok-bob")
		resp, _ := do(t, req)
		return resp.StatusCode
	}
	testenv.Eventually(t, "the trickled body holds the budget", func() bool { return post() == http.StatusServiceUnavailable })
	slow.Close()
	testenv.Eventually(t, "the budget frees when that client goes", func() bool { return post() == 200 })
}

// Pages (the dashboard) get what is not MCP's, after the Host and Origin
// checks: a cross-site form post or a rebinding Host never reaches them.
func TestPagesBehindHostAndOrigin(t *testing.T) {
	var reached atomic.Int64
	rn := start(t, func(c *Config) {
		c.Pages = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			io.WriteString(w, "page "+r.URL.Path)
		})
	})
	_, port, _ := net.SplitHostPort(rn.addr)
	for _, tc := range []struct {
		name, method, path, origin, host string
		status                           int
		reaches                          bool
	}{
		{"page", "GET", "/runs", "", "", 200, true},
		{"form of this site", "POST", "/login", rn.url, "", 200, true},
		{"cross-site form", "POST", "/login", "https://evil.example", "", 403, false},
		{"rebinding host", "GET", "/runs", "", "evil.example:" + port, 403, false},
		{"MCP stays MCP's", "GET", "/mcp", "", "", 401, false},
		{"metadata stays the front's", "GET", "/.well-known/oauth-protected-resource", "", "", 200, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := reached.Load()
			req, _ := http.NewRequest(tc.method, rn.url+tc.path, strings.NewReader("token=x"))
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, body := do(t, req)
			if resp.StatusCode != tc.status || (reached.Load() > before) != tc.reaches {
				t.Errorf("got %s %q (pages reached: %v), want %d (reached %v)", resp.Status, body, reached.Load() > before, tc.status, tc.reaches)
			}
		})
	}
}

// The front keeps what it refused for the operator: a missing token, a
// foreign Origin, a body past the bound; not a 404 of an unknown session.
func TestRefusalsKept(t *testing.T) {
	events := mcp.NewEvents(10)
	rn := start(t, func(c *Config) { c.Events = events; c.Limits.MaxBodyBytes = 1 << 10 })
	for _, tc := range []struct {
		origin, token, body string
	}{
		{"", "", "{}"},
		{"https://evil.example", "tok-alice", "{}"},
		{"", "tok-alice", strings.Repeat("x", 2<<10)},
	} {
		req, _ := http.NewRequest(http.MethodPost, rn.url+"/mcp", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		do(t, req)
	}
	req, _ := http.NewRequest(http.MethodGet, rn.url+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer tok-alice")
	req.Header.Set("Mcp-Session-Id", "nosuchsession")
	do(t, req)
	var got []string
	for _, e := range events.List() {
		got = append(got, e.Kind+" "+e.Tool)
	}
	want := []string{"limit HTTP 413", "refused HTTP 403", "refused HTTP 401"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("events %q, want %q", got, want)
	}
}
