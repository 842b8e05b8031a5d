package pypi

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// The packages of the chain test: app needs lib needs base; newer or
// other releases exist that must each be passed over for a reason.
var chain = []pkg{
	{name: "app", version: "1.0", requires: []string{"lib"}},
	{name: "app", version: "2.0", extras: []string{"fast"}, requires: []string{
		"lib>=1.0",
		`winonly; sys_platform == "win32"`,
		`backport; python_version < "3.8"`,
		`fastlib; extra == "fast"`,
	}},
	{name: "app", version: "3.0b1", requires: []string{"lib"}},                        // a pre-release: not asked for
	{name: "lib", version: "1.0", requires: []string{"Base_Pkg<2"}, noMetadata: true}, // read from the wheel
	{name: "lib", version: "1.5", yanked: true},
	{name: "lib", version: "1.6", tag: "cp312-cp312-win_amd64"}, // no wheel for the target
	{name: "base-pkg", version: "0.9"},
	{name: "base-pkg", version: "1.0", requiresPython: ">=3.12"},
	{name: "base-pkg", version: "1.1", requiresPython: ">=3.13", noMetadata: true},
	{name: "base-pkg", version: "1.2", requiresPython: ">=3.12", hideRP: true}, // found in METADATA
	{name: "base-pkg", version: "2.0"},
	{name: "fastlib", version: "0.1", tag: "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64"},
	{name: "fastlib", version: "0.1", tag: "py3-none-any"},
}

func resolver(t *testing.T, ix *testIndex) *Resolver {
	t.Helper()
	cache, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &Resolver{Client: ix.client(), Cache: cache}
}

func summary(p *Plan) []string {
	var out []string
	for _, pk := range p.Packages {
		out = append(out, pk.Name+"=="+pk.Version.String())
	}
	return out
}

func TestResolveChain(t *testing.T) {
	flavours(t, func(t *testing.T, asJSON bool) {
		ix := newIndex(t, asJSON, chain...)
		r := resolver(t, ix)
		plan, err := r.Resolve(t.Context(), mustReq(t, "App[fast]"), target(t))
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"app==2.0", "lib==1.0", "fastlib==0.1", "base-pkg==0.9"}
		if got := summary(plan); !slices.Equal(got, want) {
			t.Fatalf("plan %v, want %v", got, want)
		}
		byName := map[string]Planned{}
		for _, pk := range plan.Packages {
			byName[pk.Name] = pk
			s := ix.files[pk.File.Filename]
			if s == nil || pk.File.SHA256 != sha(s.data) || pk.File.URL != ix.srv.URL+"/files/"+pk.File.Filename {
				t.Errorf("%s: file %+v", pk.Name, pk.File)
			}
		}
		if fl := byName["fastlib"].File.Filename; !strings.Contains(fl, "manylinux") {
			t.Errorf("fastlib: picked %s, not the native wheel the target prefers", fl)
		}
		if by := byName["base-pkg"].RequiredBy; !slices.Equal(by, []string{"lib 1.0"}) {
			t.Errorf("base-pkg required by %v", by)
		}
		if by := byName["app"].RequiredBy; !slices.Equal(by, []string{"request"}) {
			t.Errorf("app required by %v", by)
		}
		// lib had no PEP 658 metadata: its wheel is in the cache, verified.
		lib := byName["lib"]
		if lib.Path == "" || lib.Size != int64(len(ix.files[lib.File.Filename].data)) {
			t.Errorf("lib: path %q size %d", lib.Path, lib.Size)
		}
		assertCacheHolds(t, r.Cache, lib.File.SHA256)
		if len(plan.Notes) != 0 {
			t.Errorf("notes %q", plan.Notes)
		}
		if plan.TotalSize() <= 0 {
			t.Errorf("total size %d", plan.TotalSize())
		}
		// Every planned wheel downloads, verifies and passes CheckWheel.
		for _, pk := range plan.Packages {
			p, err := r.Cache.Fetch(t.Context(), r.Client, pk.File)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckWheel(p); err != nil {
				t.Errorf("%s: %v", pk.File.Filename, err)
			}
		}
	})
}

