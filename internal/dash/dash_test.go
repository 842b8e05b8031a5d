package dash

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/packages"
	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/store/history"
	"github.com/sandpit-dev/sandpit/store/snapshot"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// tokens is an authenticator of fixed tokens, which a test can revoke.
type tokens struct {
	mu sync.Mutex
	m  map[string]auth.Principal
}

func (a *tokens) Authenticate(ctx context.Context, r *http.Request) (auth.Principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return auth.Principal{}, auth.ErrNoCredentials
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.m[strings.TrimPrefix(h, "Bearer ")]
	if !ok {
		return auth.Principal{}, auth.ErrInvalidToken
	}
	return p, nil
}

func (a *tokens) revoke(tok string) {
	a.mu.Lock()
	delete(a.m, tok)
	a.mu.Unlock()
}

// fixture is a dashboard over two tenants' real stores (history,
// workspace, snapshots) on an httptest server.
type fixture struct {
	srv     *httptest.Server
	auth    *tokens
	tenants map[string]*Tenant
	ws      map[string]*workspace.Workspace
	hist    map[string]*history.DB
	snaps   map[string]*snapshot.Store
	d       *Dash
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{
		auth: &tokens{m: map[string]auth.Principal{
			"tok-a":     {Tenant: "alice", Scopes: auth.AllScopes},
			"tok-b":     {Tenant: "bob", Scopes: auth.AllScopes},
			"tok-files": {Tenant: "alice", Scopes: []string{auth.ScopeFiles}},
		}},
		tenants: map[string]*Tenant{}, ws: map[string]*workspace.Workspace{}, hist: map[string]*history.DB{}, snaps: map[string]*snapshot.Store{},
	}
	for _, name := range []string{"alice", "bob"} {
		dir := t.TempDir()
		h, err := history.Open(t.Context(), filepath.Join(dir, "history.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		snaps, err := snapshot.Open(filepath.Join(dir, "snapshots"), snapshot.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { snaps.Close() })
		ws, err := workspace.Open(filepath.Join(dir, "ws"), workspace.Options{BeforeRun: snaps.BeforeRun, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		runs := mcp.NewRuns(0)
		t.Cleanup(runs.Close)
		f.tenants[name] = &Tenant{History: h, Runs: runs, Files: ws, Snapshots: snaps.For(ws),
			Sessions: func() []sandpit.SessionInfo { return nil }}
		f.ws[name], f.hist[name], f.snaps[name] = ws, h, snaps
	}
	d, err := New(Config{Auth: f.auth, Logger: slog.New(slog.DiscardHandler),
		Tenants: SourceFunc(func(ctx context.Context, name string) (*Tenant, error) {
			if t := f.tenants[name]; t != nil {
				return t, nil
			}
			return nil, sandpit.Newf(sandpit.ErrUnavailable, "no tenant %s", name)
		})})
	if err != nil {
		t.Fatal(err)
	}
	f.d = d
	f.srv = httptest.NewServer(d)
	t.Cleanup(f.srv.Close)
	return f
}

// beforeRun records tenant's workspace state before run id, as the
// workspace does when a run opens it.
func (f *fixture) beforeRun(t *testing.T, tenant, id string) error {
	return f.snaps[tenant].BeforeRun(t.Context(), f.ws[tenant], id)
}

// browser is a client with a cookie jar that does not follow redirects.
func (f *fixture) browser(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (f *fixture) login(t *testing.T, c *http.Client, token string) {
	t.Helper()
	res, err := c.PostForm(f.srv.URL+"/login", url.Values{"token": {token}, "next": {"/runs"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/runs" {
		t.Fatalf("login: %s, Location %q", res.Status, res.Header.Get("Location"))
	}
}

func get(t *testing.T, c *http.Client, u string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func record(t testing.TB, h *history.DB, r history.Run) {
	t.Helper()
	if r.Started.IsZero() {
		r.Started = time.Now().UTC()
	}
	if r.Status == "" {
		r.Status = "success"
	}
	if r.Language == "" {
		r.Language = "python"
	}
	if err := h.Record(t.Context(), r); err != nil {
		t.Fatal(err)
	}
}

func TestLogin(t *testing.T) {
	f := newFixture(t)
	c := f.browser(t)
	// Not logged in: sent to the login page, which remembers where to.
	res, _ := get(t, c, f.srv.URL+"/runs?status=error")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login?next=%2Fruns%3Fstatus%3Derror" {
		t.Fatalf("GET /runs without login: %s %q", res.Status, res.Header.Get("Location"))
	}
	// A wrong token is refused, saying so, and sets no cookie.
	res, err := c.PostForm(f.srv.URL+"/login", url.Values{"token": {"nope"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "not valid here") || len(res.Cookies()) != 0 {
		t.Fatalf("bad token: %s cookies %v\n%s", res.Status, res.Cookies(), body)
	}
	// A good one: a session cookie scripts cannot read, sent to this site
	// only.
	res, err = c.PostForm(f.srv.URL+"/login", url.Values{"token": {"tok-a"}, "next": {"/runs"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var ck *http.Cookie
	for _, k := range res.Cookies() {
		if k.Name == cookieName {
			ck = k
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Value == "tok-a" || strings.Contains(ck.Value, "tok-a") {
		t.Fatalf("login cookie: %+v", ck)
	}
	res, body2 := get(t, c, f.srv.URL+"/runs")
	if res.StatusCode != http.StatusOK || !strings.Contains(body2, `<strong id="tenant">alice</strong>`) {
		t.Fatalf("GET /runs logged in: %s\n%s", res.Status, body2)
	}
	// Log out needs the form's CSRF token.
	res, err = c.PostForm(f.srv.URL+"/logout", url.Values{"csrf": {"forged"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("logout with a forged CSRF token: %s", res.Status)
	}
	m := csrfRE.FindStringSubmatch(body2)
	if m == nil {
		t.Fatal("no CSRF token in the page")
	}
	res, err = c.PostForm(f.srv.URL+"/logout", url.Values{"csrf": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %s", res.Status)
	}
	if res, _ := get(t, c, f.srv.URL+"/runs"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("after logout: %s", res.Status)
	}
	// The old cookie, replayed, is dead too.
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/runs", nil)
	req.AddCookie(&http.Cookie{Name: cookieName, Value: ck.Value})
	res2, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res2.Body.Close()
	if res2.StatusCode != http.StatusSeeOther {
		t.Fatalf("replayed cookie after logout: %s", res2.Status)
	}
}

// Revoking the token a person logged in with ends the login session at
// the next request.
func TestRevokedTokenEndsLogin(t *testing.T) {
	f := newFixture(t)
	f.auth.m["tok-tmp"] = auth.Principal{Tenant: "alice", Scopes: auth.AllScopes}
	c := f.browser(t)
	f.login(t, c, "tok-tmp")
	if res, _ := get(t, c, f.srv.URL+"/runs"); res.StatusCode != http.StatusOK {
		t.Fatalf("before revoking: %s", res.Status)
	}
	f.auth.revoke("tok-tmp")
	if res, _ := get(t, c, f.srv.URL+"/runs"); res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/login") {
		t.Fatalf("after revoking: %s %q", res.Status, res.Header.Get("Location"))
	}
}

// Every response carries the CSP and the other hardening headers.
func TestSecurityHeaders(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{"/login", "/runs", "/", "/workspace", "/snapshots", "/metrics", "/runs/nosuch", "/static/app.css", "/metrics/latency.svg"} {
		res, _ := get(t, http.DefaultClient, f.srv.URL+p, "Authorization", "Bearer tok-a")
		h := res.Header
		if h.Get("Content-Security-Policy") != csp || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s (%s): headers %v", p, res.Status, h)
		}
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Fatalf("CSP allows too much: %s", csp)
		}
	}
}

// What a program printed is text on the page: markup escaped, control
// characters made visible, and the code highlighted without inline
// styles (the CSP would drop them).
func TestRunPageEscapes(t *testing.T) {
	f := newFixture(t)
	out := "<script>alert(1)</script>\x1b[31mred\x1b[0m \u202eevil"
	record(t, f.hist["alice"], history.Run{ID: "r1", Code: "print('<b>hi</b>')\x1b", Stdout: out, StdoutHead: out, StdoutBytes: int64(len(out)),
		Stderr: "<img src=x onerror=alert(2)>", StderrHead: "<img src=x onerror=alert(2)>", StderrBytes: 28})
	res, body := get(t, http.DefaultClient, f.srv.URL+"/runs/r1", "Authorization", "Bearer tok-a")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s\n%s", res.Status, body)
	}
	for _, bad := range []string{"<script>alert", "<img src=x", "\x1b", "\u202e", "<b>hi"} {
		if strings.Contains(body, bad) {
			t.Errorf("page contains %q raw", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", `\x1b[31mred\x1b[0m`, `\u202eevil`, "&lt;img src=x onerror=alert(2)&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(body, "style=") {
		t.Error("page has an inline style attribute (the CSP drops it)")
	}
	if !strings.Contains(body, `class="chroma"`) {
		t.Error("code not highlighted")
	}
	// The history list too.
	_, body = get(t, http.DefaultClient, f.srv.URL+"/runs?q=b", "Authorization", "Bearer tok-a")
	if strings.Contains(body, "<b>hi") || !strings.Contains(body, "&lt;b&gt;hi") {
		t.Errorf("history list preview not escaped:\n%s", body)
	}
}

// Another tenant's run, snapshot or file is "not found" exactly as one
// that never existed.
func TestTenantsSeeOnlyTheirOwn(t *testing.T) {
	f := newFixture(t)
	record(t, f.hist["alice"], history.Run{ID: "alicerun", Code: "secret()"})
	if _, err := f.ws["alice"].Write(t.Context(), "secret.txt", []byte("alice's")); err != nil {
		t.Fatal(err)
	}
	snap, err := f.tenants["alice"].Snapshots.(interface {
		Create(context.Context, string) (snapshot.Snapshot, error)
	}).Create(t.Context(), "alice's state")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ theirs, never string }{
		{"/runs/alicerun", "/runs/neverwas"},
		{"/runs/alicerun/stdout", "/runs/neverwas/stdout"},
		{"/runs/alicerun/cancel", "/runs/neverwas/cancel"},
		{"/runs/alicerun/diff?path=secret.txt", "/runs/neverwas/diff?path=neverwas.txt"},
		{"/snapshots/" + snap.ID, "/snapshots/neverwas"},
		{"/snapshots/" + snap.ID + "/restore", "/snapshots/neverwas/restore"},
		{"/workspace/view?path=secret.txt", "/workspace/view?path=neverwas.txt"},
		{"/workspace/raw?path=secret.txt", "/workspace/raw?path=neverwas.txt"},
	} {
		r1, b1 := get(t, http.DefaultClient, f.srv.URL+tc.theirs, "Authorization", "Bearer tok-b")
		r2, b2 := get(t, http.DefaultClient, f.srv.URL+tc.never, "Authorization", "Bearer tok-b")
		b1 = strings.ReplaceAll(b1, "secret.txt", "X")
		b2 = strings.ReplaceAll(b2, "neverwas.txt", "X")
		if r1.StatusCode != http.StatusNotFound || r2.StatusCode != http.StatusNotFound || b1 != b2 {
			t.Errorf("bob GET %s: %s, %s: %s; bodies equal: %v\n%s", tc.theirs, r1.Status, tc.never, r2.Status, b1 == b2, b1)
		}
		if strings.Contains(b1, "secret()") || strings.Contains(b1, "alice") {
			t.Errorf("bob's page for %s names alice's state", tc.theirs)
		}
		// Alice sees her own (a run not in flight has nothing to cancel;
		// one recorded without its undo state has no diff).
		if strings.HasSuffix(tc.theirs, "/cancel") || strings.Contains(tc.theirs, "/diff") {
			continue
		}
		if r, _ := get(t, http.DefaultClient, f.srv.URL+tc.theirs, "Authorization", "Bearer tok-a"); r.StatusCode != http.StatusOK {
			t.Errorf("alice GET %s: %s", tc.theirs, r.Status)
		}
	}
	// Bob's lists are empty.
	_, body := get(t, http.DefaultClient, f.srv.URL+"/runs", "Authorization", "Bearer tok-b")
	if strings.Contains(body, "alicerun") {
		t.Error("bob's history lists alice's run")
	}
	_, body = get(t, http.DefaultClient, f.srv.URL+"/snapshots", "Authorization", "Bearer tok-b")
	if strings.Contains(body, snap.ID) {
		t.Error("bob's snapshots list alice's")
	}
}

// A token without a page's scope gets a 403 naming it.
func TestScopes(t *testing.T) {
	f := newFixture(t)
	res, body := get(t, http.DefaultClient, f.srv.URL+"/runs", "Authorization", "Bearer tok-files")
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, auth.ScopeRun) {
		t.Errorf("/runs with files scope only: %s\n%s", res.Status, body)
	}
	if res, _ := get(t, http.DefaultClient, f.srv.URL+"/workspace", "Authorization", "Bearer tok-files"); res.StatusCode != http.StatusOK {
		t.Errorf("/workspace with files scope: %s", res.Status)
	}
	if res, _ := get(t, http.DefaultClient, f.srv.URL+"/runs", "Authorization", "Bearer nope"); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("bad bearer token: %s", res.Status)
	}
}

// The history is paged: at most runsPerPage rows a page, an "Older" link
// to the next, filters kept across pages.
func TestHistoryPages(t *testing.T) {
	f := newFixture(t)
	t0 := time.Now().UTC().Add(-time.Hour)
	for i := range 120 {
		status := "success"
		if i%2 == 1 {
			status = "error"
		}
		record(t, f.hist["alice"], history.Run{ID: fmt.Sprintf("run%03d", i), Started: t0.Add(time.Duration(i) * time.Second), Status: status, Code: fmt.Sprint(i)})
	}
	rowRE := regexp.MustCompile(`<tr data-run="(run\d+)">`)
	nextRE := regexp.MustCompile(`href="/runs\?([^"]+)" rel="next"`)
	var seen []string
	q := "status=error"
	for page := 0; q != "" && page < 10; page++ {
		_, body := get(t, http.DefaultClient, f.srv.URL+"/runs?"+strings.ReplaceAll(q, "&amp;", "&"), "Authorization", "Bearer tok-a")
		rows := rowRE.FindAllStringSubmatch(body, -1)
		if len(rows) > runsPerPage {
			t.Fatalf("page %d: %d rows", page, len(rows))
		}
		for _, r := range rows {
			seen = append(seen, r[1])
		}
		q = ""
		if m := nextRE.FindStringSubmatch(body); m != nil {
			q = m[1]
		}
	}
	if len(seen) != 60 || seen[0] != "run119" || seen[59] != "run001" {
		t.Fatalf("error runs over the pages: %d, first %v last %v", len(seen), seen[:1], seen[len(seen)-1:])
	}
	if res, _ := get(t, http.DefaultClient, f.srv.URL+"/runs?status=bogus", "Authorization", "Bearer tok-a"); res.StatusCode != http.StatusBadRequest {
		t.Errorf("unknown status filter: %s", res.Status)
	}
	if res, _ := get(t, http.DefaultClient, f.srv.URL+"/runs?before=gone", "Authorization", "Bearer tok-a"); res.StatusCode != http.StatusNotFound {
		t.Errorf("cursor naming no run: %s", res.Status)
	}
}

// A long output is shown up to what was kept, with a download of it.
func TestLongOutputCut(t *testing.T) {
	f := newFixture(t)
	long := strings.Repeat("0123456789\n", 10<<10) // 110 KiB
	kept := long[:history.OutputBytes]
	record(t, f.hist["alice"], history.Run{ID: "big", Stdout: long, StdoutHead: long[:history.HeadBytes], StdoutBytes: 10 << 20, StdoutTruncated: true})
	_, body := get(t, http.DefaultClient, f.srv.URL+"/runs/big", "Authorization", "Bearer tok-a")
	if !strings.Contains(body, "The run printed 10.0 MiB") || !strings.Contains(body, `href="/runs/big/stdout"`) {
		t.Errorf("no cut notice with a download link")
	}
	if len(body) > history.OutputBytes+64<<10 {
		t.Errorf("page is %d bytes", len(body))
	}
	res, dl := get(t, http.DefaultClient, f.srv.URL+"/runs/big/stdout", "Authorization", "Bearer tok-a")
	if dl != kept || !strings.HasPrefix(res.Header.Get("Content-Disposition"), "attachment") {
		t.Errorf("download: %d bytes (want %d), disposition %q", len(dl), len(kept), res.Header.Get("Content-Disposition"))
	}
}

// Workspace files: text and CSV previewed, images inline, anything else
// (HTML, SVG) only as a download, never as a page of this origin.
func TestWorkspaceFiles(t *testing.T) {
	f := newFixture(t)
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	for p, data := range map[string][]byte{
		"dir/notes.txt": []byte("hello <world>"),
		"data.csv":      []byte("a,b\n1,<x>\n"),
		"page.html":     []byte("<html><script>alert(1)</script></html>"),
		"pic.svg":       []byte(`<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`),
		"plot.png":      png,
	} {
		if _, err := f.ws["alice"].Write(t.Context(), p, data); err != nil {
			t.Fatal(err)
		}
	}
	_, body := get(t, http.DefaultClient, f.srv.URL+"/workspace", "Authorization", "Bearer tok-a")
	for _, want := range []string{`href="/workspace?path=dir">dir/</a>`, `href="/workspace/view?path=data.csv"`} {
		if !strings.Contains(body, want) {
			t.Errorf("listing lacks %s", want)
		}
	}
	_, body = get(t, http.DefaultClient, f.srv.URL+"/workspace/view?path=dir/notes.txt", "Authorization", "Bearer tok-a")
	if !strings.Contains(body, "hello &lt;world&gt;") {
		t.Error("text preview")
	}
	_, body = get(t, http.DefaultClient, f.srv.URL+"/workspace/view?path=data.csv", "Authorization", "Bearer tok-a")
	if !strings.Contains(body, `<th scope="col">a</th>`) || !strings.Contains(body, "<td>&lt;x&gt;</td>") {
		t.Errorf("CSV preview:\n%s", body)
	}
	for p, wantType := range map[string]string{"page.html": "application/octet-stream", "pic.svg": "application/octet-stream", "plot.png": "image/png"} {
		res, _ := get(t, http.DefaultClient, f.srv.URL+"/workspace/raw?path="+p, "Authorization", "Bearer tok-a")
		if res.Header.Get("Content-Type") != wantType || !strings.Contains(res.Header.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("raw %s: %s, CSP %q", p, res.Header.Get("Content-Type"), res.Header.Get("Content-Security-Policy"))
		}
		if wantType != "image/png" && !strings.HasPrefix(res.Header.Get("Content-Disposition"), "attachment") {
			t.Errorf("raw %s is not a download", p)
		}
	}
	for _, p := range []string{"../etc/passwd", "/etc/passwd", "dir/../../x"} {
		res, _ := get(t, http.DefaultClient, f.srv.URL+"/workspace/raw?path="+url.QueryEscape(p), "Authorization", "Bearer tok-a")
		if res.StatusCode < 400 {
			t.Errorf("raw %s: %s", p, res.Status)
		}
	}
}

// Restoring a snapshot takes a confirmation and the form's CSRF token;
// then the workspace is the snapshot's.
func TestRestoreSnapshot(t *testing.T) {
	f := newFixture(t)
	ws := f.ws["alice"]
	ws.Write(t.Context(), "keep.txt", []byte("v1"))
	snap, err := f.tenants["alice"].Snapshots.(interface {
		Create(context.Context, string) (snapshot.Snapshot, error)
	}).Create(t.Context(), "v1")
	if err != nil {
		t.Fatal(err)
	}
	ws.Write(t.Context(), "keep.txt", []byte("v2"))
	ws.Write(t.Context(), "new.txt", []byte("new"))
	c := f.browser(t)
	f.login(t, c, "tok-a")
	_, body := get(t, c, f.srv.URL+"/snapshots/"+snap.ID)
	if !strings.Contains(body, "<td>added</td><td>new.txt</td>") || !strings.Contains(body, "<td>changed</td><td>keep.txt</td>") {
		t.Errorf("diff page:\n%s", body)
	}
	_, body = get(t, c, f.srv.URL+"/snapshots/"+snap.ID+"/restore")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil || !strings.Contains(body, `action="/snapshots/`+snap.ID+`/restore"`) {
		t.Fatalf("confirmation page:\n%s", body)
	}
	// Without the CSRF token (a forged cross-site form): refused, nothing done.
	res, err := c.PostForm(f.srv.URL+"/snapshots/"+snap.ID+"/restore", url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("restore without CSRF: %s", res.Status)
	}
	if _, err := ws.Read(t.Context(), "new.txt", 0, 0); err != nil {
		t.Fatal("refused restore changed the workspace")
	}
	res, err = c.PostForm(f.srv.URL+"/snapshots/"+snap.ID+"/restore", url.Values{"csrf": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("restore: %s", res.Status)
	}
	if c, err := ws.Read(t.Context(), "keep.txt", 0, 0); err != nil || string(c.Data) != "v1" {
		t.Errorf("keep.txt after restore: %q %v", c.Data, err)
	}
	if _, err := ws.Read(t.Context(), "new.txt", 0, 0); err == nil {
		t.Error("new.txt survived the restore")
	}
}

// Bodies of forms are bounded.
func TestFormBodyBounded(t *testing.T) {
	f := newFixture(t)
	res, err := http.Post(f.srv.URL+"/login", "application/x-www-form-urlencoded", strings.NewReader("token="+strings.Repeat("a", 1<<20)))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusSeeOther || res.StatusCode == http.StatusOK {
		t.Errorf("1 MiB login form: %s", res.Status)
	}
}

// The charts are well-formed SVG drawn from the tenant's history.
func TestMetricsCharts(t *testing.T) {
	f := newFixture(t)
	now := time.Now().UTC()
	for i := range 30 {
		st := []string{"success", "error", "timeout"}[i%3]
		record(t, f.hist["alice"], history.Run{ID: fmt.Sprint("m", i), Started: now.Add(-time.Duration(i) * time.Minute), Status: st,
			DurationMS: int64(10 * (i + 1)), CPUUserMS: int64(i), MemoryPeakBytes: int64(i) << 20})
	}
	var pool []PoolSample
	var mem []MemorySample
	for i := range 30 {
		at := now.Add(time.Duration(i-30) * 10 * time.Second)
		hr := float64(i%4) / 3
		if i%7 == 0 {
			hr = -1 // no runs then
		}
		pool = append(pool, PoolSample{Time: at, Ready: i % 3, Target: 2, HitRate: hr})
		mem = append(mem, MemorySample{Time: at, Bytes: uint64(i) << 20})
	}
	f.d.cfg.Pool = func() []PoolSample { return pool }
	f.tenants["alice"].SessionMemory = func() []MemorySample { return mem }
	_, page := get(t, http.DefaultClient, f.srv.URL+"/metrics", "Authorization", "Bearer tok-a")
	for _, c := range charts {
		if !strings.Contains(page, `src="/metrics/`+c.Name+`"`) {
			t.Errorf("metrics page lacks %s", c.Name)
		}
		res, svg := get(t, http.DefaultClient, f.srv.URL+"/metrics/"+c.Name, "Authorization", "Bearer tok-a")
		if res.Header.Get("Content-Type") != "image/svg+xml" {
			t.Errorf("%s: %s", c.Name, res.Header.Get("Content-Type"))
		}
		dec := xml.NewDecoder(strings.NewReader(svg))
		for {
			_, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s is not well-formed: %v", c.Name, err)
			}
		}
		if strings.Contains(svg, "<script") || strings.Contains(svg, "style=") {
			t.Errorf("%s has script or inline style", c.Name)
		}
	}
	// A tenant without sessions' samples has no such chart.
	if res, _ := get(t, http.DefaultClient, f.srv.URL+"/metrics/sessions-memory.svg", "Authorization", "Bearer tok-b"); res.StatusCode != http.StatusNotFound {
		t.Errorf("sessions' memory chart without samples: %s", res.Status)
	}
	if _, sec := get(t, http.DefaultClient, f.srv.URL+"/security", "Authorization", "Bearer tok-a"); !strings.Contains(sec, `<a href="/runs/m2">`) {
		t.Error("the timed-out run is not among the runs that met a limit")
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"":                     "/",
		"/runs?status=error":   "/runs?status=error",
		"//evil.example/x":     "/",
		"/\\evil.example":      "/",
		"https://evil.example": "/",
		"runs":                 "/",
		"/login":               "/",
		"/x\r\nSet-Cookie: a":  "/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"plain\ttext\n":    "plain\ttext\n",
		"\x1b[1mbold":      `\x1b[1mbold`,
		"nul\x00":          `nul\x00`,
		"bad\xffutf8":      "bad\uFFFDutf8",
		"\u202eright":      `\u202eright`,
		"del\x7f c1\u009b": `del\x7f c1\u009b`,
	} {
		if got := visible(in); got != want {
			t.Errorf("visible(%q) = %q, want %q", in, got, want)
		}
	}
}

// A live run is shown on Live with a cancel link; cancelling it needs
// the CSRF token and records that a person cancelled it.
func TestLiveAndCancel(t *testing.T) {
	f := newFixture(t)
	runs := f.tenants["alice"].Runs
	started := make(chan string, 1)
	block := &blockingRunner{started: started}
	_ = block
	// Drive a run through a real MCP server over the tenant's Runs.
	srv := mcp.NewServer(mcp.Config{Runner: block, Runs: runs, History: f.hist["alice"], Logger: slog.New(slog.DiscardHandler)})
	go func() {
		msg := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_code","arguments":{"language":"python","code":"sleep()","background":true}}}`
		srv.HandleMessage(context.Background(), json.RawMessage(msg))
	}()
	id := <-started
	c := f.browser(t)
	f.login(t, c, "tok-a")
	_, body := get(t, c, f.srv.URL+"/live")
	if !strings.Contains(body, `<tr data-run="`+id+`">`) || !strings.Contains(body, `href="/runs/`+id+`/cancel"`) {
		t.Fatalf("live fragment lacks the run:\n%s", body)
	}
	_, body = get(t, c, f.srv.URL+"/runs/"+id+"/cancel")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("confirmation:\n%s", body)
	}
	res, err := c.PostForm(f.srv.URL+"/runs/"+id+"/cancel", url.Values{"csrf": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel: %s", res.Status)
	}
	r, err := f.hist["alice"].Get(t.Context(), id)
	if err != nil || r.Status != "cancelled" || r.CancelledBy != "person" {
		t.Fatalf("history: %+v %v", r, err)
	}
	_, body = get(t, c, f.srv.URL+"/runs/"+id)
	if !strings.Contains(body, "cancelled by a person") {
		t.Error("run page does not say a person cancelled it")
	}
}

// blockingRunner runs until cancelled.
type blockingRunner struct{ started chan string }

func (b *blockingRunner) Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	b.started <- req.ID
	<-ctx.Done()
	return &sandpit.Result{ID: req.ID, Language: req.Language, Status: sandpit.StatusCancelled, Started: time.Now()}, nil
}

func (b *blockingRunner) Languages() []sandpit.Language { return []sandpit.Language{{Name: "python"}} }

// Live shows sessions with their memory and CPU.
func TestLiveSessions(t *testing.T) {
	f := newFixture(t)
	f.tenants["alice"].Sessions = func() []sandpit.SessionInfo {
		return []sandpit.SessionInfo{{Name: "<s1>", Language: "python", Started: time.Now().Add(-time.Minute), LastUsed: time.Now(),
			Calls: 3, MemoryBytes: 40 << 20, CPUUserMS: 1500, Running: "r9"}}
	}
	res, body := get(t, http.DefaultClient, f.srv.URL+"/live", "Authorization", "Bearer tok-a")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/live: %s\n%s", res.Status, body)
	}
	for _, want := range []string{"&lt;s1&gt;", "40.0 MiB", "1.5 s user", `<span class="tag">running</span>`} {
		if !strings.Contains(body, want) {
			t.Errorf("/live lacks %q:\n%s", want, body)
		}
	}
}

// Security shows a tenant its own refused calls, escaped; Operator shows
// operators every tenant and the server's refusals, and is "not found" to
// anyone else.
func TestSecurityAndOperator(t *testing.T) {
	f := newFixture(t)
	f.tenants["alice"].Events = mcp.NewEvents(10)
	f.tenants["bob"].Events = mcp.NewEvents(10)
	f.tenants["alice"].Events.Add(mcp.Event{Kind: mcp.EventRefused, Tool: "run_code", Message: "unknown language \"<script>\""})
	server := mcp.NewEvents(10)
	server.Add(mcp.Event{Kind: mcp.EventRefused, Tool: "HTTP 401", Message: "invalid_token: the bearer token is not valid here"})
	d, err := New(Config{Auth: f.auth, Logger: slog.New(slog.DiscardHandler), Operators: []string{"bob"}, ServerEvents: server,
		Tenants: SourceFunc(func(ctx context.Context, name string) (*Tenant, error) { return f.tenants[name], nil }),
		Summaries: func(context.Context) ([]TenantSummary, error) {
			return []TenantSummary{{Name: "alice", Runs: 3, Open: true, Refusals: f.tenants["alice"].Events.Counts()}, {Name: "bob"}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	_, body := get(t, http.DefaultClient, srv.URL+"/security", "Authorization", "Bearer tok-a")
	if !strings.Contains(body, "1 refused") || !strings.Contains(body, "unknown language &#34;&lt;script&gt;&#34;") {
		t.Errorf("alice's security page:\n%s", body)
	}
	_, body = get(t, http.DefaultClient, srv.URL+"/security", "Authorization", "Bearer tok-b")
	if strings.Contains(body, "unknown language") || !strings.Contains(body, `id="no-events"`) {
		t.Errorf("bob's security page shows alice's events:\n%s", body)
	}
	// alice is no operator: the page does not exist for her, word for word.
	r1, b1 := get(t, http.DefaultClient, srv.URL+"/operator", "Authorization", "Bearer tok-a")
	r2, b2 := get(t, http.DefaultClient, srv.URL+"/runs/nosuch/stdout?x", "Authorization", "Bearer tok-a")
	_ = b2
	if r1.StatusCode != http.StatusNotFound || strings.Contains(b1, "HTTP 401") || r2.StatusCode != http.StatusNotFound || strings.Contains(b1, `href="/operator"`) {
		t.Errorf("/operator for a non-operator: %s\n%s", r1.Status, b1)
	}
	// An operator reads another tenant's history, read-only; nobody else
	// can name another tenant, and no name makes a tenant.
	record(t, f.hist["alice"], history.Run{ID: "aliceone", Code: "alice_code()"})
	if r, body := get(t, http.DefaultClient, srv.URL+"/runs?tenant=alice", "Authorization", "Bearer tok-b"); r.StatusCode != http.StatusOK ||
		!strings.Contains(body, `href="/runs/aliceone?tenant=alice"`) || !strings.Contains(body, `id="viewing"`) || !strings.Contains(body, `<option value="alice" selected>`) {
		t.Errorf("bob reading alice's history: %s\n%s", r.Status, body)
	}
	if r, body := get(t, http.DefaultClient, srv.URL+"/runs/aliceone?tenant=alice", "Authorization", "Bearer tok-b"); r.StatusCode != http.StatusOK || !strings.Contains(body, "alice_code") || strings.Contains(body, `id="rerun"`) {
		t.Errorf("bob reading alice's run: %s", r.Status)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/runs/aliceone/rerun?tenant=alice", nil)
	req.Header.Set("Authorization", "Bearer tok-b")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("bob acting on alice's run: %v %v", res.Status, err)
	}
	for _, tc := range []struct{ tok, q string }{{"tok-a", "?tenant=bob"}, {"tok-b", "?tenant=nosuch"}} {
		if r, _ := get(t, http.DefaultClient, srv.URL+"/runs"+tc.q, "Authorization", "Bearer "+tc.tok); r.StatusCode != http.StatusNotFound {
			t.Errorf("%s /runs%s: %s", tc.tok, tc.q, r.Status)
		}
	}
	r, body := get(t, http.DefaultClient, srv.URL+"/operator", "Authorization", "Bearer tok-b")
	if r.StatusCode != http.StatusOK || !strings.Contains(body, `<tr data-tenant="alice">`) || !strings.Contains(body, "1 refused") || !strings.Contains(body, "invalid_token") || !strings.Contains(body, `href="/operator"`) {
		t.Errorf("/operator for bob: %s\n%s", r.Status, body)
	}
}

// A run's page links each file it changed to a diff of that file before
// and after the run, from the undo states; text is escaped.
func TestRunDiff(t *testing.T) {
	f := newFixture(t)
	ws := f.ws["alice"]
	ctx := t.Context()
	ws.Write(ctx, "a.txt", []byte("one\n<two>\nthree\n"))
	// What the workspace does before a run, then what the run wrote.
	if err := f.beforeRun(t, "alice", "r1"); err != nil {
		t.Fatal(err)
	}
	ws.Write(ctx, "a.txt", []byte("one\n<2>\nthree\n"))
	ws.Write(ctx, "bin.dat", []byte{0xff, 0xfe, 0})
	files, _ := json.Marshal(sandpit.Changes{Modified: []string{"a.txt"}, Created: []string{"bin.dat"}})
	record(t, f.hist["alice"], history.Run{ID: "r1", Code: "edit()", Files: files})
	record(t, f.hist["alice"], history.Run{ID: "old", Code: "x", Files: files})

	_, body := get(t, http.DefaultClient, f.srv.URL+"/runs/r1", "Authorization", "Bearer tok-a")
	if !strings.Contains(body, `href="/runs/r1/diff?path=a.txt"`) {
		t.Fatalf("run page has no diff link:\n%s", body)
	}
	res, body := get(t, http.DefaultClient, f.srv.URL+"/runs/r1/diff?path=a.txt", "Authorization", "Bearer tok-a")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `<span class="d-del">-&lt;two&gt;</span>`) || !strings.Contains(body, `<span class="d-add">&#43;&lt;2&gt;</span>`) {
		t.Errorf("diff: %s\n%s", res.Status, body)
	}
	_, body = get(t, http.DefaultClient, f.srv.URL+"/runs/r1/diff?path=bin.dat", "Authorization", "Bearer tok-a")
	if !strings.Contains(body, `id="binary"`) {
		t.Errorf("binary file diff:\n%s", body)
	}
	// A run whose state before it is not kept says so.
	res, body = get(t, http.DefaultClient, f.srv.URL+"/runs/old/diff?path=a.txt", "Authorization", "Bearer tok-a")
	if res.StatusCode != http.StatusNotFound || !strings.Contains(body, "no longer kept") {
		t.Errorf("diff without an undo state: %s\n%s", res.Status, body)
	}
}

// An operator's pages ask TenantNames, not Summaries (which reads every
// tenant's stores), to check ?tenant= and fill the tenant filter.
func TestOperatorNamesAreCheap(t *testing.T) {
	f := newFixture(t)
	d, err := New(Config{Auth: f.auth, Logger: slog.New(slog.DiscardHandler), Operators: []string{"bob"},
		Tenants: SourceFunc(func(ctx context.Context, name string) (*Tenant, error) { return f.tenants[name], nil }),
		Summaries: func(context.Context) ([]TenantSummary, error) {
			t.Error("Summaries called for a page that only needs names")
			return nil, nil
		},
		TenantNames: func(context.Context) ([]string, error) { return []string{"bob", "alice"}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	r, body := get(t, http.DefaultClient, srv.URL+"/runs?tenant=alice", "Authorization", "Bearer tok-b")
	if r.StatusCode != http.StatusOK || !strings.Contains(body, `<option value="alice" selected>`) || !strings.Contains(body, `<option value="bob">`) {
		t.Errorf("/runs?tenant=alice: %s\n%s", r.Status, body)
	}
	if r, _ := get(t, http.DefaultClient, srv.URL+"/runs?tenant=carol", "Authorization", "Bearer tok-b"); r.StatusCode != http.StatusNotFound {
		t.Errorf("a tenant not in the names: %s", r.Status)
	}
}

// TestWorkspacePackages: the workspace's root lists the package layer its
// sandpit.lock records (requested or a dependency), says when there is
// none, and shows a lock that cannot be read as such, escaped.
func TestWorkspacePackages(t *testing.T) {
	f := newFixture(t)
	page := func() string {
		t.Helper()
		_, body := get(t, http.DefaultClient, f.srv.URL+"/workspace", "Authorization", "Bearer tok-a")
		return body
	}
	if body := page(); !strings.Contains(body, `id="no-packages"`) {
		t.Fatalf("no lock: %s", body)
	}
	sum := strings.Repeat("ab", 32)
	lock := packages.Lock{Version: packages.LockVersion,
		Requested: packages.Requested{Python: []string{"sp-greet==1.0"}},
		Python: []packages.PyEntry{
			{Name: "sp-greet", Version: "1.0", Filename: "sp_greet-1.0-py3-none-any.whl", URL: "https://idx.example/f/sp_greet-1.0-py3-none-any.whl", SHA256: sum, Size: 1000},
			{Name: "sp-util", Version: "2.0", Filename: "sp_util-2.0-py3-none-any.whl", URL: "https://idx.example/f/sp_util-2.0-py3-none-any.whl", SHA256: sum, Size: 2000},
		}}
	if _, err := f.ws["alice"].Write(t.Context(), packages.LockFile, lock.Marshal()); err != nil {
		t.Fatal(err)
	}
	body := page()
	for _, want := range []string{`id="packages"`, "<td>sp-greet</td><td>1.0</td><td>requested</td>", "<td>sp-util</td><td>2.0</td><td>a dependency</td>", sum} {
		if !strings.Contains(body, want) {
			t.Errorf("packages table lacks %q", want)
		}
	}
	if _, err := f.ws["alice"].Write(t.Context(), packages.LockFile, []byte(`{"version": 1, "python": [{"name": "<script>"}]}`)); err != nil {
		t.Fatal(err)
	}
	body = page()
	if !strings.Contains(body, `id="packages-error"`) || strings.Contains(body, "<script>") {
		t.Errorf("a broken lock: %s", body)
	}
	// Another directory than the root has no packages section.
	if _, err := f.ws["alice"].Write(t.Context(), "sub/x.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, body := get(t, http.DefaultClient, f.srv.URL+"/workspace?path=sub", "Authorization", "Bearer tok-a"); strings.Contains(body, "packages-heading") {
		t.Error("a subdirectory shows the packages")
	}
}
