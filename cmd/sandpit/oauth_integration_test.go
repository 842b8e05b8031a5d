package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// hydraServer is a private ory/hydra started through scripts/hydra.sh.
type hydraServer struct{ issuer, admin string }

func startHydraServer(t *testing.T) hydraServer {
	t.Helper()
	if os.Getenv("SANDPIT_HYDRA") != "1" {
		if os.Getenv("SANDPIT_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("SANDPIT_REQUIRE_INTEGRATION=1 but SANDPIT_HYDRA is not 1: the OAuth tests need a real hydra (scripts/hydra.sh)")
		}
		t.Skip("OAuth against a real authorization server: set SANDPIT_HYDRA=1 (scripts/hydra.sh builds ory/hydra)")
	}
	script, _ := filepath.Abs("../../scripts/hydra.sh")
	dir := t.TempDir()
	cmd := exec.Command(script, "start", dir, "--owner", strconv.Itoa(os.Getpid()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/hydra.sh start: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() { exec.Command(script, "stop", dir).Run() })
	var h hydraServer
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ISSUER="); ok {
			h.issuer = v
		}
		if v, ok := strings.CutPrefix(sc.Text(), "ADMIN="); ok {
			h.admin = v
		}
	}
	if h.issuer == "" || h.admin == "" {
		t.Fatalf("hydra.sh start printed %q", out)
	}
	return h
}

type oauthClient struct {
	ID     string `json:"client_id"`
	Secret string `json:"client_secret"`
}

func postJSON(t *testing.T, u string, body, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(u, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		t.Fatalf("POST %s: %s %s", u, resp.Status, rb)
	}
	if out != nil {
		json.Unmarshal(rb, out)
	}
}

// form posts a client-authenticated form to hydra's public endpoint.
func (h hydraServer) form(t *testing.T, cl oauthClient, path string, v url.Values) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", h.issuer+path, strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(cl.ID), url.QueryEscape(cl.Secret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func (h hydraServer) token(t *testing.T, cl oauthClient, scope, audience string) string {
	t.Helper()
	code, m := h.form(t, cl, "/oauth2/token", url.Values{"grant_type": {"client_credentials"}, "scope": {scope}, "audience": {audience}})
	tok, _ := m["access_token"].(string)
	if code != 200 || tok == "" {
		t.Fatalf("token: %d %v", code, m)
	}
	return tok
}

// rpc posts one JSON-RPC request to the MCP endpoint with a bearer.
func rpc(t *testing.T, endpoint, bearer, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", endpoint, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, string(b)
}

