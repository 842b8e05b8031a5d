package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// tokenCLI runs the built binary's `sandpit token ARGS...` and returns its
// stdout and stderr.
func tokenCLI(t *testing.T, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"token"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// The real binary creates, lists and revokes tokens, and what it creates
// is what the server's authenticator (a store opened on the same data dir,
// as serve opens it) accepts, until it is revoked.
func TestTokenCommand(t *testing.T) {
	dir := t.TempDir()
	out, errOut, err := tokenCLI(t, nil, "create", "--data-dir", dir, "alice")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	tok := lines[len(lines)-1]
	if !strings.HasPrefix(tok, auth.TokenPrefix) {
		t.Fatalf("create printed %q: want the token as the last line", out)
	}
	if !strings.Contains(errOut, "shown only now") || strings.Contains(errOut, tok) {
		t.Fatalf("create's note on stderr: %q", errOut)
	}

	// The data dir comes from the environment too.
	if _, errOut, err := tokenCLI(t, []string{"SANDPIT_DATA_DIR=" + dir}, "create", "bob"); err != nil {
		t.Fatalf("create bob: %v\n%s", err, errOut)
	}

	out, errOut, err = tokenCLI(t, nil, "list", "--data-dir", dir)
	if err != nil {
		t.Fatalf("list: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "alice") || !strings.Contains(out, "bob") || strings.Contains(out, tok) {
		t.Fatalf("list printed:\n%s", out)
	}
	out, _, err = tokenCLI(t, nil, "list", "--data-dir", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var list []auth.TokenInfo
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	if len(list) != 2 || list[0].Name != "alice" || list[1].Name != "bob" || list[0].Created.IsZero() {
		t.Fatalf("list --json = %+v", list)
	}

	store, err := auth.OpenTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/mcp", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	p, err := store.Authenticate(t.Context(), r)
	if err != nil || p.Tenant != "alice" {
		t.Fatalf("the created token: %+v, %v; want tenant alice", p, err)
	}

	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"existing name", []string{"create", "--data-dir", dir, "alice"}, "token exists"},
		{"invalid name", []string{"create", "--data-dir", dir, "../x"}, "invalid token name"},
		{"no name", []string{"create", "--data-dir", dir}, "usage"},
		{"unknown revoke", []string{"revoke", "--data-dir", dir, "nobody"}, "no such token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, err := tokenCLI(t, nil, tc.args...)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || !strings.Contains(errOut, tc.msg) {
				t.Fatalf("err %v, stderr %q: want a failure saying %q", err, errOut, tc.msg)
			}
		})
	}

	if _, errOut, err := tokenCLI(t, nil, "revoke", "--data-dir", dir, "alice"); err != nil {
		t.Fatalf("revoke: %v\n%s", err, errOut)
	}
	// The store opened before the revocation — a running server's — comes
	// to refuse the token without being reopened (it looks again within a
	// second of the change).
	testenv.Eventually(t, "the running store to refuse the revoked token", func() bool {
		_, err := store.Authenticate(t.Context(), r)
		if err != nil && !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("revoked token: err %v, want ErrInvalidToken", err)
		}
		return err != nil
	})
	out, _, _ = tokenCLI(t, nil, "list", "--data-dir", dir)
	if strings.Contains(out, "alice") || !strings.Contains(out, "bob") {
		t.Fatalf("list after revoke:\n%s", out)
	}
}
