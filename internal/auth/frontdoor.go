package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
)

// Headers a cluster's front door sets on each request it forwards to a
// node: who the request acts for, as the front door proved it. A node
// believes them only from a request that carries the cluster's secret
// (FrontDoor), and a front door always overwrites what a client sent.
const (
	HeaderTenant = "X-Sandpit-Tenant"
	HeaderScopes = "X-Sandpit-Scopes"
)

// MinClusterSecretBytes is the shortest cluster secret accepted.
const MinClusterSecretBytes = 32

// FrontDoor authenticates requests a cluster's front door forwarded to
// this node: the bearer token is the front door's own — its Kubernetes
// service-account token, which a Reviewer checks (TokenReview), or the
// cluster's shared secret — and the tenant and scopes are the front door's
// headers. Any other bearer token is not its kind (Chain asks the next
// authenticator).
type FrontDoor struct {
	sum      [sha256.Size]byte
	secret   bool
	reviewer Reviewer
}

// A Reviewer says whether a bearer token is a front door's own credential
// (a service-account token of the front doors' account, for this
// audience). An error means it could not tell (the API server did not
// answer): the request is refused as unavailable, never let through.
type Reviewer interface {
	IsFrontDoor(ctx context.Context, token string) (bool, error)
}

// ReadClusterSecret reads the secret shared by front doors and nodes
// (surrounding white space is not part of it).
func ReadClusterSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cluster secret: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if len(s) < MinClusterSecretBytes || !isB64Token(s) {
		return "", fmt.Errorf("cluster secret %s: want at least %d characters of a bearer token's alphabet (e.g. `openssl rand -hex 32`)", path, MinClusterSecretBytes)
	}
	return s, nil
}

// NewFrontDoor accepts requests bearing secret (none when it is empty)
// and, when reviewer is not nil, those bearing a token it accepts.
func NewFrontDoor(secret string, reviewer Reviewer) *FrontDoor {
	return &FrontDoor{sum: sha256.Sum256([]byte(secret)), secret: secret != "", reviewer: reviewer}
}

// Authenticate implements Authenticator.
func (d *FrontDoor) Authenticate(ctx context.Context, r *http.Request) (Principal, error) {
	tok, err := bearer(r)
	if err != nil {
		return Principal{}, err
	}
	if !d.ours(tok) {
		if d.reviewer == nil || !looksLikeJWT(tok) {
			return Principal{}, errNotOurs
		}
		ok, err := d.reviewer.IsFrontDoor(ctx, tok)
		if err != nil {
			return Principal{}, fmt.Errorf("%w: checking a front door's token: %w", ErrUnavailable, err)
		}
		if !ok {
			return Principal{}, errNotOurs
		}
	}
	vals := r.Header.Values(HeaderTenant)
	if len(vals) != 1 || !ValidTenant(vals[0]) {
		return Principal{}, invalid("the front door named no valid tenant")
	}
	var scopes []string
	for _, s := range strings.Fields(r.Header.Get(HeaderScopes)) {
		if !slices.Contains(AllScopes, s) {
			return Principal{}, invalid(fmt.Sprintf("the front door named an unknown scope %q", s))
		}
		scopes = append(scopes, s)
	}
	return Principal{Tenant: vals[0], Scopes: scopes, Via: "front-door"}, nil
}

// ours reports whether tok is the cluster secret. Compared as digests:
// constant time whatever the lengths.
func (d *FrontDoor) ours(tok string) bool {
	sum := sha256.Sum256([]byte(tok))
	return d.secret && subtle.ConstantTimeCompare(sum[:], d.sum[:]) == 1
}

// looksLikeJWT: three base64url parts. Only such a token is worth a
// review: sandpit's own tokens never are, and are not sent anywhere.
func looksLikeJWT(tok string) bool {
	return strings.Count(tok, ".") == 2 && !strings.HasPrefix(tok, TokenPrefix)
}

// SetForwarded replaces any identity headers on h with p's: what a client
// sent under these names never reaches a node.
func SetForwarded(h http.Header, p Principal, credential string) {
	h.Del(HeaderTenant)
	h.Del(HeaderScopes)
	h.Set(HeaderTenant, p.Tenant)
	h.Set(HeaderScopes, strings.Join(p.Scopes, " "))
	h.Set("Authorization", "Bearer "+credential)
}
