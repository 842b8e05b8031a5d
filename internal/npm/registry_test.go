package npm

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/artifact"
)

// TestRealRegistry resolves, fetches and checks two small, old packages on
// https://registry.npmjs.org/, pinned, one with a dependency. It fails when
// the registry does not answer, unless SANDPIT_NPM_OFFLINE=1 says this
// machine has no way to it.
func TestRealRegistry(t *testing.T) {
	if os.Getenv("SANDPIT_NPM_OFFLINE") == "1" {
		t.Skip("SANDPIT_NPM_OFFLINE=1: not reaching https://registry.npmjs.org/")
	}
	c := &Client{BaseURL: "https://registry.npmjs.org/", Timeout: time.Minute, DownloadTimeout: time.Minute, UserAgent: "sandpit-test"}
	plan, err := (&Resolver{Client: c}).Resolve(t.Context(), mustSpecs(t, "left-pad@1.3.0", "is-odd@3.0.1"))
	if err != nil {
		t.Fatalf("Resolve against the real registry: %v (set SANDPIT_NPM_OFFLINE=1 where it cannot be reached)", err)
	}
	got := map[string]Planned{}
	for _, p := range plan.Packages {
		got[p.Name] = p
	}
	// is-odd 3.0.1 depends on is-number ^6.0.0, whose only version is 6.0.0.
	want := map[string]string{"left-pad": "1.3.0", "is-odd": "3.0.1", "is-number": "6.0.0"}
	if len(got) != len(want) {
		t.Fatalf("plan:\n%s", planText(plan))
	}
	for name, v := range want {
		p := got[name]
		if p.Version != v || p.Path != "node_modules/"+name {
			t.Errorf("%s: %+v, want version %s at node_modules/%s", name, p, v, name)
		}
		if !strings.HasPrefix(p.TarballURL, "https://registry.npmjs.org/"+name+"/-/") {
			t.Errorf("%s: tarball %s", name, p.TarballURL)
		}
	}
	if by := got["is-number"].RequiredBy; !slices.Equal(by, []string{"is-odd@3.0.1"}) {
		t.Errorf("is-number required by %q", by)
	}
	for _, p := range plan.Packages {
		if p.HasInstallScript {
			t.Errorf("%s has no install script on the registry; the plan says it has", p.Name)
		}
	}

	cache, err := artifact.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plan.Packages {
		path, sum, err := FetchTarball(t.Context(), c, cache, p)
		if err != nil {
			t.Fatalf("FetchTarball(%s): %v", p.Name, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if sri(b) != p.Integrity {
			t.Errorf("%s: the cached bytes have %s, the registry published %s", p.Name, sri(b), p.Integrity)
		}
		if !strings.HasSuffix(path, sum) {
			t.Errorf("%s: path %s, sha256 %s", p.Name, path, sum)
		}
		if err := CheckTarball(path, TarLimits{}); err != nil {
			t.Errorf("CheckTarball(%s): %v", p.Name, err)
		}
		dir := t.TempDir()
		if err := ExtractTarball(path, dir, TarLimits{}); err != nil {
			t.Errorf("ExtractTarball(%s): %v", p.Name, err)
		} else if b, err := os.ReadFile(dir + "/package.json"); err != nil || !strings.Contains(string(b), `"version": "`+p.Version+`"`) && !strings.Contains(string(b), `"version":"`+p.Version+`"`) {
			t.Errorf("%s: package.json %q, %v", p.Name, b, err)
		}
		// Fetched again: a hit by sha512.
		if again, _, err := FetchTarball(t.Context(), &Client{BaseURL: "http://127.0.0.1:1/"}, cache, p); err != nil || again != path {
			t.Errorf("%s: a second fetch went to the registry: %v", p.Name, err)
		}
	}
}
