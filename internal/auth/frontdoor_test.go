package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeReviewer stands in for the API server's TokenReview (a unit test of
// the front door's handling; TestReviewerOnARealAPIServer reviews for
// real): it accepts good, refuses others, fails on down, and records what
// it was asked.
type fakeReviewer struct{ asked []string }

func (f *fakeReviewer) IsFrontDoor(_ context.Context, tok string) (bool, error) {
	f.asked = append(f.asked, tok)
	switch tok {
	case "h.good.s":
		return true, nil
	case "h.down.s":
		return false, errors.New("connection refused")
	}
	return false, nil
}

func TestFrontDoor(t *testing.T) {
	secret := strings.Repeat("s3cr3t", 8)
	rev := &fakeReviewer{}
	d := NewFrontDoor(secret, rev)
	tests := []struct {
		name    string
		headers map[string][]string
		want    Principal
		wantErr error
	}{
		{"forwarded", map[string][]string{"Authorization": {"Bearer " + secret}, HeaderTenant: {"alice"}, HeaderScopes: {"sandpit:run sandpit:files"}},
			Principal{Tenant: "alice", Scopes: []string{"sandpit:run", "sandpit:files"}, Via: "front-door"}, nil},
		{"no scopes", map[string][]string{"Authorization": {"Bearer " + secret}, HeaderTenant: {"alice"}},
			Principal{Tenant: "alice", Via: "front-door"}, nil},
		{"another token is not ours", map[string][]string{"Authorization": {"Bearer " + secret + "x"}, HeaderTenant: {"alice"}}, Principal{}, errNotOurs},
		{"no credentials", map[string][]string{HeaderTenant: {"alice"}}, Principal{}, ErrNoCredentials},
		{"no tenant", map[string][]string{"Authorization": {"Bearer " + secret}}, Principal{}, ErrInvalidToken},
		{"two tenants", map[string][]string{"Authorization": {"Bearer " + secret}, HeaderTenant: {"alice", "bob"}}, Principal{}, ErrInvalidToken},
		{"invalid tenant name", map[string][]string{"Authorization": {"Bearer " + secret}, HeaderTenant: {"../etc"}}, Principal{}, ErrInvalidToken},
		{"unknown scope", map[string][]string{"Authorization": {"Bearer " + secret}, HeaderTenant: {"alice"}, HeaderScopes: {"sandpit:root"}}, Principal{}, ErrInvalidToken},
		{"a reviewed front door token", map[string][]string{"Authorization": {"Bearer h.good.s"}, HeaderTenant: {"alice"}, HeaderScopes: {"sandpit:run"}},
			Principal{Tenant: "alice", Scopes: []string{"sandpit:run"}, Via: "front-door"}, nil},
		{"a token the review refuses is not ours", map[string][]string{"Authorization": {"Bearer h.other.s"}, HeaderTenant: {"alice"}}, Principal{}, errNotOurs},
		{"no review: unavailable, never let through", map[string][]string{"Authorization": {"Bearer h.down.s"}, HeaderTenant: {"alice"}}, Principal{}, ErrUnavailable},
		{"a reviewed token still needs a tenant", map[string][]string{"Authorization": {"Bearer h.good.s"}}, Principal{}, ErrInvalidToken},
		{"a sandpit token is never sent for review", map[string][]string{"Authorization": {"Bearer " + TokenPrefix + "a.b.c"}, HeaderTenant: {"alice"}}, Principal{}, errNotOurs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
			for k, vs := range tt.headers {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			got, err := d.Authenticate(t.Context(), r)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Tenant != tt.want.Tenant || got.Via != tt.want.Via || strings.Join(got.Scopes, " ") != strings.Join(tt.want.Scopes, " ") {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	for _, tok := range rev.asked {
		if strings.HasPrefix(tok, TokenPrefix) || tok == secret || strings.HasPrefix(tok, secret) {
			t.Errorf("%q was sent for review", tok)
		}
	}
	// No secret given: nothing matches an empty one.
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("Authorization", "Bearer x")
	r.Header.Set(HeaderTenant, "alice")
	if _, err := NewFrontDoor("", nil).Authenticate(t.Context(), r); !errors.Is(err, errNotOurs) {
		t.Errorf("a front door without secret or reviewer: %v, want not ours", err)
	}
}

// A client's own identity headers never reach a node: the front door
// replaces them.
func TestSetForwarded(t *testing.T) {
	h := http.Header{}
	h.Add(HeaderTenant, "mallory")
	h.Add(HeaderTenant, "alice")
	h.Set(HeaderScopes, "sandpit:run sandpit:files sandpit:data")
	h.Set("Authorization", "Bearer the-clients-token")
	SetForwarded(h, Principal{Tenant: "bob", Scopes: []string{"sandpit:run"}}, "cluster-secret")
	if got := h.Values(HeaderTenant); len(got) != 1 || got[0] != "bob" {
		t.Errorf("tenant headers %q, want only bob", got)
	}
	if got := h.Get(HeaderScopes); got != "sandpit:run" {
		t.Errorf("scopes %q, want bob's", got)
	}
	if got := h.Get("Authorization"); got != "Bearer cluster-secret" {
		t.Errorf("Authorization %q, want the cluster secret", got)
	}
}

func TestReadClusterSecret(t *testing.T) {
	dir := t.TempDir()
	for name, tt := range map[string]struct {
		content string
		ok      bool
	}{
		"hex 64":    {strings.Repeat("ab", 32) + "\n", true},
		"too short": {"short", false},
		"spaces":    {strings.Repeat("a b ", 10), false},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		os.WriteFile(p, []byte(tt.content), 0o600)
		s, err := ReadClusterSecret(p)
		if (err == nil) != tt.ok {
			t.Errorf("%s: %q, %v; want ok %v", name, s, err, tt.ok)
		}
		if err == nil && s != strings.TrimSpace(tt.content) {
			t.Errorf("%s: %q, want the trimmed content", name, s)
		}
	}
	if _, err := ReadClusterSecret(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file read as a secret")
	}
}
