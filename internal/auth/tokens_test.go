package auth

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// rfc6750Description is the syntax of error_description (RFC 6750 §3):
// the refusals' text goes there unescaped.
var rfc6750Description = regexp.MustCompile(`^[\x20-\x21\x23-\x5B\x5D-\x7E]*$`)

func request(header string, query string) *http.Request {
	r := httptest.NewRequest("POST", "/mcp"+query, nil)
	if header != "" {
		r.Header.Set("Authorization", header)
	}
	return r
}

func TestTokensCreateListRevoke(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.Create("alice")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, TokenPrefix) || len(tok) != len(TokenPrefix)+43 {
		t.Fatalf("token %q: want %s and 43 base64url characters (256 bits)", tok, TokenPrefix)
	}
	if _, err := s.Create("bob"); err != nil {
		t.Fatal(err)
	}
	// The file holds neither token, only hashes; modes 0600 and 0700.
	b, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), tok) || strings.Contains(string(b), tok[len(TokenPrefix):]) {
		t.Fatalf("token file holds the token itself:\n%s", b)
	}
	for path, want := range map[string]os.FileMode{s.Path(): 0o600, filepath.Dir(s.Path()): 0o700} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", path, got, want)
		}
	}

	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "alice" || list[1].Name != "bob" || list[0].Created.IsZero() {
		t.Fatalf("List = %+v, want alice and bob with creation times", list)
	}

	p, err := s.Authenticate(t.Context(), request("Bearer "+tok, ""))
	if err != nil {
		t.Fatal(err)
	}
	if p.Tenant != "alice" || p.Via != "token" || !p.Has(ScopeRun) || !p.Has(ScopeFiles) || !p.Has(ScopeData) {
		t.Fatalf("principal %+v: want tenant alice via token with every scope", p)
	}

	if err := s.Revoke("alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(t.Context(), request("Bearer "+tok, "")); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("revoked token: err %v, want ErrInvalidToken", err)
	}
	if err := s.Revoke("alice"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second revoke: err %v, want ErrNotFound", err)
	}
	// A name can be issued again once revoked, and the old token stays dead.
	tok2, err := s.Create("alice")
	if err != nil {
		t.Fatal(err)
	}
	if tok2 == tok {
		t.Fatal("the same token was issued twice")
	}
	if _, err := s.Authenticate(t.Context(), request("Bearer "+tok, "")); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("old token after re-create: err %v, want ErrInvalidToken", err)
	}
}

func TestTokensCreateRefuses(t *testing.T) {
	s, err := OpenTokens(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("taken"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token string
		want        error
	}{
		{"existing", "taken", ErrExists},
		{"empty", "", ErrInvalidName},
		{"slash", "a/b", ErrInvalidName},
		{"dotdot", "..", ErrInvalidName},
		{"leading dot", ".hidden", ErrInvalidName},
		{"space", "a b", ErrInvalidName},
		{"control", "a\x1b[31m", ErrInvalidName},
		{"too long", strings.Repeat("a", 129), ErrInvalidName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Create(tc.token)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Create(%q): err %v, want %v", tc.token, err, tc.want)
			}
		})
	}
}

func TestTokensAuthenticateRefuses(t *testing.T) {
	s, err := OpenTokens(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.Create("alice")
	if err != nil {
		t.Fatal(err)
	}
	// Same length and prefix as a real token, one character off.
	last := byte('A')
	if tok[len(tok)-1] == 'A' {
		last = 'B'
	}
	flipped := tok[:len(tok)-1] + string(last)
	for _, tc := range []struct {
		name, header, query string
		want                error
		msg                 string // in the error's text
	}{
		{name: "no header", want: ErrNoCredentials},
		{name: "basic", header: "Basic YWxpY2U6cHc=", want: ErrInvalidToken, msg: "Bearer"},
		{name: "empty bearer", header: "Bearer ", want: ErrInvalidToken},
		{name: "one char off", header: "Bearer " + flipped, want: ErrInvalidToken, msg: "unknown"},
		{name: "prefix only", header: "Bearer " + TokenPrefix, want: ErrInvalidToken, msg: "malformed"},
		{name: "longer", header: "Bearer " + tok + "A", want: ErrInvalidToken, msg: "malformed"},
		{name: "not b64token", header: "Bearer " + tok + " x", want: ErrInvalidToken, msg: "malformed"},
		{name: "header too long", header: "Bearer " + TokenPrefix + strings.Repeat("A", MaxTokenBytes), want: ErrInvalidToken, msg: "longer than"},
		{name: "query access_token", query: "?access_token=" + tok, want: ErrInvalidToken, msg: "Authorization: Bearer header"},
		{name: "query token, header too", header: "Bearer " + tok, query: "?token=" + tok, want: ErrInvalidToken, msg: "query string"},
		{name: "a JWT", header: "Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln", want: ErrInvalidToken, msg: "not a sandpit token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Authenticate(t.Context(), request(tc.header, tc.query))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err %q does not say %q", err, tc.msg)
			}
			if !rfc6750Description.MatchString(err.Error()) {
				t.Fatalf("err %q has characters an RFC 6750 error_description may not", err)
			}
			if strings.Contains(err.Error(), tok) {
				t.Fatalf("error %q shows the token", err)
			}
		})
	}
	// Two Authorization headers: ambiguous, refused.
	r := request("Bearer "+tok, "")
	r.Header.Add("Authorization", "Bearer "+tok)
	if _, err := s.Authenticate(t.Context(), r); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("two headers: err %v, want ErrInvalidToken", err)
	}
	// The scheme is case-insensitive (RFC 7235).
	if _, err := s.Authenticate(t.Context(), request("bearer "+tok, "")); err != nil {
		t.Fatalf("lower-case scheme: %v", err)
	}
}

