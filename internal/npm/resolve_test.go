package npm

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/artifact"
)

func deps(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name   string
		pkgs   []*tpkg
		latest map[string]string
		specs  []string
		want   string   // planText
		notes  []string // each in some note
	}{
		{
			name: "a package with a dependency",
			pkgs: []*tpkg{
				{name: "is-odd", version: "3.0.1", deps: deps("is-number", "^6.0.0")},
				{name: "is-number", version: "6.0.0"},
				{name: "is-number", version: "6.1.0"},
				{name: "is-number", version: "7.0.0"},
			},
			specs: []string{"is-odd@3.0.1"},
			want: "node_modules/is-number is-number@6.1.0 [is-odd@3.0.1]\n" +
				"node_modules/is-odd is-odd@3.0.1 [request]\n",
		},
		{
			name: "latest is preferred when it satisfies",
			pkgs: []*tpkg{
				{name: "a", version: "1.0.0"}, {name: "a", version: "1.2.0"}, {name: "a", version: "1.5.0"},
			},
			latest: map[string]string{"a": "1.2.0"},
			specs:  []string{"a@^1"},
			want:   "node_modules/a a@1.2.0 [request]\n",
		},
		{
			name:  "the latest tag",
			pkgs:  []*tpkg{{name: "a", version: "1.0.0"}, {name: "a", version: "2.0.0-rc.1"}, {name: "a", version: "1.5.0"}},
			specs: []string{"a@latest"},
			want:  "node_modules/a a@1.5.0 [request]\n",
		},
		{
			name: "a nested version conflict",
			pkgs: []*tpkg{
				{name: "app", version: "1.0.0", deps: deps("lib", "^1.0.0", "tool", "1.0.0")},
				{name: "tool", version: "1.0.0", deps: deps("lib", "^2.0.0")},
				{name: "lib", version: "1.1.0"},
				{name: "lib", version: "2.3.0"},
			},
			specs: []string{"app"},
			want: "node_modules/app app@1.0.0 [request]\n" +
				"node_modules/lib lib@1.1.0 [app@1.0.0]\n" +
				"node_modules/tool tool@1.0.0 [app@1.0.0]\n" +
				"node_modules/tool/node_modules/lib lib@2.3.0 [tool@1.0.0]\n",
		},
		{
			// c is placed at the top for a; b's c@2 cannot go there, so it
			// nests under b; d (under b's c@2) needs c@1 and finds the top one.
			name: "deduplicated where the ranges agree",
			pkgs: []*tpkg{
				{name: "a", version: "1.0.0", deps: deps("c", "1.x", "b", "*")},
				{name: "b", version: "1.0.0", deps: deps("c", "2.x", "d", "^1")},
				{name: "c", version: "1.0.0"}, {name: "c", version: "2.0.0", deps: deps("d", "1")},
				{name: "d", version: "1.0.0", deps: deps("c", "^1")},
			},
			specs: []string{"a"},
			want: "node_modules/a a@1.0.0 [request]\n" +
				"node_modules/b b@1.0.0 [a@1.0.0]\n" +
				"node_modules/b/node_modules/c c@2.0.0 [b@1.0.0]\n" +
				"node_modules/c c@1.0.0 [a@1.0.0 d@1.0.0]\n" +
				"node_modules/d d@1.0.0 [b@1.0.0 c@2.0.0]\n",
		},
		{
			name: "a cycle",
			pkgs: []*tpkg{
				{name: "x", version: "1.0.0", deps: deps("y", "^1")},
				{name: "y", version: "1.0.0", deps: deps("x", "^1", "y", "1")},
			},
			specs: []string{"x"},
			want: "node_modules/x x@1.0.0 [request y@1.0.0]\n" +
				"node_modules/y y@1.0.0 [x@1.0.0 y@1.0.0]\n",
		},
		{
			name: "a cycle through two versions",
			pkgs: []*tpkg{
				{name: "x", version: "1.0.0", deps: deps("y", "^1")},
				{name: "x", version: "2.0.0", deps: deps("y", "^1")},
				{name: "y", version: "1.0.0", deps: deps("x", "^2")},
			},
			latest: map[string]string{"x": "2.0.0"},
			specs:  []string{"x@1"},
			want: "node_modules/x x@1.0.0 [request]\n" +
				"node_modules/y y@1.0.0 [x@1.0.0 x@2.0.0]\n" +
				"node_modules/y/node_modules/x x@2.0.0 [y@1.0.0]\n",
		},
		{
			name: "a scoped package",
			pkgs: []*tpkg{
				{name: "@acme/core", version: "2.0.1", deps: deps("@acme/util", "~1.0.0")},
				{name: "@acme/util", version: "1.0.3"},
			},
			specs: []string{"@acme/core@~2.0.1"},
			want: "node_modules/@acme/core @acme/core@2.0.1 [request]\n" +
				"node_modules/@acme/util @acme/util@1.0.3 [@acme/core@2.0.1]\n",
		},
		{
			name: "notes: deprecated, install scripts, peers, optional failures, skipped",
			pkgs: []*tpkg{
				{name: "a", version: "1.0.0", deprecated: "use b", installScript: true,
					deps:     deps("c", "^1"),
					peer:     deps("react", "^18"),
					optional: deps("fsevents", "^2", "gone", "^1", "c", "^1")},
				{name: "fsevents", version: "2.0.0", deps: deps("x", "git+https://example.com/x.git")},
				{name: "c", version: "1.0.0"},
				{name: "c", version: "1.1.0", sha1Only: true},
			},
			specs: []string{"a"},
			want: "node_modules/a a@1.0.0 [request]\n" +
				"node_modules/c c@1.0.0 [a@1.0.0]\n",
			notes: []string{
				`a@1.0.0 is deprecated: "use b"`,
				"a@1.0.0 has install scripts; they do not run here",
				`a@1.0.0 expects a peer dependency "react"@"^18"`,
				`left out optional dependency "gone" of a@1.0.0`,
				`left out optional dependency fsevents@2.0.0 of a@1.0.0: package refused: fsevents@2.0.0 ← a@1.0.0 ← request depends on x through "git+https://example.com/x.git"`,
				"c: skipped 1.1.0: the registry publishes only a sha1 shasum",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := newRegistry(t, tt.pkgs...)
			for k, v := range tt.latest {
				reg.latest[k] = v
			}
			r := &Resolver{Client: reg.client()}
			plan, err := r.Resolve(t.Context(), mustSpecs(t, tt.specs...))
			if err != nil {
				t.Fatal(err)
			}
			if got := planText(plan); got != tt.want {
				t.Errorf("plan:\n%s\nwant:\n%s", got, tt.want)
			}
			for _, want := range tt.notes {
				found := false
				for _, n := range plan.Notes {
					found = found || strings.Contains(n, want)
				}
				if !found {
					t.Errorf("no note says %q; notes: %q", want, plan.Notes)
				}
			}
			for _, pk := range plan.Packages {
				if !strings.HasPrefix(pk.Integrity, "sha512-") || !strings.HasPrefix(pk.TarballURL, reg.srv.URL+"/") || pk.Size != 123 {
					t.Errorf("%s: %+v", pk.Path, pk)
				}
			}
			if a := reg.accept; a != "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8" {
				t.Errorf("Accept %q", a)
			}
		})
	}
}

