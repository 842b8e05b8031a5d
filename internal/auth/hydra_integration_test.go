package auth

// Integration tests against a real authorization server: ory/hydra, built
// and started by scripts/hydra.sh (loopback, kernel-free ports, JWT access
// tokens, in-memory state). SANDPIT_HYDRA=1 runs them (scripts/test.sh
// sets it); without it they skip, saying so — and fail instead when
// SANDPIT_REQUIRE_INTEGRATION=1, so CI cannot pass by skipping them.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// hydra is one running hydra.
type hydra struct {
	issuer, admin string
}

var (
	hydraOnce  sync.Once
	hydraMain  *hydra // access tokens live an hour
	hydraShort *hydra // access tokens live shortTTL; also "another issuer"
	hydraErr   error
	hydraDirs  []string
)

const shortTTL = 4 * time.Second

func hydraScript() string {
	p, err := filepath.Abs("../../scripts/hydra.sh")
	if err != nil {
		panic(err)
	}
	return p
}

// needHydra returns the two hydras, starting them on first use; they are
// stopped in TestMain.
func needHydra(t *testing.T) (main, short *hydra) {
	t.Helper()
	if os.Getenv("SANDPIT_HYDRA") != "1" {
		if os.Getenv("SANDPIT_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("SANDPIT_REQUIRE_INTEGRATION=1 but SANDPIT_HYDRA is not 1: the OAuth tests need a real hydra (set SANDPIT_HYDRA=1; scripts/hydra.sh builds it)")
		}
		t.Skip("OAuth against a real authorization server: set SANDPIT_HYDRA=1 (scripts/hydra.sh builds ory/hydra from the Go module proxy on first use)")
	}
	hydraOnce.Do(func() {
		hydraMain, hydraErr = startHydra()
		if hydraErr == nil {
			hydraShort, hydraErr = startHydra("--access-token-ttl", shortTTL.String())
		}
	})
	if hydraErr != nil {
		t.Fatal(hydraErr)
	}
	return hydraMain, hydraShort
}

func startHydra(args ...string) (*hydra, error) {
	dir, err := os.MkdirTemp("", "sandpit-hydra-")
	if err != nil {
		return nil, err
	}
	hydraDirs = append(hydraDirs, dir)
	// --owner: hydra goes when this test binary does, even killed.
	cmd := exec.Command(hydraScript(), append([]string{"start", dir, "--owner", strconv.Itoa(os.Getpid())}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("scripts/hydra.sh start: %v\n%s", err, stderr.String())
	}
	h := &hydra{}
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
		return nil, fmt.Errorf("scripts/hydra.sh start printed %q: no ISSUER= and ADMIN=", out)
	}
	return h, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range hydraDirs {
		exec.Command(hydraScript(), "stop", d).Run()
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// call sends a JSON (or form) request and decodes the JSON answer.
func call(t *testing.T, c *http.Client, method, u string, body any, out any) *http.Response {
	t.Helper()
	var rd io.Reader
	ctype := ""
	switch b := body.(type) {
	case nil:
	case url.Values:
		rd, ctype = strings.NewReader(b.Encode()), "application/x-www-form-urlencoded"
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd, ctype = bytes.NewReader(j), "application/json"
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		t.Fatalf("%s %s: %s\n%s", method, u, resp.Status, b)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, u, err, b)
		}
	}
	return resp
}

type hydraClient struct {
	ID     string `json:"client_id"`
	Secret string `json:"client_secret"`
}

// clientCredentialsClient registers a confidential client allowed scopes
// and audiences.
func (h *hydra) clientCredentialsClient(t *testing.T, scope string, audiences ...string) hydraClient {
	t.Helper()
	var cl hydraClient
	call(t, http.DefaultClient, "POST", h.admin+"/admin/clients", map[string]any{
		"grant_types": []string{"client_credentials"}, "scope": scope, "audience": audiences,
		"token_endpoint_auth_method": "client_secret_basic",
	}, &cl)
	return cl
}

