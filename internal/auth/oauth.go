package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// OAuth bounds and defaults.
const (
	// MaxKeys is the most keys of an issuer's JWKS that are kept; the
	// rest are ignored (a JWKS holds a handful: current and next).
	MaxKeys = 32
	// maxIssuerBody bounds what is read of any answer from the issuer
	// (discovery, JWKS, introspection).
	maxIssuerBody = 1 << 20
	// maxScopes bounds the scopes a token may list.
	maxScopes = 64

	DefaultLeeway             = 30 * time.Second
	DefaultKeyRefreshInterval = 10 * time.Second
	DefaultIntrospectionTTL   = 30 * time.Second
	DefaultIntrospectionCache = 10000
	defaultHTTPTimeout        = 10 * time.Second
)

// acceptedAlgs are the signature algorithms an access token may use:
// asymmetric only. "none" would accept anyone's token, and HS* would make
// whoever holds the shared secret — or, where a library confuses key
// types, the issuer's public key — an issuer.
var acceptedAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512,
	jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512,
	jose.EdDSA,
}

// claimName is what a configured claim may be called: it appears in
// refusals a client reads, inside an RFC 6750 error_description.
var claimName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// OAuthConfig configures an OAuth 2.1 resource server: which issuer's
// access tokens, meant for which resource, name which tenant.
type OAuthConfig struct {
	// Issuer is the authorization server's issuer identifier: its
	// discovery document must name exactly this, and so must every
	// token's "iss".
	Issuer string
	// Audience is this server's resource identifier (RFC 8707), e.g.
	// https://sandpit.example/mcp: a token's "aud" must contain it, so a
	// token minted for another resource is refused here.
	Audience string
	// TenantClaim is the claim that names the tenant (default "sub"); its
	// value must be a string that ValidTenant accepts.
	TenantClaim string
	// HTTPClient talks to the issuer (default: a client with a 10 s
	// timeout).
	HTTPClient *http.Client
	// Leeway is the clock skew allowed on exp, nbf and iat (default 30 s).
	Leeway time.Duration
	// KeyRefreshInterval is the shortest time between two fetches of the
	// issuer's keys when a token names a key not known yet (default 10 s):
	// tokens with made-up key ids cost no more than one fetch per interval.
	KeyRefreshInterval time.Duration

	// Introspect checks every token with the issuer's RFC 7662
	// introspection endpoint as well, so that a token revoked at the
	// issuer is refused here within IntrospectionTTL. Without it a JWT is
	// good until it expires, whatever the issuer says.
	Introspect bool
	// IntrospectionURL is the endpoint (default: the discovery document's
	// introspection_endpoint). Setting it implies Introspect.
	IntrospectionURL string
	// IntrospectionClientID and IntrospectionClientSecret, when set,
	// authenticate this server to the endpoint (HTTP Basic, RFC 7662 §2.1).
	IntrospectionClientID     string
	IntrospectionClientSecret string
	// IntrospectionTTL is how long an answer is believed (default 30 s;
	// never past the token's expiry).
	IntrospectionTTL time.Duration
	// IntrospectionCacheSize is the most answers kept (default 10000).
	IntrospectionCacheSize int
}

// OAuth checks OAuth access tokens (JWTs) of one issuer for one resource.
// It is an Authenticator: a valid token's principal is the tenant its
// TenantClaim names, with the scopes its "scope" or "scp" claim lists.
type OAuth struct {
	cfg    OAuthConfig
	client *http.Client
	now    func() time.Time

	jwksURL  string
	authzURL string // for a browser's login: the authorization endpoint
	tokenURL string // and the token endpoint
	keys     keyCache
	intro    *introspector // nil: no introspection
	tenantCl string
}

// Endpoints are the issuer's authorization and token endpoints, from its
// discovery document (empty when it names none), for a browser's login.
func (o *OAuth) Endpoints() (authorization, token string) { return o.authzURL, o.tokenURL }

