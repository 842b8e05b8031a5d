package auth

// Unit tests of the OAuth verifier's refusals and bounds, against an
// in-process issuer that signs whatever a case needs — including what no
// real issuer would send. The real flows (client credentials,
// authorization code + PKCE, expiry, revocation) run against ory/hydra in
// hydra_integration_test.go.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

const testAudience = "https://sandpit.test/mcp"

// fakeIssuer serves discovery, a JWKS and an introspection endpoint.
type fakeIssuer struct {
	srv         *httptest.Server
	key         *rsa.PrivateKey
	kid         string
	jwks        atomic.Value // []byte
	jwksHits    atomic.Int32
	introHits   atomic.Int32
	inactive    atomic.Bool // introspection answers active=false
	introDown   atomic.Bool // introspection answers 500
	issuerName  string      // what discovery says (default: its URL)
	onlyRFC8414 bool        // serve discovery at RFC 8414's path only
	introAuth   string      // "id:secret" introspection must be called with
}

func newFakeIssuer(t *testing.T) *fakeIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeIssuer{key: key, kid: "k1"}
	f.setKeys(jose.JSONWebKey{Key: key.Public(), KeyID: "k1", Algorithm: "RS256", Use: "sig"})
	mux := http.NewServeMux()
	discover := func(w http.ResponseWriter, r *http.Request) {
		if f.onlyRFC8414 == (r.URL.Path == "/.well-known/openid-configuration") {
			http.NotFound(w, r)
			return
		}
		name := f.issuerName
		if name == "" {
			name = f.srv.URL
		}
		json.NewEncoder(w).Encode(map[string]string{"issuer": name, "jwks_uri": f.srv.URL + "/jwks", "introspection_endpoint": f.srv.URL + "/introspect"})
	}
	mux.HandleFunc("/.well-known/openid-configuration", discover)
	mux.HandleFunc("/.well-known/oauth-authorization-server", discover)
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		f.jwksHits.Add(1)
		w.Write(f.jwks.Load().([]byte))
	})
	mux.HandleFunc("/introspect", func(w http.ResponseWriter, r *http.Request) {
		f.introHits.Add(1)
		if f.introDown.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		if id, secret, _ := r.BasicAuth(); f.introAuth != "" && id+":"+secret != f.introAuth {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.PostFormValue("token") == "" {
			http.Error(w, "no token", http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(map[string]bool{"active": !f.inactive.Load()})
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeIssuer) setKeys(keys ...jose.JSONWebKey) {
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		panic(err)
	}
	f.jwks.Store(b)
}

// claims are a valid token's claims, which a case then changes.
func (f *fakeIssuer) claims() map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": f.srv.URL, "sub": "alice", "aud": []string{testAudience},
		"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "nbf": now.Unix(),
		"scp": []string{ScopeRun, ScopeFiles},
	}
}

func (f *fakeIssuer) sign(t *testing.T, claims map[string]any) string {
	t.Helper()
	return signWith(t, jose.RS256, f.key, f.kid, claims)
}

func signWith(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (f *fakeIssuer) oauth(t *testing.T, mod func(*OAuthConfig)) *OAuth {
	t.Helper()
	cfg := OAuthConfig{Issuer: f.srv.URL, Audience: testAudience}
	if mod != nil {
		mod(&cfg)
	}
	o, err := NewOAuth(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func bearerReq(tok string) *http.Request { return request("Bearer "+tok, "") }

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestOAuthValid(t *testing.T) {
	f := newFakeIssuer(t)
	o := f.oauth(t, nil)
	for _, tc := range []struct {
		name   string
		change func(map[string]any)
		want   []string
	}{
		{"scp list", func(map[string]any) {}, []string{ScopeRun, ScopeFiles}},
		{"scope string", func(c map[string]any) { delete(c, "scp"); c["scope"] = "sandpit:data openid" }, []string{ScopeData, "openid"}},
		{"aud string", func(c map[string]any) { c["aud"] = testAudience }, []string{ScopeRun, ScopeFiles}},
		{"no scopes", func(c map[string]any) { delete(c, "scp") }, nil},
		{"expired within leeway", func(c map[string]any) { c["exp"] = time.Now().Add(-5 * time.Second).Unix() }, []string{ScopeRun, ScopeFiles}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f.claims()
			tc.change(c)
			p, err := o.Authenticate(t.Context(), bearerReq(f.sign(t, c)))
			if err != nil {
				t.Fatal(err)
			}
			if p.Tenant != "alice" || p.Via != "oauth" || fmt.Sprint(p.Scopes) != fmt.Sprint(tc.want) {
				t.Fatalf("principal %+v, want alice via oauth with %v", p, tc.want)
			}
		})
	}
	// Another tenant claim.
	o2 := f.oauth(t, func(c *OAuthConfig) { c.TenantClaim = "client_id" })
	c := f.claims()
	c["client_id"] = "robot-7"
	if p, err := o2.Authenticate(t.Context(), bearerReq(f.sign(t, c))); err != nil || p.Tenant != "robot-7" {
		t.Fatalf("TenantClaim client_id: %+v, %v", p, err)
	}
}

func TestOAuthRefuses(t *testing.T) {
	f := newFakeIssuer(t)
	o := f.oauth(t, nil)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherRSA, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	valid := f.sign(t, f.claims())
	parts := strings.Split(valid, ".")
	with := func(change func(map[string]any)) string {
		c := f.claims()
		change(c)
		return f.sign(t, c)
	}
	// The public key as an HMAC secret: the classic key-confusion attack.
	pubDER, _ := json.Marshal(jose.JSONWebKey{Key: f.key.Public()})
	for _, tc := range []struct {
		name, token, reason string
	}{
		{"alg none", b64(`{"alg":"none","typ":"JWT"}`) + "." + parts[1] + ".", "accepted algorithm"},
		{"HS256 with the public key", signWith(t, jose.HS256, pubDER, f.kid, f.claims()), "accepted algorithm"},
		{"tampered payload", parts[0] + "." + b64(strings.Replace(string(mustDecode(t, parts[1])), "alice", "mallory", 1)) + "." + parts[2], "bad signature"},
		{"tampered signature", parts[0] + "." + parts[1] + "." + b64("not the signature"), "bad signature"},
		{"other key, same kid", signWith(t, jose.RS256, otherRSA, f.kid, f.claims()), "bad signature"},
		{"unknown kid", signWith(t, jose.RS256, otherRSA, "k-unknown", f.claims()), "unknown key"},
		{"EC token, RSA key", signWith(t, jose.ES256, ecKey, f.kid, f.claims()), "unknown key"},
		{"expired", with(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() }), "expired"},
		{"not yet valid", with(func(c map[string]any) { c["nbf"] = time.Now().Add(time.Hour).Unix() }), "not valid yet"},
		{"no exp", with(func(c map[string]any) { delete(c, "exp") }), "no expiry"},
		{"wrong issuer", with(func(c map[string]any) { c["iss"] = "https://evil.example" }), "wrong issuer"},
		{"wrong audience", with(func(c map[string]any) { c["aud"] = []string{"https://other.example/mcp"} }), "wrong audience"},
		{"no audience", with(func(c map[string]any) { delete(c, "aud") }), "wrong audience"},
		{"no sub", with(func(c map[string]any) { delete(c, "sub") }), "tenant claim sub"},
		{"sub not a tenant name", with(func(c map[string]any) { c["sub"] = "../etc" }), "tenant claim sub"},
		{"sub not a string", with(func(c map[string]any) { c["sub"] = 42 }), "malformed claims"},
		{"scope not a string", with(func(c map[string]any) { delete(c, "scp"); c["scope"] = []int{1} }), "claim scope"},
		{"too many scopes", with(func(c map[string]any) { c["scope"] = strings.Repeat("s ", maxScopes+1) }), "scopes"},
		{"opaque token", "ory_at_abcdef.ghijkl", "accepted algorithm"},
		{"too long", strings.Repeat("a", MaxTokenBytes), "longer than"},
		{"sandpit token", TokenPrefix + strings.Repeat("A", 43), "sandpit token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := o.Authenticate(t.Context(), bearerReq(tc.token))
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("err %v, want ErrInvalidToken", err)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("err %q does not give the reason %q", err, tc.reason)
			}
			if !rfc6750Description.MatchString(err.Error()) {
				t.Fatalf("err %q has characters an RFC 6750 error_description may not", err)
			}
			if len(tc.token) > 20 && strings.Contains(err.Error(), tc.token[len(tc.token)-20:]) {
				t.Fatalf("err %q shows the token", err)
			}
		})
	}
}