func TestResolvePins(t *testing.T) {
	tests := []struct {
		req  string
		want []string
	}{
		{"app==1.0", []string{"app==1.0", "lib==1.0", "base-pkg==0.9"}},
		{"app>=3.0b1", []string{"app==3.0b1", "lib==1.0", "base-pkg==0.9"}}, // names a pre-release
		{"lib==1.5", []string{"lib==1.5"}},                                  // a pin may pick a yanked file (PEP 592)
		{"base-pkg>=2", []string{"base-pkg==2.0"}},
	}
	ix := newIndex(t, true, chain...)
	for _, tt := range tests {
		t.Run(tt.req, func(t *testing.T) {
			plan, err := resolver(t, ix).Resolve(t.Context(), mustReq(t, tt.req), target(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := summary(plan); !slices.Equal(got, tt.want) {
				t.Errorf("plan %v, want %v", got, tt.want)
			}
		})
	}
}

func TestResolveRefusals(t *testing.T) {
	pkgs := append([]pkg{
		{name: "legacy", version: "1.0", sdist: true},
		{name: "evil", version: "1.0", url: "http://attacker.example/files/evil-1.0-py3-none-any.whl"},
		{name: "nohash", version: "1.0", noHash: true},
		{name: "tampered", version: "1.0", badHash: true, noMetadata: true},
		{name: "needs-legacy", version: "1.0", requires: []string{"legacy"}},
		{name: "needs-ghost", version: "1.0", requires: []string{"ghost>=1"}},
		{name: "a", version: "1.0", requires: []string{"c<2"}},
		{name: "b", version: "1.0", requires: []string{"c>=2"}},
		{name: "c", version: "1.0"},
		{name: "c", version: "2.0"},
		{name: "urldep", version: "1.0", requires: []string{"c @ https://evil.example/c.whl"}},
		{name: "py313", version: "1.0", requiresPython: ">=3.13"},
		{name: "winonly", version: "1.0", tag: "cp311-cp311-win_amd64"},
	}, chain...)
	tests := []struct {
		name  string
		reqs  []string
		class error
		want  error
		say   []string
	}{
		{"sdist only", []string{"legacy"}, sandpit.ErrInvalidArgument, ErrSdistOnly,
			[]string{"legacy 1.0 has no wheel for this environment", "legacy-1.0.tar.gz", "setup.py"}},
		{"sdist only, deep", []string{"needs-legacy"}, sandpit.ErrInvalidArgument, ErrSdistOnly, []string{"legacy"}},
		{"file on another host", []string{"evil"}, sandpit.ErrInvalidArgument, ErrRefusedFile,
			[]string{"evil-1.0-py3-none-any.whl", `host "attacker.example"`}},
		{"no published hash", []string{"nohash"}, sandpit.ErrInvalidArgument, ErrRefusedFile, []string{"no sha256"}},
		{"bad hash", []string{"tampered"}, sandpit.ErrUnavailable, ErrHashMismatch,
			[]string{"tampered-1.0-py3-none-any.whl", "published sha256"}},
		{"conflict", []string{"a", "b"}, sandpit.ErrInvalidArgument, ErrConflict,
			[]string{"no version of c satisfies them all", "c<2 (from a 1.0)", "c>=2 (from b 1.0)", "available: 2.0, 1.0"}},
		{"conflict with the request", []string{"a", "c>=2"}, sandpit.ErrInvalidArgument, ErrConflict,
			[]string{"c<2 (from a 1.0)", "c>=2 (requested)"}},
		{"no such version", []string{"c>=5"}, sandpit.ErrNotFound, ErrNoMatch, []string{"c>=5 (requested)", "available: 2.0, 1.0"}},
		{"no such project", []string{"ghost"}, sandpit.ErrNotFound, ErrNoProject, []string{`"ghost"`}},
		{"no such dependency", []string{"needs-ghost"}, sandpit.ErrNotFound, ErrNoProject, []string{"required by needs-ghost 1.0"}},
		{"URL dependency", []string{"urldep"}, sandpit.ErrInvalidArgument, ErrInvalidRequirement, []string{"urldep 1.0 declares a dependency that is refused", "direct reference"}},
		{"requires-python", []string{"py313"}, sandpit.ErrNotFound, ErrNoMatch, []string{"requires Python >=3.13"}},
		{"no wheel for the platform", []string{"winonly"}, sandpit.ErrNotFound, ErrNoMatch, []string{"no wheel for CPython 3.11 manylinux_2_35_x86_64 (its wheel winonly-1.0-cp311-cp311-win_amd64.whl is for another environment)"}},
		{"yanked only, unpinned", []string{"lib>1.0,<1.6"}, sandpit.ErrNotFound, ErrNoMatch, []string{`lib 1.5: yanked ("broken release")`}},
	}
	flavours(t, func(t *testing.T, asJSON bool) {
		ix := newIndex(t, asJSON, pkgs...)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := resolver(t, ix)
				_, err := r.Resolve(t.Context(), mustReq(t, tt.reqs...), target(t))
				t.Log(sandpit.Describe(err))
				if !errors.Is(err, tt.want) || sandpit.ClassOf(err) != tt.class {
					t.Fatalf("Resolve = %v (class %v), want %v of class %v", err, sandpit.ClassOf(err), tt.want, tt.class)
				}
				for _, s := range tt.say {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				// Nothing unverified, nothing partial in the cache.
				ents, _ := os.ReadDir(filepath.Join(r.Cache.Dir(), "sha256"))
				for _, e := range ents {
					b, _ := os.ReadFile(filepath.Join(r.Cache.Dir(), "sha256", e.Name()))
					if sha(b) != e.Name() {
						t.Errorf("cache entry %s holds other bytes", e.Name())
					}
				}
				if tt.want == ErrHashMismatch {
					assertCacheHolds(t, r.Cache)
				}
			})
		}
	})
}