// token runs the client-credentials grant.
func (h *hydra) token(t *testing.T, cl hydraClient, scope, audience string) string {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {scope}}
	if audience != "" {
		form.Set("audience", audience)
	}
	req, err := http.NewRequestWithContext(t.Context(), "POST", h.issuer+"/oauth2/token", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(cl.ID), url.QueryEscape(cl.Secret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tr struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error_description"`
	}
	json.NewDecoder(resp.Body).Decode(&tr)
	if tr.AccessToken == "" {
		t.Fatalf("token endpoint: %s %s", resp.Status, tr.Error)
	}
	return tr.AccessToken
}

func (h *hydra) verifier(t *testing.T, mod func(*OAuthConfig)) *OAuth {
	t.Helper()
	cfg := OAuthConfig{Issuer: h.issuer, Audience: testAudience}
	if mod != nil {
		mod(&cfg)
	}
	o, err := NewOAuth(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestHydraClientCredentials(t *testing.T) {
	h, _ := needHydra(t)
	cl := h.clientCredentialsClient(t, "sandpit:run sandpit:files", testAudience)
	o := h.verifier(t, nil)
	p, err := o.Authenticate(t.Context(), bearerReq(h.token(t, cl, "sandpit:run sandpit:files", testAudience)))
	if err != nil {
		t.Fatal(err)
	}
	if p.Tenant != cl.ID || p.Via != "oauth" || !p.Has(ScopeRun) || !p.Has(ScopeFiles) || p.Has(ScopeData) {
		t.Fatalf("principal %+v: want tenant %s (the client id, hydra's sub) with run and files only", p, cl.ID)
	}
}

// A token granted fewer scopes authenticates, and the caller's scope check
// refuses what it lacks.
func TestHydraMissingScope(t *testing.T) {
	h, _ := needHydra(t)
	cl := h.clientCredentialsClient(t, "sandpit:run sandpit:data", testAudience)
	o := h.verifier(t, nil)
	p, err := o.Authenticate(t.Context(), bearerReq(h.token(t, cl, "sandpit:run", testAudience)))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Has(ScopeRun) || p.Has(ScopeData) {
		t.Fatalf("principal %+v: want sandpit:run and not sandpit:data", p)
	}
	if err := RequireScope(p, ScopeData); !errors.Is(err, ErrInsufficientScope) {
		t.Fatalf("RequireScope(data): %v, want ErrInsufficientScope", err)
	}
	if err := RequireScope(p, ScopeRun); err != nil {
		t.Fatal(err)
	}
}

func TestHydraWrongAudience(t *testing.T) {
	h, _ := needHydra(t)
	const other = "https://other.example/mcp"
	cl := h.clientCredentialsClient(t, "sandpit:run", testAudience, other)
	o := h.verifier(t, nil)
	for _, tc := range []struct{ name, audience string }{
		{"another resource", other},
		{"no audience", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := o.Authenticate(t.Context(), bearerReq(h.token(t, cl, "sandpit:run", tc.audience)))
			if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "wrong audience") {
				t.Fatalf("err %v, want ErrInvalidToken: wrong audience", err)
			}
		})
	}
	// The same client's token for this resource passes: the refusal was the audience.
	if _, err := o.Authenticate(t.Context(), bearerReq(h.token(t, cl, "sandpit:run", testAudience))); err != nil {
		t.Fatal(err)
	}
}

// A token of another issuer (a second hydra, its own keys) is refused.
func TestHydraWrongIssuer(t *testing.T) {
	h, other := needHydra(t)
	cl := other.clientCredentialsClient(t, "sandpit:run", testAudience)
	tok := other.token(t, cl, "sandpit:run", testAudience)
	_, err := h.verifier(t, nil).Authenticate(t.Context(), bearerReq(tok))
	if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "wrong issuer") {
		t.Fatalf("err %v, want ErrInvalidToken: wrong issuer", err)
	}
	// Its own issuer's verifier accepts it.
	if _, err := other.verifier(t, nil).Authenticate(t.Context(), bearerReq(tok)); err != nil {
		t.Fatal(err)
	}
}

