package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// MaxTokenBytes bounds the Authorization header any authenticator here
// reads: longer is refused before it is parsed, hashed or decoded. A JWT
// with a few dozen claims is 1-2 KiB; 16 KiB leaves room for generous
// issuers and none for a header built to make each request expensive.
const MaxTokenBytes = 16 << 10

// ErrUnavailable: the credential could not be checked because something
// the check depends on failed — the issuer's keys or introspection
// endpoint cannot be reached, the token file cannot be read. It is the
// server's fault, not the client's (503, and the client may retry); the
// request is refused all the same.
var ErrUnavailable = errors.New("authentication unavailable")

// errNotOurs marks an ErrInvalidToken that only says the token is of a
// kind this authenticator does not check (a sandpit token at the OAuth
// verifier, a JWT at the token store): Chain then asks the next one.
var errNotOurs = errors.New("not this authenticator's kind of token")

// invalid returns an ErrInvalidToken whose message is reason: short, safe
// to show a client, never containing the token, and within RFC 6750's
// error_description characters (printable ASCII but '"' and '\'), so the
// HTTP layer can put err.Error() into a WWW-Authenticate header as it is.
func invalid(reason string) error { return fmt.Errorf("%w: %s", ErrInvalidToken, reason) }

// notOurs is invalid(reason) that Chain passes over.
func notOurs(reason string) error {
	return fmt.Errorf("%w: %s%w", ErrInvalidToken, reason, silent{errNotOurs})
}

// silent wraps an error so that errors.Is finds it while its text adds
// nothing to the message.
type silent struct{ err error }

func (s silent) Error() string { return "" }
func (s silent) Unwrap() error { return s.err }

// bearer returns the bearer token r carries in its Authorization header:
// the one place RFC 6750 tokens are accepted here. A token in the query
// string (?access_token=, ?token=) is refused, not ignored: URLs end up in
// logs, proxies and browser history, and a client that sends one there
// should learn why it fails. The body is never read for one.
func bearer(r *http.Request) (string, error) {
	q := r.URL.Query()
	for _, k := range []string{"access_token", "token"} {
		if q.Has(k) {
			return "", invalid("a token in the query string is refused: send it as an Authorization: Bearer header")
		}
	}
	vals := r.Header.Values("Authorization")
	switch {
	case len(vals) == 0:
		return "", ErrNoCredentials
	case len(vals) > 1:
		return "", invalid("more than one Authorization header")
	}
	h := vals[0]
	if len(h) > MaxTokenBytes {
		return "", invalid(fmt.Sprintf("Authorization header longer than %d bytes", MaxTokenBytes))
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", invalid("the Authorization scheme must be Bearer")
	}
	tok = strings.TrimLeft(tok, " ")
	if tok == "" {
		return "", invalid("empty bearer token")
	}
	if !isB64Token(tok) {
		return "", invalid("malformed bearer token")
	}
	return tok, nil
}

// isB64Token reports whether s has RFC 6750's b64token syntax:
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isB64Token(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' {
			continue
		}
		break
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}

// Chain returns an Authenticator that asks each of authenticators in turn
// and answers with the first that recognises the token as its kind: a
// sandpit token (TokenPrefix) is checked by the token store only, anything
// else by the OAuth verifier only, so a sandpit token never reaches an
// issuer's introspection endpoint and a JWT never costs a token-store scan.
// A token none of them recognises is ErrInvalidToken.
func Chain(authenticators ...Authenticator) Authenticator {
	return chain(authenticators)
}

type chain []Authenticator

func (c chain) Authenticate(ctx context.Context, r *http.Request) (Principal, error) {
	err := error(ErrNoCredentials)
	for _, a := range c {
		var p Principal
		p, err = a.Authenticate(ctx, r)
		if err == nil || !errors.Is(err, errNotOurs) {
			return p, err
		}
	}
	if errors.Is(err, errNotOurs) {
		return Principal{}, invalid("not a token this server accepts")
	}
	return Principal{}, err
}