func TestResolveSdistError(t *testing.T) {
	ix := newIndex(t, true, pkg{name: "legacy", version: "1.0", sdist: true})
	_, err := resolver(t, ix).Resolve(t.Context(), mustReq(t, "legacy"), target(t))
	var se *SdistError
	if !errors.As(err, &se) || se.Project != "legacy" || se.Version != "1.0" || se.Filename != "legacy-1.0.tar.gz" {
		t.Fatalf("Resolve = %v, want an *SdistError", err)
	}
}

// A later constraint excludes the version picked first: the package is
// picked again, and what only the first pick needed leaves the plan.
func TestResolveRepick(t *testing.T) {
	ix := newIndex(t, false,
		pkg{name: "x", version: "1.0", requires: []string{"z"}},
		pkg{name: "y", version: "1.0", requires: []string{"w"}},
		pkg{name: "w", version: "1.0", requires: []string{"z<2"}},
		pkg{name: "z", version: "1.0"},
		pkg{name: "z", version: "2.0", requires: []string{"only-z2"}},
		pkg{name: "only-z2", version: "1.0", requires: []string{"only-z2-dep"}},
		pkg{name: "only-z2-dep", version: "1.0"},
	)
	plan, err := resolver(t, ix).Resolve(t.Context(), mustReq(t, "x", "y"), target(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"x==1.0", "y==1.0", "z==1.0", "w==1.0"}
	if got := summary(plan); !slices.Equal(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	for _, pk := range plan.Packages {
		if pk.Name == "z" && !slices.Equal(pk.RequiredBy, []string{"w 1.0", "x 1.0"}) {
			t.Errorf("z required by %v", pk.RequiredBy)
		}
	}
}

// A package that asks extras of itself (pkg[all] needs pkg[a]) settles.
func TestResolveSelfExtras(t *testing.T) {
	ix := newIndex(t, true,
		pkg{name: "s", version: "1.0", extras: []string{"a", "all"}, requires: []string{`s[a]; extra == "all"`, `adep; extra == "a"`}},
		pkg{name: "adep", version: "1.0"},
	)
	plan, err := resolver(t, ix).Resolve(t.Context(), mustReq(t, "s[all]"), target(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := summary(plan), []string{"s==1.0", "adep==1.0"}; !slices.Equal(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	plan, err = resolver(t, ix).Resolve(t.Context(), mustReq(t, "s[nope]"), target(t))
	if err != nil || len(plan.Notes) != 1 || !strings.Contains(plan.Notes[0], `provides no extra "nope"`) {
		t.Fatalf("plan %+v, %v: want a note on the unknown extra", plan, err)
	}
}

func TestResolveCycle(t *testing.T) {
	ix := newIndex(t, true,
		pkg{name: "p", version: "1.0", requires: []string{"q"}},
		pkg{name: "q", version: "1.0", requires: []string{"p"}},
	)
	plan, err := resolver(t, ix).Resolve(t.Context(), mustReq(t, "p"), target(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := summary(plan); !slices.Equal(got, []string{"p==1.0", "q==1.0"}) {
		t.Fatalf("plan %v", got)
	}
}

func TestResolveBounds(t *testing.T) {
	// A chain d0 -> d1 -> ... -> d9.
	var deep []pkg
	for i := range 10 {
		p := pkg{name: fmt.Sprintf("d%d", i), version: "1.0"}
		if i < 9 {
			p.requires = []string{fmt.Sprintf("d%d", i+1)}
		}
		deep = append(deep, p)
	}
	ix := newIndex(t, true, append(deep, pkg{name: "big", version: "1.0", noMetadata: true})...)
	many := make([]Requirement, 1000)
	for i := range many {
		many[i] = Requirement{Name: fmt.Sprintf("p%d", i)}
	}
	tests := []struct {
		name string
		r    func(*Resolver)
		reqs []Requirement
		say  string
	}{
		{"1,000 requirements", func(*Resolver) {}, many, "1000 packages in one call, over the limit of 200"},
		{"requirements past a lowered bound", func(r *Resolver) { r.MaxRequirements = 2 }, mustReq(t, "d0", "d1", "d2"), "3 packages in one call, over the limit of 2"},
		{"packages", func(r *Resolver) { r.MaxPackages = 5 }, mustReq(t, "d0"), "over 5 packages (at d5, required by d4 1.0)"},
		{"depth", func(r *Resolver) { r.MaxDepth = 4 }, mustReq(t, "d0"), "deeper than 4 (at d4, required by d3 1.0)"},
		{"steps", func(r *Resolver) { r.MaxSteps = 6 }, mustReq(t, "d0"), "over 6 steps"},
		{"download budget", func(r *Resolver) { r.MaxDownloadBytes = 100 }, mustReq(t, "big"), "over 100 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := resolver(t, ix)
			tt.r(r)
			before := ix.count()
			_, err := r.Resolve(t.Context(), tt.reqs, target(t))
			if !errors.Is(err, ErrTooLarge) || !errors.Is(err, sandpit.ErrResourceExhausted) || !strings.Contains(err.Error(), tt.say) {
				t.Fatalf("Resolve = %v, want ErrTooLarge saying %q", err, tt.say)
			}
			if len(tt.reqs) > 2 && tt.reqs[0].Name == "p0" && ix.count() != before {
				t.Errorf("%d requests reached the index before the bound refused the call", ix.count()-before)
			}
			assertCacheHolds(t, r.Cache)
		})
	}
	// At the bounds it resolves.
	r := resolver(t, ix)
	r.MaxPackages, r.MaxDepth = 10, 10
	if plan, err := r.Resolve(t.Context(), mustReq(t, "d0"), target(t)); err != nil || len(plan.Packages) != 10 {
		t.Fatalf("Resolve at the bounds = %v, %v", plan, err)
	}
}

func TestResolveSlowIndex(t *testing.T) {
	ix := newIndex(t, true)
	ix.setPage(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	r := resolver(t, ix)
	r.Client.Timeout = 200 * time.Millisecond
	_, err := r.Resolve(t.Context(), mustReq(t, "anything"), target(t))
	if !errors.Is(err, sandpit.ErrUnavailable) {
		t.Fatalf("Resolve = %v, want ErrUnavailable", err)
	}
}

func TestCacheGC(t *testing.T) {
	c, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(body string, age time.Duration) string {
		sum := sha([]byte(body))
		p := filepath.Join(c.Dir(), "sha256", sum)
		if err := os.WriteFile(p, []byte(body), 0o444); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		os.Chtimes(p, at, at)
		return sum
	}
	oldest := put(strings.Repeat("a", 100), 3*time.Hour)
	used := put(strings.Repeat("b", 100), 2*time.Hour)
	newest := put(strings.Repeat("c", 100), time.Hour)
	if _, ok := c.Path(used); !ok { // a use makes it the most recent
		t.Fatal("Path missed")
	}
	// A download in progress holds its lock; an abandoned one does not.
	live, err := os.CreateTemp(filepath.Join(c.Dir(), "tmp"), "fetch-*")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := syscall.Flock(int(live.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	abandoned := filepath.Join(c.Dir(), "tmp", "fetch-abandoned")
	os.WriteFile(abandoned, []byte("partial"), 0o600)
	young := filepath.Join(c.Dir(), "tmp", "fetch-young")
	os.WriteFile(young, []byte("partial"), 0o600)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(abandoned, old, old)
	os.Chtimes(live.Name(), old, old)

	res, err := c.GC(200)
	if err != nil {
		t.Fatal(err)
	}
	if res.Removed != 1 || res.RemovedBytes != 100 || res.Kept != 2 || res.KeptBytes != 200 || res.Partial != 1 {
		t.Errorf("GC = %+v", res)
	}
	if _, ok := c.Path(oldest); ok {
		t.Error("the least recently used entry survived")
	}
	for _, s := range []string{used, newest} {
		if _, ok := c.Path(s); !ok {
			t.Errorf("entry %s removed", s)
		}
	}
	if _, err := os.Stat(live.Name()); err != nil {
		t.Errorf("a live download was removed: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("a download just created (not yet locked) was removed: %v", err)
	}
	if res, _ := c.GC(0); res.Kept != 0 || res.Removed != 2 {
		t.Errorf("GC(0) = %+v", res)
	}
}