func mustDecode(t *testing.T, s string) []byte {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A token naming an unknown key fetches the keys again — a rotated key is
// found — but no more than once per KeyRefreshInterval, however many such
// tokens come.
func TestOAuthKeyRefreshBounded(t *testing.T) {
	f := newFakeIssuer(t)
	o := f.oauth(t, func(c *OAuthConfig) { c.KeyRefreshInterval = time.Minute })
	clock := time.Now()
	o.now = func() time.Time { return clock }
	start := f.jwksHits.Load() // NewOAuth's fetch

	// Rotation: a new key k2 is published and signs a token.
	k2, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	f.setKeys(jose.JSONWebKey{Key: f.key.Public(), KeyID: "k1", Algorithm: "RS256", Use: "sig"},
		jose.JSONWebKey{Key: k2.Public(), KeyID: "k2", Algorithm: "RS256", Use: "sig"})
	clock = clock.Add(time.Minute)
	if _, err := o.Authenticate(t.Context(), bearerReq(signWith(t, jose.RS256, k2, "k2", f.claims()))); err != nil {
		t.Fatalf("token of a rotated-in key: %v", err)
	}
	if got := f.jwksHits.Load() - start; got != 1 {
		t.Fatalf("%d key fetches for a rotated key, want 1", got)
	}
	// Made-up key ids: at most one more fetch within the interval.
	for i := range 50 {
		_, err := o.Authenticate(t.Context(), bearerReq(signWith(t, jose.RS256, k2, fmt.Sprintf("made-up-%d", i), f.claims())))
		if !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("made-up kid: err %v", err)
		}
	}
	if got := f.jwksHits.Load() - start; got != 1 {
		t.Fatalf("%d key fetches after 50 made-up kids within the interval, want still 1", got)
	}
	clock = clock.Add(time.Minute)
	o.Authenticate(t.Context(), bearerReq(signWith(t, jose.RS256, k2, "made-up-again", f.claims())))
	if got := f.jwksHits.Load() - start; got != 2 {
		t.Fatalf("%d key fetches once the interval passed, want 2", got)
	}
	// Tokens of another issuer never cause a fetch.
	c := f.claims()
	c["iss"] = "https://evil.example"
	clock = clock.Add(time.Minute)
	o.Authenticate(t.Context(), bearerReq(signWith(t, jose.RS256, k2, "evil", c)))
	if got := f.jwksHits.Load() - start; got != 2 {
		t.Fatalf("a foreign issuer's token fetched keys (%d fetches)", got)
	}
}

func TestNewOAuthRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*fakeIssuer, *OAuthConfig)
		msg   string
	}{
		{"no audience", func(f *fakeIssuer, c *OAuthConfig) { c.Audience = "" }, "no audience"},
		{"issuer mismatch", func(f *fakeIssuer, c *OAuthConfig) { f.issuerName = "https://other.example" }, "names issuer"},
		{"trailing slash differs", func(f *fakeIssuer, c *OAuthConfig) { c.Issuer += "/" }, "names issuer"},
		{"not a URL", func(f *fakeIssuer, c *OAuthConfig) { c.Issuer = "issuer" }, "not an http(s) URL"},
		{"odd tenant claim", func(f *fakeIssuer, c *OAuthConfig) { c.TenantClaim = `a"b` }, "tenant claim"},
		{"JWKS too large", func(f *fakeIssuer, c *OAuthConfig) {
			f.jwks.Store([]byte(`{"keys":[],"pad":"` + strings.Repeat("x", maxIssuerBody) + `"}`))
		}, "larger than"},
		{"only symmetric keys", func(f *fakeIssuer, c *OAuthConfig) {
			f.setKeys(jose.JSONWebKey{Key: []byte(strings.Repeat("k", 32)), KeyID: "h", Algorithm: "HS256"})
		}, "no usable signing key"},
		{"only private keys", func(f *fakeIssuer, c *OAuthConfig) {
			f.setKeys(jose.JSONWebKey{Key: f.key, KeyID: "p", Algorithm: "RS256"})
		}, "no usable signing key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeIssuer(t)
			cfg := OAuthConfig{Issuer: f.srv.URL, Audience: testAudience}
			tc.setup(f, &cfg)
			_, err := NewOAuth(t.Context(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err %v, want one saying %q", err, tc.msg)
			}
		})
	}
}

// An issuer with RFC 8414 metadata only (no OpenID Connect) is found.
func TestOAuthRFC8414Discovery(t *testing.T) {
	f := newFakeIssuer(t)
	f.onlyRFC8414 = true
	o := f.oauth(t, nil)
	if _, err := o.Authenticate(t.Context(), bearerReq(f.sign(t, f.claims()))); err != nil {
		t.Fatal(err)
	}
}