// Another process's create and revoke (here: another store on the same
// directory, as a `sandpit token` command is) are seen without a restart.
func TestTokensSeeOtherProcess(t *testing.T) {
	dir := t.TempDir()
	server, err := OpenTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	server.now = func() time.Time { return clock }
	cli, err := OpenTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cli.Create("carol")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.Authenticate(t.Context(), request("Bearer "+tok, "")); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("before the server looked again: err %v, want ErrInvalidToken (it looks at most once per %v)", err, checkEvery)
	}
	clock = clock.Add(checkEvery)
	p, err := server.Authenticate(t.Context(), request("Bearer "+tok, ""))
	if err != nil || p.Tenant != "carol" {
		t.Fatalf("after create elsewhere: %+v, %v; want carol", p, err)
	}
	if err := cli.Revoke("carol"); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(checkEvery)
	if _, err := server.Authenticate(t.Context(), request("Bearer "+tok, "")); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("after revoke elsewhere: err %v, want ErrInvalidToken", err)
	}
	// The file removed: no tokens at all.
	tok2, err := cli.Create("dave")
	if err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(checkEvery)
	if _, err := server.Authenticate(t.Context(), request("Bearer "+tok2, "")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(server.Path()); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(checkEvery)
	if _, err := server.Authenticate(t.Context(), request("Bearer "+tok2, "")); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("after the file was removed: err %v, want ErrInvalidToken", err)
	}
}

// A token file that cannot be read refuses every token as the server's
// fault (ErrUnavailable), not as the client's.
func TestTokensCorruptFile(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	s.now = func() time.Time { return clock }
	tok, err := s.Create("erin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, content string }{
		{"not json", "{"},
		{"wrong version", `{"version":2,"tokens":[]}`},
		{"bad name", `{"version":1,"tokens":[{"name":"../x","sha256":"00"}]}`},
		{"bad hash", `{"version":1,"tokens":[{"name":"x","sha256":"zz"}]}`},
		{"too large", `{"version":1,"tokens":[],"pad":"` + strings.Repeat("x", maxTokensFile) + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(s.Path(), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			clock = clock.Add(checkEvery)
			if _, err := s.Authenticate(t.Context(), request("Bearer "+tok, "")); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("err %v, want ErrUnavailable", err)
			}
			if _, err := s.List(); err == nil {
				t.Fatal("List read a corrupt file")
			}
			if _, err := OpenTokens(dir); err == nil {
				t.Fatal("OpenTokens opened a corrupt file")
			}
		})
	}
}

// Concurrent writers (each its own store, as separate processes are) lose
// none of each other's tokens: flock serialises read-modify-write.
func TestTokensConcurrentCreate(t *testing.T) {
	dir := t.TempDir()
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := OpenTokens(dir)
			if err == nil {
				_, err = s.Create(fmt.Sprintf("t%02d", i))
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s, err := OpenTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n {
		t.Fatalf("%d tokens after %d concurrent creates: %+v", len(list), n, list)
	}
}

func TestTokensFull(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Fill the file directly: MaxTokens creates would fsync a thousand times.
	var b strings.Builder
	b.WriteString(`{"version":1,"tokens":[`)
	for i := range MaxTokens {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"n%d","sha256":"%064x","created":"2025-01-01T00:00:00Z"}`, i, i)
	}
	b.WriteString("]}")
	if err := os.WriteFile(s.Path(), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("one-more"); !errors.Is(err, ErrFull) {
		t.Fatalf("create past %d: err %v, want ErrFull", MaxTokens, err)
	}
}

// TestTokensFileFromASecretVolume: OpenTokensFile reads a token file laid
// out as the kubelet mounts a Secret (NAME -> ..data/NAME, ..data -> a
// timestamped directory swapped atomically on update) and sees an update
// once it looks again; it never writes there.
func TestTokensFileFromASecretVolume(t *testing.T) {
	issuer := t.TempDir()
	store, err := OpenTokens(issuer)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := store.Create("alice")
	if err != nil {
		t.Fatal(err)
	}
	vol := t.TempDir()
	publish := func(version string) {
		t.Helper()
		b, err := os.ReadFile(store.Path())
		if err != nil {
			t.Fatal(err)
		}
		d := filepath.Join(vol, version)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "tokens.json"), b, 0o440); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(vol, "..data_tmp")
		if err := os.Symlink(version, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(vol, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	publish("..2026_12_02_1")
	if err := os.Symlink("..data/tokens.json", filepath.Join(vol, "tokens.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(vol, 0o555); err != nil { // read-only, as the volume is
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(vol, 0o755) })

	server, err := OpenTokensFile(filepath.Join(vol, "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	server.now = func() time.Time { return clock }
	if p, err := server.Authenticate(t.Context(), request("Bearer "+alice, "")); err != nil || p.Tenant != "alice" {
		t.Fatalf("alice from the volume: %+v, %v", p, err)
	}
	bob, err := store.Create("bob")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(vol, 0o755)
	publish("..2026_12_02_2")
	os.Chmod(vol, 0o555)
	clock = clock.Add(checkEvery)
	if p, err := server.Authenticate(t.Context(), request("Bearer "+bob, "")); err != nil || p.Tenant != "bob" {
		t.Fatalf("bob after the volume's update: %+v, %v", p, err)
	}
	if _, err := OpenTokensFile(filepath.Join(t.TempDir(), "none.json")); err != nil {
		t.Errorf("a missing file: %v, want an empty store", err)
	}
}
