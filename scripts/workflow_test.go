package scripts

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The GitHub workflow restores the image cache by a key, and actions/cache
// never saves over a key it restored: a key that misses a file the images
// are defined by keeps restoring the stale cache, and every later run builds
// the changed image cold. The images are defined by images/recipe.go (the
// recipe code, RecipeVersion) and by every file the images package embeds
// (images/catalog.toml).
func TestWorkflowImageCacheKeyCoversImageDefinitions(t *testing.T) {
	wf, err := os.ReadFile("../.github/workflows/test.yml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*key:\s*sandpit-images-.*hashFiles\(([^)]*)\)`).FindSubmatch(wf)
	if m == nil {
		t.Fatalf("no sandpit-images cache key with hashFiles in test.yml:\n%s", wf)
	}
	var hashed []string
	for _, arg := range strings.Split(string(m[1]), ",") {
		hashed = append(hashed, strings.Trim(strings.TrimSpace(arg), `'"`))
	}

	want := []string{"images/recipe.go"}
	srcs, err := filepath.Glob("../images/*.go")
	if err != nil {
		t.Fatal(err)
	}
	embed := regexp.MustCompile(`(?m)^//go:embed\s+(.+)$`)
	for _, src := range srcs {
		if strings.HasSuffix(src, "_test.go") {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range embed.FindAllSubmatch(b, -1) {
			for _, f := range strings.Fields(string(e[1])) {
				want = append(want, "images/"+f)
			}
		}
	}
	if len(want) < 2 {
		t.Fatalf("found no embedded image definition in images/*.go (want at least catalog.toml)")
	}
	for _, w := range want {
		covered := false
		for _, h := range hashed {
			if ok, _ := filepath.Match(h, w); ok {
				covered = true
			}
		}
		if !covered {
			t.Errorf("the image cache key hashes %q but not %s, which defines the images", hashed, w)
		}
	}
}
