// Package auth decides who an HTTP request is: a bearer token sandpit
// issued (stored hashed in the data directory) or an OAuth 2.1 access token
// from a configured issuer. It answers with a Principal — the tenant the
// request acts for and the scopes it holds — or with a classed error the
// HTTP layer turns into a 401 or 403. It owns no transport and no tenant
// state: who may do what, nothing else.
package auth

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"slices"
)

// Scopes name tool groups. A sandpit token holds all of them; an OAuth
// token holds those its issuer granted.
const (
	ScopeRun   = "sandpit:run"   // run_code, sessions, background runs, languages
	ScopeFiles = "sandpit:files" // file tools, snapshots, undo, workspace resources
	ScopeData  = "sandpit:data"  // query_db, describe_schema, validation tools
)

// AllScopes is every scope, in the order they are documented.
var AllScopes = []string{ScopeRun, ScopeFiles, ScopeData}

// Principal is who a request acts for.
type Principal struct {
	// Tenant names the tenant: a token's name or the OAuth subject (or the
	// configured claim). It is a valid TenantName.
	Tenant string
	// Scopes the credential holds.
	Scopes []string
	// Via says how it was proven: "token" or "oauth".
	Via string
}

// Has reports whether p holds scope.
func (p Principal) Has(scope string) bool { return slices.Contains(p.Scopes, scope) }

// Authenticator proves who an HTTP request is. Implementations must not
// log or keep the credential, and must cost a bounded amount per request
// whatever the request carries.
type Authenticator interface {
	Authenticate(ctx context.Context, r *http.Request) (Principal, error)
}

// Error classes, for the HTTP layer to branch on with errors.Is.
var (
	// ErrNoCredentials: the request carries no bearer token (401, no
	// error code, per RFC 6750 §3.1).
	ErrNoCredentials = errors.New("no bearer token")
	// ErrInvalidToken: the token is unknown, revoked, expired, malformed,
	// of another issuer or audience (401, error="invalid_token").
	ErrInvalidToken = errors.New("invalid token")
	// ErrInsufficientScope: valid, but without the scope the call needs
	// (403, error="insufficient_scope").
	ErrInsufficientScope = errors.New("insufficient scope")
)

// tenantName is what a tenant may be called: it names a directory under
// the data dir, so no separators, no dot-only names, no control bytes.
var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$`)

// ValidTenant reports whether name can name a tenant.
func ValidTenant(name string) bool { return tenantName.MatchString(name) }

type ctxKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal ctx carries.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}