// discovery is the part of an RFC 8414 / OpenID Connect discovery
// document read here.
type discovery struct {
	Issuer                string `json:"issuer"`
	JWKSURI               string `json:"jwks_uri"`
	IntrospectionEndpoint string `json:"introspection_endpoint"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
}

// NewOAuth reads the issuer's discovery document and keys; it fails if the
// issuer cannot be reached or does not describe itself as cfg.Issuer, so a
// misconfigured server refuses to start rather than every request.
func NewOAuth(ctx context.Context, cfg OAuthConfig) (*OAuth, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("oauth: no issuer configured")
	}
	if cfg.Audience == "" {
		return nil, errors.New("oauth: no audience configured: set it to this server's resource URL (RFC 8707), so tokens minted for other resources are refused")
	}
	if cfg.TenantClaim == "" {
		cfg.TenantClaim = "sub"
	}
	if !claimName.MatchString(cfg.TenantClaim) {
		return nil, fmt.Errorf("oauth: tenant claim %q: want a claim name of letters, digits, '_', '-', '.' or ':'", cfg.TenantClaim)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: defaultHTTPTimeout}
	}
	if cfg.Leeway <= 0 {
		cfg.Leeway = DefaultLeeway
	}
	if cfg.KeyRefreshInterval <= 0 {
		cfg.KeyRefreshInterval = DefaultKeyRefreshInterval
	}
	if cfg.IntrospectionTTL <= 0 {
		cfg.IntrospectionTTL = DefaultIntrospectionTTL
	}
	if cfg.IntrospectionCacheSize <= 0 {
		cfg.IntrospectionCacheSize = DefaultIntrospectionCache
	}
	o := &OAuth{cfg: cfg, client: cfg.HTTPClient, now: time.Now, tenantCl: cfg.TenantClaim}
	d, err := o.discover(ctx)
	if err != nil {
		return nil, err
	}
	if d.JWKSURI == "" {
		return nil, fmt.Errorf("oauth: issuer %s publishes no jwks_uri: its tokens cannot be verified", cfg.Issuer)
	}
	o.jwksURL = d.JWKSURI
	o.authzURL, o.tokenURL = d.AuthorizationEndpoint, d.TokenEndpoint
	o.keys.fetch = o.fetchKeys
	o.keys.interval = cfg.KeyRefreshInterval
	o.keys.now = func() time.Time { return o.now() }
	if err := o.keys.refresh(ctx, true); err != nil {
		return nil, err
	}
	if cfg.Introspect || cfg.IntrospectionURL != "" {
		u := cfg.IntrospectionURL
		if u == "" {
			u = d.IntrospectionEndpoint
		}
		if u == "" {
			return nil, fmt.Errorf("oauth: introspection asked for, but issuer %s publishes no introspection_endpoint: configure its URL", cfg.Issuer)
		}
		o.intro = &introspector{url: u, cfg: cfg, client: o.client, cache: map[[32]byte]introAnswer{}}
	}
	return o, nil
}

// Issuer is the issuer whose tokens are accepted (for RFC 9728 protected
// resource metadata's authorization_servers).
func (o *OAuth) Issuer() string { return o.cfg.Issuer }

// Audience is the resource identifier tokens must be meant for.
func (o *OAuth) Audience() string { return o.cfg.Audience }

// discover fetches the issuer's metadata: OpenID Connect's
// /.well-known/openid-configuration appended to the issuer, else RFC
// 8414's /.well-known/oauth-authorization-server inserted before its path.
func (o *OAuth) discover(ctx context.Context) (*discovery, error) {
	iss, err := url.Parse(o.cfg.Issuer)
	if err != nil || iss.Host == "" || (iss.Scheme != "https" && iss.Scheme != "http") {
		return nil, fmt.Errorf("oauth: issuer %q is not an http(s) URL", o.cfg.Issuer)
	}
	rfc8414 := *iss
	rfc8414.Path = "/.well-known/oauth-authorization-server" + strings.TrimSuffix(iss.Path, "/")
	urls := []string{strings.TrimSuffix(o.cfg.Issuer, "/") + "/.well-known/openid-configuration", rfc8414.String()}
	var errs []error
	for _, u := range urls {
		var d discovery
		if err := o.getJSON(ctx, u, &d); err != nil {
			errs = append(errs, err)
			continue
		}
		if d.Issuer != o.cfg.Issuer {
			return nil, fmt.Errorf("oauth: %s names issuer %q, not %q: configure the issuer exactly as it names itself (tokens carry that)", u, d.Issuer, o.cfg.Issuer)
		}
		return &d, nil
	}
	return nil, fmt.Errorf("oauth: no discovery document for issuer %s: %w", o.cfg.Issuer, errors.Join(errs...))
}

// getJSON GETs u and decodes at most maxIssuerBody bytes of JSON.
func (o *OAuth) getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := o.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeBody(resp, u, v)
}

func decodeBody(resp *http.Response, u string, v any) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxIssuerBody+1))
	if err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	if len(b) > maxIssuerBody {
		return fmt.Errorf("%s: answer larger than %d bytes", u, maxIssuerBody)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	return nil
}

// fetchKeys fetches the JWKS and keeps its usable signing keys: public,
// valid, for signatures, of an accepted algorithm; at most MaxKeys.
func (o *OAuth) fetchKeys(ctx context.Context) ([]jose.JSONWebKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := o.getJSON(ctx, o.jwksURL, &set); err != nil {
		return nil, fmt.Errorf("oauth: keys: %w", err)
	}
	var keys []jose.JSONWebKey
	for _, raw := range set.Keys {
		if len(keys) == MaxKeys {
			slog.Warn("oauth: issuer publishes more keys than are kept; the rest are ignored", "jwks", o.jwksURL, "kept", MaxKeys, "published", len(set.Keys))
			break
		}
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil {
			continue // a key of a kind go-jose does not know: not one of ours
		}
		if !k.Valid() || !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
			continue
		}
		if k.Algorithm != "" && !slices.Contains(acceptedAlgs, jose.SignatureAlgorithm(k.Algorithm)) {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("oauth: %s holds no usable signing key", o.jwksURL)
	}
	return keys, nil
}

// accessClaims are the claims read besides the registered ones.
type accessClaims struct {
	Scope json.RawMessage `json:"scope"`
	Scp   json.RawMessage `json:"scp"`
}

// Authenticate implements Authenticator.
func (o *OAuth) Authenticate(ctx context.Context, r *http.Request) (Principal, error) {
	tok, err := bearer(r) // bounded: MaxTokenBytes, before any parsing
	if err != nil {
		return Principal{}, err
	}
	if strings.HasPrefix(tok, TokenPrefix) {
		// Never sent to the issuer: it is ours, and a secret.
		return Principal{}, notOurs("a sandpit token, not an OAuth access token")
	}
	return o.verify(ctx, tok)
}

func (o *OAuth) verify(ctx context.Context, tok string) (Principal, error) {
	parsed, err := jwt.ParseSigned(tok, acceptedAlgs)
	if err != nil || len(parsed.Headers) != 1 {
		return Principal{}, invalid("not a JWT signed with an accepted algorithm (asymmetric: RS*, PS*, ES*, EdDSA)")
	}
	hdr := parsed.Headers[0]
	now := o.now()
	expected := jwt.Expected{Issuer: o.cfg.Issuer, AnyAudience: jwt.Audience{o.cfg.Audience}, Time: now}

	// Refuse on the unverified claims first: a token of another issuer or
	// long expired costs no signature check and, above all, no fetch of
	// the keys (acceptance always waits for the verified claims below).
	var pre jwt.Claims
	if err := parsed.UnsafeClaimsWithoutVerification(&pre); err != nil {
		return Principal{}, invalid("malformed claims")
	}
	if err := pre.ValidateWithLeeway(expected, o.cfg.Leeway); err != nil {
		return Principal{}, claimsError(err)
	}

	keys, err := o.keys.lookup(ctx, hdr.KeyID, hdr.Algorithm)
	if err != nil {
		return Principal{}, err
	}
	var std jwt.Claims
	var extra accessClaims
	claims := map[string]json.RawMessage{}
	verified := false
	for _, k := range keys {
		if parsed.Claims(k.Key, &std, &extra, &claims) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return Principal{}, invalid("bad signature")
	}
	if std.Expiry == nil {
		return Principal{}, invalid("no expiry (exp)")
	}
	if err := std.ValidateWithLeeway(expected, o.cfg.Leeway); err != nil {
		return Principal{}, claimsError(err)
	}
	var tenant string
	if raw, ok := claims[o.tenantCl]; !ok || json.Unmarshal(raw, &tenant) != nil || !ValidTenant(tenant) {
		return Principal{}, invalid("tenant claim " + o.tenantCl + " missing or not a valid tenant name")
	}
	scopes, err := scopesOf(extra)
	if err != nil {
		return Principal{}, err
	}
	if o.intro != nil {
		if err := o.intro.check(ctx, tok, std.Expiry.Time(), now); err != nil {
			return Principal{}, err
		}
	}
	return Principal{Tenant: tenant, Scopes: scopes, Via: "oauth"}, nil
}

func claimsError(err error) error {
	switch {
	case errors.Is(err, jwt.ErrExpired):
		return invalid("expired")
	case errors.Is(err, jwt.ErrNotValidYet):
		return invalid("not valid yet")
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return invalid("issued in the future")
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return invalid("wrong issuer")
	case errors.Is(err, jwt.ErrInvalidAudience):
		return invalid("wrong audience")
	}
	return invalid("invalid claims")
}

// scopesOf reads "scope" (a space-separated string, RFC 9068/8693) or, if
// absent, "scp" (an array, as hydra and others issue).
func scopesOf(c accessClaims) ([]string, error) {
	var scopes []string
	switch {
	case len(c.Scope) > 0 && string(c.Scope) != "null":
		var s string
		if json.Unmarshal(c.Scope, &s) != nil {
			return nil, invalid("claim scope is not a string")
		}
		scopes = strings.Fields(s)
	case len(c.Scp) > 0 && string(c.Scp) != "null":
		if json.Unmarshal(c.Scp, &scopes) != nil {
			var s string
			if json.Unmarshal(c.Scp, &s) != nil {
				return nil, invalid("claim scp is neither a list nor a string")
			}
			scopes = strings.Fields(s)
		}
	}
	if len(scopes) > maxScopes {
		return nil, invalid(fmt.Sprintf("more than %d scopes", maxScopes))
	}
	return scopes, nil
}

// RequireScope returns nil if p holds scope, else an ErrInsufficientScope
// that names it (for the 403's error_description and scope).
func RequireScope(p Principal, scope string) error {
	if p.Has(scope) {
		return nil
	}
	return fmt.Errorf("%w: this call needs scope %s", ErrInsufficientScope, scope)
}

// keyCache holds the issuer's keys and fetches them again when a token
// names one it does not hold — at most once per interval, one fetch at a
// time, without holding its lock while fetching.
type keyCache struct {
	fetch    func(context.Context) ([]jose.JSONWebKey, error)
	interval time.Duration
	now      func() time.Time

	mu       sync.Mutex
	keys     []jose.JSONWebKey
	fetched  time.Time     // when the last fetch started
	inflight chan struct{} // closed when the running fetch ends
}

// lookup returns the keys that may have signed a token with header kid
// and alg: those with that kid (all, if it has none) whose type fits alg.
func (c *keyCache) lookup(ctx context.Context, kid, alg string) ([]jose.JSONWebKey, error) {
	if ks := c.match(kid, alg); len(ks) > 0 {
		return ks, nil
	}
	if err := c.refresh(ctx, false); err != nil {
		return nil, err
	}
	if ks := c.match(kid, alg); len(ks) > 0 {
		return ks, nil
	}
	return nil, invalid("unknown key")
}

func (c *keyCache) match(kid, alg string) []jose.JSONWebKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []jose.JSONWebKey
	for _, k := range c.keys {
		if (kid == "" || k.KeyID == kid) && (k.Algorithm == "" || k.Algorithm == alg) && keyFits(k, alg) {
			out = append(out, k)
		}
	}
	return out
}

// keyFits reports whether k's type can verify alg, so that a token cannot
// pick how a key is used.
func keyFits(k jose.JSONWebKey, alg string) bool {
	switch {
	case strings.HasPrefix(alg, "RS"), strings.HasPrefix(alg, "PS"):
		return keyType(k) == "RSA"
	case strings.HasPrefix(alg, "ES"):
		return keyType(k) == "EC"
	case alg == string(jose.EdDSA):
		return keyType(k) == "OKP"
	}
	return false
}

func keyType(k jose.JSONWebKey) string {
	switch k.Key.(type) {
	case *rsa.PublicKey:
		return "RSA"
	case *ecdsa.PublicKey:
		return "EC"
	case ed25519.PublicKey:
		return "OKP"
	}
	return ""
}

// refresh fetches the keys unless a fetch started less than interval ago
// (force: regardless). A caller that finds a fetch running waits for it.
// A failed fetch keeps the keys held before.
func (c *keyCache) refresh(ctx context.Context, force bool) error {
	c.mu.Lock()
	if ch := c.inflight; ch != nil {
		c.mu.Unlock()
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
	}
	if !force && c.now().Sub(c.fetched) < c.interval {
		c.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	c.inflight = ch
	c.fetched = c.now()
	c.mu.Unlock()

	// The fetch serves every waiter: the caller that started it going away
	// must not cut it short.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultHTTPTimeout)
	keys, err := c.fetch(fctx)
	cancel()

	c.mu.Lock()
	if err == nil {
		c.keys = keys
	}
	c.inflight = nil
	close(ch)
	c.mu.Unlock()
	if err != nil {
		slog.Warn("oauth: fetching the issuer's keys failed; keeping those held", "err", err)
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// introspector asks the issuer whether a token is still active (RFC
// 7662) and believes each answer for a while.
type introspector struct {
	url    string
	cfg    OAuthConfig
	client *http.Client

	mu    sync.Mutex
	cache map[[32]byte]introAnswer // by SHA-256 of the token: tokens are not kept
}

type introAnswer struct {
	active bool
	until  time.Time
}

// check returns nil if the issuer says tok is active. Only tokens that
// passed every local check get here, so the cache holds answers about
// tokens the issuer really issued, not whatever a client makes up.
func (in *introspector) check(ctx context.Context, tok string, exp, now time.Time) error {
	key := sha256.Sum256([]byte(tok))
	in.mu.Lock()
	a, ok := in.cache[key]
	in.mu.Unlock()
	if !ok || !now.Before(a.until) {
		active, err := in.ask(ctx, tok)
		if err != nil {
			return fmt.Errorf("%w: introspection: %w", ErrUnavailable, err)
		}
		a = introAnswer{active: active, until: now.Add(in.cfg.IntrospectionTTL)}
		if a.until.After(exp) {
			a.until = exp
		}
		in.store(key, a, now)
	}
	if !a.active {
		return invalid("revoked or inactive")
	}
	return nil
}

// store keeps a, first making room: the expired answers go, and if the
// cache is still full, as many others as needed (map order: arbitrary).
func (in *introspector) store(key [32]byte, a introAnswer, now time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.cache) >= in.cfg.IntrospectionCacheSize {
		for k, v := range in.cache {
			if !now.Before(v.until) {
				delete(in.cache, k)
			}
		}
		for k := range in.cache {
			if len(in.cache) < in.cfg.IntrospectionCacheSize {
				break
			}
			delete(in.cache, k)
		}
	}
	in.cache[key] = a
}

func (in *introspector) ask(ctx context.Context, tok string) (bool, error) {
	form := url.Values{"token": {tok}, "token_type_hint": {"access_token"}}
	ctx, cancel := context.WithTimeout(ctx, defaultHTTPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", in.url, strings.NewReader(form.Encode()))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if in.cfg.IntrospectionClientID != "" {
		req.SetBasicAuth(url.QueryEscape(in.cfg.IntrospectionClientID), url.QueryEscape(in.cfg.IntrospectionClientSecret))
	}
	resp, err := in.client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var ans struct {
		Active bool `json:"active"`
	}
	if err := decodeBody(resp, in.url, &ans); err != nil {
		return false, err
	}
	return ans.Active, nil
}