// A token hydra issued with a short lifetime is accepted while it lives
// and refused as expired once it has passed (waited for by polling).
func TestHydraExpired(t *testing.T) {
	_, h := needHydra(t)
	cl := h.clientCredentialsClient(t, "sandpit:run", testAudience)
	o := h.verifier(t, func(c *OAuthConfig) { c.Leeway = time.Second })
	tok := h.token(t, cl, "sandpit:run", testAudience)
	var claims struct{ Iat, Exp int64 }
	json.Unmarshal(mustDecode(t, strings.Split(tok, ".")[1]), &claims)
	if got := time.Duration(claims.Exp-claims.Iat) * time.Second; got > shortTTL+time.Second {
		t.Fatalf("hydra issued a token for %v, configured %v", got, shortTTL)
	}
	// Valid at its issue time, whatever the machine's load made of the
	// seconds since.
	o.now = func() time.Time { return time.Unix(claims.Iat, 0) }
	if _, err := o.Authenticate(t.Context(), bearerReq(tok)); err != nil {
		t.Fatalf("at its issue time: %v", err)
	}
	o.now = time.Now
	var last error
	testenv.Eventually(t, "the token to be refused as expired", func() bool {
		_, last = o.Authenticate(t.Context(), bearerReq(tok))
		if last != nil && !strings.Contains(last.Error(), "expired") {
			t.Fatalf("before expiry: %v", last)
		}
		return last != nil
	})
	if !errors.Is(last, ErrInvalidToken) {
		t.Fatalf("err %v, want ErrInvalidToken", last)
	}
	if now := time.Now().Unix(); now <= claims.Exp {
		t.Fatalf("refused as expired at %d, before its exp %d", now, claims.Exp)
	}
}

// Revoked at hydra: with introspection configured, the token is refused
// (once the cached positive answer is stale); without it, it is not —
// which is why introspection exists.
func TestHydraRevoked(t *testing.T) {
	h, _ := needHydra(t)
	cl := h.clientCredentialsClient(t, "sandpit:run", testAudience)
	o := h.verifier(t, func(c *OAuthConfig) {
		c.IntrospectionURL = h.admin + "/admin/oauth2/introspect"
		c.IntrospectionTTL = time.Minute
	})
	clock := time.Now()
	o.now = func() time.Time { return clock }
	plain := h.verifier(t, nil)
	tok := h.token(t, cl, "sandpit:run", testAudience)
	if _, err := o.Authenticate(t.Context(), bearerReq(tok)); err != nil {
		t.Fatalf("before revocation: %v", err)
	}

	req, err := http.NewRequestWithContext(t.Context(), "POST", h.issuer+"/oauth2/revoke", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(cl.ID), url.QueryEscape(cl.Secret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("revoke: %s", resp.Status)
	}

	// Within the TTL the cached answer stands (the documented window).
	if _, err := o.Authenticate(t.Context(), bearerReq(tok)); err != nil {
		t.Fatalf("within the introspection TTL: %v (the cached answer should stand)", err)
	}
	clock = clock.Add(time.Minute)
	_, err = o.Authenticate(t.Context(), bearerReq(tok))
	if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("after revocation: err %v, want ErrInvalidToken: revoked", err)
	}
	if _, err := plain.Authenticate(t.Context(), bearerReq(tok)); err != nil {
		t.Fatalf("without introspection a revoked JWT still verifies locally; got %v", err)
	}
}

// A hydra token with its signature changed, and one re-headed as alg
// "none", are refused.
func TestHydraForged(t *testing.T) {
	h, _ := needHydra(t)
	cl := h.clientCredentialsClient(t, "sandpit:run", testAudience)
	o := h.verifier(t, nil)
	tok := h.token(t, cl, "sandpit:run", testAudience)
	parts := strings.Split(tok, ".")
	sig := mustDecode(t, parts[2])
	sig[len(sig)/2] ^= 1
	// The payload re-signed by nobody: same claims, more scopes.
	var claims map[string]any
	json.Unmarshal(mustDecode(t, parts[1]), &claims)
	claims["scp"] = AllScopes
	more, _ := json.Marshal(claims)
	for _, tc := range []struct{ name, token, reason string }{
		{"flipped signature bit", parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(sig), "bad signature"},
		{"claims changed", parts[0] + "." + base64.RawURLEncoding.EncodeToString(more) + "." + parts[2], "bad signature"},
		{"alg none", b64(`{"alg":"none","typ":"JWT"}`) + "." + parts[1] + ".", "accepted algorithm"},
		{"alg none, signature kept", b64(`{"alg":"none","typ":"JWT"}`) + "." + parts[1] + "." + parts[2], "accepted algorithm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := o.Authenticate(t.Context(), bearerReq(tc.token))
			if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("err %v, want ErrInvalidToken: %s", err, tc.reason)
			}
		})
	}
	if _, err := o.Authenticate(t.Context(), bearerReq(tok)); err != nil {
		t.Fatalf("the untouched token: %v", err)
	}
}