// Introspection authenticates with the configured client credentials.
func TestOAuthIntrospectionClientAuth(t *testing.T) {
	f := newFakeIssuer(t)
	f.introAuth = "sandpit-rs:s3cret"
	tok := f.sign(t, f.claims())
	for _, tc := range []struct {
		name, id, secret string
		want             error
	}{
		{"right credentials", "sandpit-rs", "s3cret", nil},
		{"wrong secret", "sandpit-rs", "nope", ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := f.oauth(t, func(c *OAuthConfig) {
				c.Introspect, c.IntrospectionClientID, c.IntrospectionClientSecret = true, tc.id, tc.secret
			})
			_, err := o.Authenticate(t.Context(), bearerReq(tok))
			if !errors.Is(err, tc.want) { // errors.Is(nil, nil) is true
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestOAuthKeepsAtMostMaxKeys(t *testing.T) {
	f := newFakeIssuer(t)
	var keys []jose.JSONWebKey
	for i := range MaxKeys + 5 {
		keys = append(keys, jose.JSONWebKey{Key: f.key.Public(), KeyID: fmt.Sprintf("k%d", i), Algorithm: "RS256"})
	}
	f.setKeys(keys...)
	o := f.oauth(t, nil)
	if n := len(o.keys.keys); n != MaxKeys {
		t.Fatalf("kept %d keys, want %d", n, MaxKeys)
	}
}

func TestOAuthIntrospection(t *testing.T) {
	f := newFakeIssuer(t)
	o := f.oauth(t, func(c *OAuthConfig) {
		c.Introspect = true
		c.IntrospectionTTL = time.Minute
		c.IntrospectionCacheSize = 3
	})
	clock := time.Now()
	o.now = func() time.Time { return clock }
	tok := f.sign(t, f.claims())
	for range 3 {
		if _, err := o.Authenticate(t.Context(), bearerReq(tok)); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.introHits.Load(); n != 1 {
		t.Fatalf("%d introspections for 3 requests within the TTL, want 1", n)
	}
	// Revoked at the issuer: refused once the cached answer is stale.
	f.inactive.Store(true)
	clock = clock.Add(time.Minute)
	if _, err := o.Authenticate(t.Context(), bearerReq(tok)); !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked: err %v, want ErrInvalidToken saying revoked", err)
	}
	// The endpoint failing: the server's fault, and the request refused.
	f.introDown.Store(true)
	clock = clock.Add(time.Minute)
	if _, err := o.Authenticate(t.Context(), bearerReq(tok)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("introspection down: err %v, want ErrUnavailable", err)
	}
	// The cache stays within its size.
	f.introDown.Store(false)
	f.inactive.Store(false)
	for i := range 10 {
		c := f.claims()
		c["jti"] = fmt.Sprint(i)
		if _, err := o.Authenticate(t.Context(), bearerReq(f.sign(t, c))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(o.intro.cache); n > 3 {
		t.Fatalf("introspection cache holds %d answers, bound 3", n)
	}
	// A forged token never reaches the endpoint.
	before := f.introHits.Load()
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	o.Authenticate(t.Context(), bearerReq(signWith(t, jose.RS256, other, f.kid, f.claims())))
	if f.introHits.Load() != before {
		t.Fatal("a badly signed token was sent to introspection")
	}
}

// Chain sends sandpit tokens to the token store and everything else to
// OAuth, each only to its own.
func TestChain(t *testing.T) {
	f := newFakeIssuer(t)
	o := f.oauth(t, func(c *OAuthConfig) { c.Introspect = true })
	store, err := OpenTokens(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	spt, err := store.Create("bob")
	if err != nil {
		t.Fatal(err)
	}
	for _, order := range [][]Authenticator{{store, o}, {o, store}} {
		a := Chain(order...)
		if p, err := a.Authenticate(t.Context(), bearerReq(spt)); err != nil || p.Tenant != "bob" || p.Via != "token" {
			t.Fatalf("sandpit token: %+v, %v", p, err)
		}
		if p, err := a.Authenticate(t.Context(), bearerReq(f.sign(t, f.claims()))); err != nil || p.Tenant != "alice" || p.Via != "oauth" {
			t.Fatalf("JWT: %+v, %v", p, err)
		}
		_, err := a.Authenticate(t.Context(), bearerReq(TokenPrefix+strings.Repeat("B", 43)))
		if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "unknown or revoked") {
			t.Fatalf("unknown sandpit token: %v", err)
		}
		if _, err := a.Authenticate(t.Context(), request("", "")); !errors.Is(err, ErrNoCredentials) {
			t.Fatalf("no header: %v", err)
		}
	}
	hits := f.introHits.Load()
	Chain(o).Authenticate(t.Context(), bearerReq(spt))
	if f.introHits.Load() != hits {
		t.Fatal("a sandpit token reached the issuer's introspection endpoint")
	}
	if _, err := Chain(o).Authenticate(t.Context(), bearerReq(spt)); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("sandpit token with OAuth only: %v", err)
	}
	if _, err := Chain(store).Authenticate(t.Context(), bearerReq(f.sign(t, f.claims()))); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("JWT with tokens only: %v", err)
	}
}

func TestRequireScope(t *testing.T) {
	p := Principal{Tenant: "a", Scopes: []string{ScopeRun}}
	if err := RequireScope(p, ScopeRun); err != nil {
		t.Fatal(err)
	}
	if err := RequireScope(p, ScopeData); !errors.Is(err, ErrInsufficientScope) || !strings.Contains(err.Error(), ScopeData) {
		t.Fatalf("err %v, want ErrInsufficientScope naming %s", err, ScopeData)
	}
}