// The plan is the same however often it is made.
func TestResolveDeterministic(t *testing.T) {
	var pkgs []*tpkg
	for i := range 20 {
		pkgs = append(pkgs, &tpkg{name: fmt.Sprintf("p%d", i), version: "1.0.0", deps: deps(fmt.Sprintf("p%d", (i+1)%20), "1", fmt.Sprintf("q%d", i%3), fmt.Sprintf("^%d", i%2+1))})
	}
	for i := range 3 {
		pkgs = append(pkgs, &tpkg{name: fmt.Sprintf("q%d", i), version: "1.0.0"}, &tpkg{name: fmt.Sprintf("q%d", i), version: "2.0.0"})
	}
	reg := newRegistry(t, pkgs...)
	var first string
	for range 5 {
		plan, err := (&Resolver{Client: reg.client()}).Resolve(t.Context(), mustSpecs(t, "p0", "p7"))
		if err != nil {
			t.Fatal(err)
		}
		got := planText(plan)
		if first == "" {
			first = got
		} else if got != first {
			t.Fatalf("plans differ:\n%s\n%s", first, got)
		}
	}
	if !strings.Contains(first, "/node_modules/q") {
		t.Errorf("expected nested q copies:\n%s", first)
	}
}

func TestResolveRefuses(t *testing.T) {
	tests := []struct {
		name     string
		pkgs     []*tpkg
		specs    []string
		resolver Resolver
		client   func(*Client)
		handler  func(reg *testRegistry) http.Handler
		want     error
		say      string
	}{
		{
			name:  "a range nothing satisfies",
			pkgs:  []*tpkg{{name: "a", version: "1.0.0", deps: deps("b", "^5.0.0")}, {name: "b", version: "1.0.0"}, {name: "b", version: "2.0.0"}},
			specs: []string{"a@^1"},
			want:  ErrConflict, say: "no version of b satisfies b@^5.0.0, which a@1.0.0 ← request requires; available: 2.0.0, 1.0.0",
		},
		{
			name:  "requests that disagree",
			pkgs:  []*tpkg{{name: "a", version: "1.0.0"}, {name: "a", version: "2.0.0"}},
			specs: []string{"a@1", "a@2"},
			want:  ErrConflict, say: "no version of a satisfies them all: a@1, a@2",
		},
		{
			name:  "no such version",
			pkgs:  []*tpkg{{name: "a", version: "1.0.0"}},
			specs: []string{"a@3"},
			want:  ErrNoMatch, say: "no version of a matches a@3; available: 1.0.0",
		},
		{
			name:  "no such package",
			pkgs:  []*tpkg{{name: "a", version: "1.0.0", deps: deps("ghost", "1")}},
			specs: []string{"a"},
			want:  ErrNoPackage, say: `"ghost" (required by a@1.0.0`,
		},
		{
			name:  "sha1 only",
			pkgs:  []*tpkg{{name: "old", version: "0.1.0", sha1Only: true}},
			specs: []string{"old@0.1.0"},
			want:  ErrRefused, say: "old@0.1.0: the registry publishes only a sha1 shasum for it, no sha512 integrity",
		},
		{
			name:  "a tarball on another host",
			pkgs:  []*tpkg{{name: "a", version: "1.0.0", tarballURL: "https://evil.example/a-1.0.0.tgz"}},
			specs: []string{"a"},
			want:  ErrRefused, say: `a@1.0.0: its tarball its URL is on host "evil.example"`,
		},
		{
			name:  "a tarball over another scheme",
			pkgs:  []*tpkg{{name: "a", version: "1.0.0", tarballURL: "file:///etc/passwd"}},
			specs: []string{"a"},
			want:  ErrRefused, say: `scheme is "file"`,
		},
		{
			name:  "a git dependency",
			pkgs:  []*tpkg{{name: "a", version: "1.0.0", deps: deps("b", "github:evil/b")}},
			specs: []string{"a"},
			want:  ErrRefused, say: `a@1.0.0 ← request depends on b through "github:evil/b", which is a hosted git repository, not a registry version; pin another version of a`,
		},
		{
			name:  "a dependency with control characters in its name",
			pkgs:  []*tpkg{{name: "a", version: "1.0.0", deps: deps("b\x1b[2J", "1")}},
			specs: []string{"a"},
			want:  ErrRefused, say: `depends on "b\x1b[2J", which is no valid package name`,
		},
		{
			name:  "a traversing dependency name",
			pkgs:  []*tpkg{{name: "a", version: "1.0.0", deps: deps("../../etc", "1")}},
			specs: []string{"a"},
			want:  ErrRefused, say: `which is no valid package name`,
		},
		{
			name: "a chain deeper than MaxDepth",
			pkgs: func() []*tpkg {
				var ps []*tpkg
				for i := range 5000 {
					ps = append(ps, &tpkg{name: fmt.Sprintf("d%d", i), version: "1.0.0", deps: deps(fmt.Sprintf("d%d", i+1), "1")})
				}
				return ps
			}(),
			specs:    []string{"d0"},
			resolver: Resolver{MaxSteps: 1 << 20},
			want:     ErrTooLarge, say: "a dependency chain is deeper than 50 (at d50@1.0.0",
		},
		{
			name: "more packages than MaxPackages",
			pkgs: func() []*tpkg {
				ps := []*tpkg{{name: "wide", version: "1.0.0", deps: map[string]string{}}}
				for i := range 600 {
					ps[0].deps[fmt.Sprintf("w%03d", i)] = "1"
					ps = append(ps, &tpkg{name: fmt.Sprintf("w%03d", i), version: "1.0.0"})
				}
				return ps
			}(),
			specs:    []string{"wide"},
			resolver: Resolver{MaxSteps: 1 << 20},
			want:     ErrTooLarge, say: "the dependencies reach over 500 packages",
		},
		{
			name: "more steps than MaxSteps",
			pkgs: func() []*tpkg {
				var ps []*tpkg
				for i := range 40 {
					ps = append(ps, &tpkg{name: fmt.Sprintf("s%d", i), version: "1.0.0", deps: deps(fmt.Sprintf("s%d", i+1), "1")})
				}
				return ps
			}(),
			specs:    []string{"s0"},
			resolver: Resolver{MaxSteps: 30},
			want:     ErrTooLarge, say: "over 30 steps",
		},
		{
			name:     "too many specs",
			pkgs:     []*tpkg{{name: "a", version: "1.0.0"}},
			specs:    []string{"a", "a", "a"},
			resolver: Resolver{MaxSpecs: 2},
			want:     ErrTooLarge, say: "3 packages in one call, over the limit of 2",
		},
		{
			name:   "an oversized packument",
			pkgs:   []*tpkg{{name: "a", version: "1.0.0", deprecated: strings.Repeat("x", 5000)}},
			specs:  []string{"a"},
			client: func(c *Client) { c.MaxPackumentBytes = 4096 },
			want:   ErrTooLarge, say: "the packument of a is over the 4096-byte limit",
		},
		{
			name:     "packuments over the download budget",
			pkgs:     []*tpkg{{name: "a", version: "1.0.0", deps: deps("b", "1")}, {name: "b", version: "1.0.0", deprecated: strings.Repeat("x", 3000)}},
			specs:    []string{"a"},
			resolver: Resolver{MaxDownloadBytes: 2000},
			want:     ErrTooLarge, say: "resolving would read over 2000 bytes of packuments (at b)",
		},
		{
			name:  "the packument of another package",
			pkgs:  []*tpkg{{name: "a", version: "1.0.0"}},
			specs: []string{"a"},
			handler: func(reg *testRegistry) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, _ := reg.packument("a")
					w.Write([]byte(strings.Replace(string(b), `"name":"a"`, `"name":"evil"`, 1)))
				})
			},
			want: ErrBadRegistry, say: `asked for a, the registry answered with the packument of "evil"`,
		},
		{
			name:  "a redirect off the registry's host",
			specs: []string{"a"},
			handler: func(*testRegistry) http.Handler {
				return http.RedirectHandler("http://evil.example/a", http.StatusFound)
			},
			want: ErrBadRegistry, say: `redirected to "http://evil.example/a": its URL is on host "evil.example"`,
		},
		{
			name:  "a registry error",
			specs: []string{"a"},
			handler: func(*testRegistry) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "<b>down</b>", http.StatusBadGateway) })
			},
			want: ErrRegistryUnavailable, say: "the registry answered 502 Bad Gateway",
		},
		{
			name:   "a slow registry",
			specs:  []string{"a"},
			client: func(c *Client) { c.Timeout = 200 * time.Millisecond },
			handler: func(*testRegistry) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
			},
			want: ErrRegistryUnavailable, say: "no complete answer within 200ms",
		},
		{
			name:   "a registry that stalls mid-body",
			specs:  []string{"a"},
			client: func(c *Client) { c.Timeout = 200 * time.Millisecond },
			handler: func(*testRegistry) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Write([]byte(`{"name":"a",`))
					w.(http.Flusher).Flush()
					<-r.Context().Done()
				})
			},
			want: ErrRegistryUnavailable, say: "no complete answer within 200ms",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := newRegistry(t, tt.pkgs...)
			if tt.handler != nil {
				reg.setHandler(tt.handler(reg))
			}
			r := tt.resolver
			r.Client = reg.client()
			if tt.client != nil {
				tt.client(r.Client)
			}
			_, err := r.Resolve(t.Context(), mustSpecs(t, tt.specs...))
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.say) {
				t.Fatalf("Resolve = %v\nwant %v saying %q", err, tt.want, tt.say)
			}
			if sandpit.ClassOf(err) == nil {
				t.Errorf("%v has no class", err)
			}
		})
	}
}