// The authorization-code flow with PKCE, the test acting as the user's
// browser and as hydra's login and consent app: the token names the user
// (alice) and holds the scopes and audience consent granted.
func TestHydraAuthorizationCodePKCE(t *testing.T) {
	h, _ := needHydra(t)
	const redirect = "http://127.0.0.1:1/callback"
	var cl hydraClient
	call(t, http.DefaultClient, "POST", h.admin+"/admin/clients", map[string]any{
		"grant_types": []string{"authorization_code"}, "response_types": []string{"code"},
		"redirect_uris": []string{redirect}, "scope": "sandpit:run sandpit:files sandpit:data",
		"audience": []string{testAudience}, "token_endpoint_auth_method": "none",
	}, &cl)

	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	follow := func(u string) *url.URL {
		t.Helper()
		resp := call(t, browser, "GET", u, nil, nil)
		loc, err := resp.Location()
		if err != nil {
			t.Fatalf("GET %s: %s, no redirect", u, resp.Status)
		}
		return loc
	}

	verifier := rand.Text() + rand.Text() // 52 base32 characters, 260 bits
	challenge := sha256.Sum256([]byte(verifier))
	state := rand.Text()
	auth := h.issuer + "/oauth2/auth?" + url.Values{
		"response_type": {"code"}, "client_id": {cl.ID}, "redirect_uri": {redirect},
		"scope": {"sandpit:run sandpit:files"}, "state": {state}, "audience": {testAudience},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(challenge[:])}, "code_challenge_method": {"S256"},
	}.Encode()

	login := follow(auth)
	var accepted struct {
		RedirectTo string `json:"redirect_to"`
	}
	call(t, http.DefaultClient, "PUT", h.admin+"/admin/oauth2/auth/requests/login/accept?"+url.Values{"login_challenge": {login.Query().Get("login_challenge")}}.Encode(),
		map[string]any{"subject": "alice"}, &accepted)

	consent := follow(accepted.RedirectTo)
	challengeID := consent.Query().Get("consent_challenge")
	var asked struct {
		Scope    []string `json:"requested_scope"`
		Audience []string `json:"requested_access_token_audience"`
		Subject  string   `json:"subject"`
	}
	call(t, http.DefaultClient, "GET", h.admin+"/admin/oauth2/auth/requests/consent?"+url.Values{"consent_challenge": {challengeID}}.Encode(), nil, &asked)
	if asked.Subject != "alice" {
		t.Fatalf("consent request for %q, want alice", asked.Subject)
	}
	call(t, http.DefaultClient, "PUT", h.admin+"/admin/oauth2/auth/requests/consent/accept?"+url.Values{"consent_challenge": {challengeID}}.Encode(),
		map[string]any{"grant_scope": asked.Scope, "grant_access_token_audience": asked.Audience}, &accepted)

	back := follow(accepted.RedirectTo)
	if back.Query().Get("state") != state || back.Query().Get("code") == "" {
		t.Fatalf("callback %s: want the state back and a code", back.Redacted())
	}
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	call(t, http.DefaultClient, "POST", h.issuer+"/oauth2/token", url.Values{
		"grant_type": {"authorization_code"}, "code": {back.Query().Get("code")}, "redirect_uri": {redirect},
		"client_id": {cl.ID}, "code_verifier": {verifier},
	}, &tr)

	p, err := h.verifier(t, nil).Authenticate(t.Context(), bearerReq(tr.AccessToken))
	if err != nil {
		t.Fatal(err)
	}
	if p.Tenant != "alice" || !p.Has(ScopeRun) || !p.Has(ScopeFiles) || p.Has(ScopeData) {
		t.Fatalf("principal %+v: want alice with run and files (what consent granted), not data", p)
	}
}
