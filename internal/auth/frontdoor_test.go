package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFrontDoor(t *testing.T) {
	secret := strings.Repeat("s3cr3t", 8)
	d := NewFrontDoor(secret)
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