// A gzip'd packument is bounded by its decompressed size, not its wire
// size.
func TestPackumentBoundAfterDecoding(t *testing.T) {
	reg := newRegistry(t, &tpkg{name: "a", version: "1.0.0", deprecated: strings.Repeat("x", 1<<20)})
	body, _ := reg.packument("a")
	reg.setHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(gzipped(t, body))
	}))
	c := reg.client()
	c.MaxPackumentBytes = 64 << 10
	_, err := c.Packument(t.Context(), "a")
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Packument = %v, want ErrTooLarge", err)
	}
	c.MaxPackumentBytes = 2 << 20
	if _, err := c.Packument(t.Context(), "a"); err != nil {
		t.Fatalf("within the bound: %v", err)
	}
}

func TestNotConfigured(t *testing.T) {
	for _, c := range []*Client{nil, {}, {BaseURL: "file:///srv/npm"}, {BaseURL: "https://user:pw@registry.example/"}} {
		_, err := (&Resolver{Client: c}).Resolve(t.Context(), mustSpecs(t, "a"))
		if !errors.Is(err, ErrNotConfigured) {
			t.Errorf("Resolve with %+v = %v, want ErrNotConfigured", c, err)
		}
	}
}

// A redirect within the registry's host is followed; https never
// downgrades to http.
func TestRedirects(t *testing.T) {
	reg := newRegistry(t, &tpkg{name: "a", version: "1.0.0"})
	reg.setHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/a" {
			http.Redirect(w, r, "/moved/a", http.StatusMovedPermanently)
			return
		}
		b, _ := reg.packument("a")
		w.Write(b)
	}))
	if _, err := reg.client().Packument(t.Context(), "a"); err != nil {
		t.Fatalf("same-host redirect: %v", err)
	}
	c := &Client{BaseURL: "https://registry.example/"}
	from, _ := http.NewRequest("GET", "https://registry.example/a", nil)
	to, _ := http.NewRequest("GET", "http://registry.example/a", nil)
	if err := c.httpClient().CheckRedirect(to, []*http.Request{from}); err == nil || !strings.Contains(err.Error(), "downgrades https to http") {
		t.Fatalf("https→http redirect: %v", err)
	}
}