// `serve --listen --oauth-issuer` against a real authorization server:
// a client-credentials token for this server's resource runs code as the
// tenant its subject names; a token without a tool's scope gets 403 naming
// the scope; another audience's token, no token and a revoked token get 401
// with the RFC 9728 pointer, whose document names the issuer (issue 25).
func TestHTTPOAuthHydra(t *testing.T) {
	h := startHydraServer(t)
	srv := startHTTP(t, "", "--oauth-issuer", h.issuer,
		"--oauth-introspection-url", h.admin+"/admin/oauth2/introspect", "--oauth-introspection-ttl", "1s")
	var cl oauthClient
	postJSON(t, h.admin+"/admin/clients", map[string]any{
		"grant_types": []string{"client_credentials"}, "scope": "sandpit:run sandpit:files sandpit:data",
		"audience": []string{srv.url, "https://elsewhere.example/mcp"}, "token_endpoint_auth_method": "client_secret_basic",
	}, &cl)

	// Run-only token: run_code works, as the tenant named by the subject.
	runOnly := h.token(t, cl, "sandpit:run", srv.url)
	c := httpClient(t, srv.url, runOnly)
	if r := runResult(t, call(t, c, "run_code", map[string]any{"language": "bash", "code": "echo oauth > f.txt; cat f.txt"})); r.Stdout != "oauth\n" {
		t.Fatalf("run_code with an OAuth token: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(srv.data, "tenants", cl.ID, "workspace", "f.txt")); err != nil {
		t.Errorf("the run's file is not in tenant %s's workspace: %v", cl.ID, err)
	}
	// The same token on a tool of sandpit:files: 403 naming the scope.
	resp, body := rpc(t, srv.url, runOnly, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"x","content":"y"}}}`)
	if wa := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != 403 || !strings.Contains(wa, `error="insufficient_scope"`) || !strings.Contains(wa, `scope="sandpit:files"`) || !strings.Contains(body, "sandpit:files") {
		t.Errorf("write_file with a run-only token: %s %q %s", resp.Status, wa, body)
	}
	// A token for another resource, no token: 401 pointing at the metadata.
	other := h.token(t, cl, "sandpit:run sandpit:files", "https://elsewhere.example/mcp")
	for name, tok := range map[string]string{"other audience": other, "no token": ""} {
		resp, body := rpc(t, srv.url, tok, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
		wa := resp.Header.Get("WWW-Authenticate")
		if resp.StatusCode != 401 || !strings.Contains(wa, `resource_metadata="`+srv.base+`/.well-known/oauth-protected-resource`) {
			t.Errorf("%s: %s %q %s", name, resp.Status, wa, body)
		}
		if name == "other audience" && !strings.Contains(wa, `error="invalid_token"`) {
			t.Errorf("%s: %q lacks invalid_token", name, wa)
		}
	}
	// RFC 9728: the document names this resource and the issuer.
	mresp, err := http.Get(srv.base + "/.well-known/oauth-protected-resource")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		Scopes               []string `json:"scopes_supported"`
	}
	json.NewDecoder(mresp.Body).Decode(&meta)
	mresp.Body.Close()
	if meta.Resource != srv.url || len(meta.AuthorizationServers) != 1 || meta.AuthorizationServers[0] != h.issuer || len(meta.Scopes) != 3 {
		t.Errorf("protected resource metadata: %+v", meta)
	}
	// Revoked at the issuer: refused once the introspection answer (1 s) is
	// stale.
	full := h.token(t, cl, "sandpit:run sandpit:files", srv.url)
	if resp, body := rpc(t, srv.url, full, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`); resp.StatusCode != 200 {
		t.Fatalf("initialize with a fresh token: %s %s", resp.Status, body)
	}
	if code, m := h.form(t, cl, "/oauth2/revoke", url.Values{"token": {full}}); code != 200 {
		t.Fatalf("revoke: %d %v", code, m)
	}
	if !testenv.Poll(time.Minute, func() bool {
		resp, _ := rpc(t, srv.url, full, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
		return resp.StatusCode == 401
	}) {
		t.Errorf("a revoked token is still accepted a minute later")
	}
}

// A browser logs in to the dashboard through the OAuth issuer (issue 28):
// the authorization code flow with PKCE against a real hydra, the dashboard
// a public client; the token it gets is for this server and its subject is
// the tenant. A callback replayed, or arriving in another browser, is
// refused.
func TestDashboardOAuthLogin(t *testing.T) {
	h := startHydraServer(t)
	var cl oauthClient
	postJSON(t, h.admin+"/admin/clients", map[string]any{
		"grant_types": []string{"authorization_code"}, "response_types": []string{"code"},
		"redirect_uris": []string{"http://127.0.0.1:1/callback"}, "scope": "sandpit:run sandpit:files sandpit:data",
		"token_endpoint_auth_method": "none",
	}, &cl)
	srv := startHTTP(t, "", "--oauth-issuer", h.issuer, "--oauth-dashboard-client", cl.ID)
	// The client's redirect URI and audience name this server, whose port
	// is known now.
	putJSON(t, h.admin+"/admin/clients/"+cl.ID, map[string]any{
		"client_id": cl.ID, "grant_types": []string{"authorization_code"}, "response_types": []string{"code"},
		"redirect_uris": []string{srv.base + "/login/callback"}, "scope": "sandpit:run sandpit:files sandpit:data",
		"audience": []string{srv.url}, "token_endpoint_auth_method": "none",
	})

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	step := func(c *http.Client, u string) (*http.Response, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	follow := func(u string) *url.URL {
		t.Helper()
		resp, body := step(browser, u)
		loc, err := resp.Location()
		if err != nil {
			t.Fatalf("GET %s: %s, no redirect\n%s", u, resp.Status, body)
		}
		return loc
	}
	_, page := step(browser, srv.base+"/login")
	if !strings.Contains(page, `id="login-oauth"`) {
		t.Fatalf("the login page offers no login through the issuer:\n%s", page)
	}
	authz := follow(srv.base + "/login/oauth?next=%2Fruns")
	if q := authz.Query(); q.Get("code_challenge_method") != "S256" || q.Get("audience") != srv.url || q.Get("client_id") != cl.ID {
		t.Fatalf("authorization request %s: want PKCE S256, audience %s", authz.Redacted(), srv.url)
	}
	login := follow(authz.String())
	var accepted struct {
		RedirectTo string `json:"redirect_to"`
	}
	putJSONOut(t, h.admin+"/admin/oauth2/auth/requests/login/accept?"+url.Values{"login_challenge": {login.Query().Get("login_challenge")}}.Encode(),
		map[string]any{"subject": "carol"}, &accepted)
	consent := follow(accepted.RedirectTo)
	var asked struct {
		Scope    []string `json:"requested_scope"`
		Audience []string `json:"requested_access_token_audience"`
	}
	getJSON(t, h.admin+"/admin/oauth2/auth/requests/consent?"+url.Values{"consent_challenge": {consent.Query().Get("consent_challenge")}}.Encode(), &asked)
	putJSONOut(t, h.admin+"/admin/oauth2/auth/requests/consent/accept?"+url.Values{"consent_challenge": {consent.Query().Get("consent_challenge")}}.Encode(),
		map[string]any{"grant_scope": asked.Scope, "grant_access_token_audience": asked.Audience}, &accepted)
	callback := follow(accepted.RedirectTo)
	if !strings.HasPrefix(callback.String(), srv.base+"/login/callback?") {
		t.Fatalf("the issuer sent the browser to %s", callback.Redacted())
	}
	// Another browser (no state cookie) cannot use this callback.
	other := &http.Client{CheckRedirect: browser.CheckRedirect}
	if resp, body := step(other, callback.String()); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "not started in this browser") {
		t.Errorf("callback in another browser: %s", resp.Status)
	}
	resp, body := step(browser, callback.String())
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `url=/runs`) {
		t.Fatalf("callback: %s\n%s", resp.Status, body)
	}
	resp, body = step(browser, srv.base+"/runs")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<strong id="tenant">carol</strong>`) {
		t.Fatalf("after logging in through the issuer, /runs: %s\n%s", resp.Status, body)
	}
	// The callback replayed: refused (the state is used up).
	if resp, _ := step(browser, callback.String()); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("replayed callback: %s", resp.Status)
	}
}

func putJSON(t *testing.T, u string, body any) { t.Helper(); putJSONOut(t, u, body, nil) }

func putJSONOut(t *testing.T, u string, body, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPut, u, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		t.Fatalf("PUT %s: %s %s", u, resp.Status, rb)
	}
	if out != nil {
		json.Unmarshal(rb, out)
	}
}

func getJSON(t *testing.T, u string, out any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		t.Fatalf("GET %s: %s %s", u, resp.Status, rb)
	}
	json.Unmarshal(rb, out)
}