func TestFetchTarball(t *testing.T) {
	good := &tpkg{name: "a", version: "1.0.0"}
	bad := &tpkg{name: "b", version: "1.0.0", badIntegrity: true}
	reg := newRegistry(t, good, bad)
	cache, err := artifact.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	plan, err := (&Resolver{Client: reg.client()}).Resolve(t.Context(), mustSpecs(t, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := plan.Packages[0], plan.Packages[1]

	path, sum, err := FetchTarball(t.Context(), reg.client(), cache, pa)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if sri(b) != pa.Integrity || filepath.Base(path) != sum {
		t.Fatalf("fetched %s (%s), integrity %s", path, sri(b), pa.Integrity)
	}
	if err := CheckTarball(path, TarLimits{}); err != nil {
		t.Fatal(err)
	}
	// A hit by sha512: no second download.
	again, sum2, err := FetchTarball(t.Context(), reg.client(), cache, pa)
	if err != nil || again != path || sum2 != sum {
		t.Fatalf("again = %s %s %v", again, sum2, err)
	}
	if n := reg.hit(tarballPath(good)); n != 1 {
		t.Errorf("the tarball was downloaded %d times, want once", n)
	}

	_, _, err = FetchTarball(t.Context(), reg.client(), cache, pb)
	if !errors.Is(err, ErrIntegrity) || !strings.Contains(err.Error(), "b@1.0.0: the registry published sha512-") {
		t.Fatalf("bad integrity = %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(cache.Dir(), "sha256"))
	tmps, _ := os.ReadDir(filepath.Join(cache.Dir(), "tmp"))
	if len(ents) != 1 || len(tmps) != 0 {
		t.Errorf("after a mismatch the cache holds %d entries and %d partial files, want 1 and 0", len(ents), len(tmps))
	}

	// A plan entry whose URL is off the registry is refused before any
	// request; so is one without integrity.
	off := pa
	off.TarballURL = "https://evil.example/a.tgz"
	off.Integrity = sri([]byte("x"))
	if _, _, err := FetchTarball(t.Context(), reg.client(), cache, off); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "evil.example") {
		t.Errorf("off-host tarball = %v", err)
	}
	noSRI := pa
	noSRI.Integrity = "sha1-abc"
	if _, _, err := FetchTarball(t.Context(), reg.client(), cache, noSRI); !errors.Is(err, ErrRefused) {
		t.Errorf("no sha512 = %v", err)
	}

	// A tarball over the limit is refused and leaves nothing.
	small := reg.client()
	small.MaxArtifactBytes = 10
	c2, _ := artifact.Open(t.TempDir())
	if _, _, err := FetchTarball(t.Context(), small, c2, pa); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over MaxArtifactBytes = %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(c2.Dir(), "sha256")); len(ents) != 0 {
		t.Errorf("the cache holds %d entries", len(ents))
	}
}

func TestAllowHosts(t *testing.T) {
	reg := newRegistry(t, &tpkg{name: "a", version: "1.0.0", tarballURL: "https://cdn.example/a/-/a-1.0.0.tgz"})
	c := reg.client()
	if _, err := (&Resolver{Client: c}).Resolve(t.Context(), mustSpecs(t, "a")); !errors.Is(err, ErrRefused) {
		t.Fatalf("without AllowHosts: %v", err)
	}
	c.AllowHosts = []string{"cdn.example"}
	plan, err := (&Resolver{Client: c}).Resolve(t.Context(), mustSpecs(t, "a"))
	if err != nil || plan.Packages[0].TarballURL != "https://cdn.example/a/-/a-1.0.0.tgz" {
		t.Fatalf("with AllowHosts: %+v, %v", plan, err)
	}
}

// An optional package whose dependencies fail is left out with what only
// it required; when a required edge also reaches it, its failure is the
// resolution's.
func TestOptionalFailure(t *testing.T) {
	pkgs := []*tpkg{
		{name: "a", version: "1.0.0", optional: deps("opt", "1")},
		{name: "opt", version: "1.0.0", deps: deps("only-opt", "1", "broken", "1")},
		{name: "only-opt", version: "1.0.0"},
		{name: "broken", version: "1.0.0", sha1Only: true},
		{name: "b", version: "1.0.0", deps: deps("opt", "1")},
	}
	reg := newRegistry(t, pkgs...)
	plan, err := (&Resolver{Client: reg.client()}).Resolve(t.Context(), mustSpecs(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := planText(plan), "node_modules/a a@1.0.0 [request]\n"; got != want {
		t.Errorf("plan:\n%s\nwant:\n%s", got, want)
	}
	_, err = (&Resolver{Client: reg.client()}).Resolve(t.Context(), mustSpecs(t, "a", "b"))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "broken@1.0.0") {
		t.Fatalf("a required edge to a failed optional package = %v", err)
	}
}
