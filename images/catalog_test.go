package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

func TestDefaultCatalog(t *testing.T) {
	c := DefaultCatalog()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Recipe("toolchain"); err != nil || r.Ref != DefaultRef {
		t.Errorf("toolchain recipe %q, %v; want ref %s (tests run on it)", r.Ref, err, DefaultRef)
	}
	ds, err := c.Recipe("datascience")
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range []string{"numpy", "pandas", "matplotlib", "scipy", "sklearn", "seaborn", "statsmodels", "sympy", "openpyxl", "PIL"} {
		if !slices.ContainsFunc(ds.Libraries, func(l Library) bool { return l.Name == mod && l.Language == "python" }) {
			t.Errorf("datascience image does not list python library %s", mod)
		}
	}
	// Every language runs on the data image by default, so all share one pool.
	for _, b := range c.Bindings() {
		if b.Image != "datascience" {
			t.Errorf("language %s runs on %s, want datascience", b.Name, b.Image)
		}
	}
	if got := c.UsedImages(); !slices.Equal(got, []string{"datascience"}) {
		t.Errorf("UsedImages() = %v", got)
	}
	for _, want := range []string{"python", "c", "cpp", "bash", "javascript"} {
		if _, ok := c.language(want); !ok {
			t.Errorf("no language %s", want)
		}
	}
}

func TestLoadCatalog(t *testing.T) {
	write := func(t *testing.T, text string) string {
		p := filepath.Join(t.TempDir(), "catalog.toml")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goLang := `
[[language]]
name = "go"
file = "main.go"
compile = ["go", "build", "-o", "{prog}", "{src}"]
run = ["{prog}"]
version = ["go", "version"]

[[image]]
name = "golang"
ref = "sandpit.local/golang:bookworm"
packages = ["python3", "golang-go"]
languages = ["go"]

[language_images]
go = "golang"
`
	t.Run("adds a language on its own image", func(t *testing.T) {
		c, err := LoadCatalog(write(t, goLang))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.ImageFor("go"); got != "golang" {
			t.Errorf("go runs on %q", got)
		}
		if got := c.UsedImages(); !slices.Equal(got, []string{"datascience", "golang"}) {
			t.Errorf("UsedImages() = %v", got)
		}
		r, err := c.Recipe("golang")
		if err != nil || len(r.Languages) != 1 || r.Languages[0].Name != "go" || r.Suite != "bookworm" {
			t.Errorf("golang recipe %+v, %v", r, err)
		}
	})
	t.Run("replaces by name", func(t *testing.T) {
		c, err := LoadCatalog(write(t, `default_image = "toolchain"
[[language]]
name = "python"
file = "prog.py"
run = ["python3", "-I", "{src}"]
version = ["python3", "-V"]
`))
		if err != nil {
			t.Fatal(err)
		}
		l, _ := c.language("python")
		if l.File != "prog.py" || c.ImageFor("python") != "toolchain" || len(c.Languages) != len(DefaultCatalog().Languages) {
			t.Errorf("python %+v on %s, %d languages", l, c.ImageFor("python"), len(c.Languages))
		}
	})
	for _, bad := range []struct{ name, text, want string }{
		{"unknown key", "defualt_image = 'x'", "unknown keys"},
		{"syntax", "[[language]\n", ""},
		{"image serves an undefined language", `[[image]]
name = "x"
ref = "r"
packages = ["python3"]
languages = ["cobol"]`, "cobol"},
		{"language on an image that does not serve it", "[language_images]\njavascript = \"toolchain2\"", "toolchain2"},
		{"alias taken twice", `[[language]]
name = "ruby"
aliases = ["py"]
file = "main.rb"
run = ["ruby", "{src}"]
version = ["ruby", "-v"]`, "alias"},
		{"compile without prog", `[[language]]
name = "rust"
file = "main.rs"
compile = ["rustc", "{src}"]
run = ["./main"]
version = ["rustc", "-V"]`, "{prog}"},
		{"file with a path", `[[language]]
name = "r"
file = "../main.R"
run = ["Rscript", "{src}"]
version = ["R", "--version"]`, "plain file name"},
		{"default image unknown", `default_image = "nope"`, "nope"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			_, err := LoadCatalog(write(t, bad.text))
			if !errors.Is(err, ErrInvalidRecipe) || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("LoadCatalog() = %v, want ErrInvalidRecipe mentioning %q", err, bad.want)
			}
		})
	}
}

func TestUpstreamVersion(t *testing.T) {
	for in, want := range map[string]string{"1:1.24.2-3": "1.24.2", "1.5.3+dfsg-2": "1.5.3", "3.6.3-1": "3.6.3", "9.4.0-1.1+deb12u1": "9.4.0", "1.2": "1.2", "2.0~rc1-1": "2.0"} {
		if got := upstreamVersion(in); got != want {
			t.Errorf("upstreamVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestProbeLibraries(t *testing.T) {
	r := DefaultRecipe().WithPackages("python3-bs4")
	r.Libraries = []Library{{"python", "json", "python3"}}
	var got []string
	probe := func(_ context.Context, _ string, argv []string) (string, error) {
		got = argv
		return "python3\t3.11.2-1+b1\npython3-bs4\t4.11.2-2\n", nil
	}
	labels, err := probeLibraries(t.Context(), r, "/unused", probe)
	if err != nil {
		t.Fatal(err)
	}
	if labels[LabelLibraryPrefix+"python.json"] != "3.11.2" || labels[LabelPackagePrefix+"python3-bs4"] != "4.11.2" {
		t.Errorf("labels %v", labels)
	}
	if got[0] != "dpkg-query" {
		t.Errorf("probe ran %v", got)
	}
	libs, extra := Libraries(labels)
	if !slices.Equal(libs["python"], []string{"json 3.11.2"}) || !slices.Equal(extra, []string{"python3-bs4 4.11.2"}) {
		t.Errorf("Libraries() = %v, %v", libs, extra)
	}
	missing := func(context.Context, string, []string) (string, error) { return "python3-bs4\t4.11.2-2\n", nil }
	if _, err := probeLibraries(t.Context(), r, "/unused", missing); !errors.Is(err, ErrBuild) {
		t.Errorf("a library whose package is missing: %v, want ErrBuild", err)
	}
}

func TestWriteFiles(t *testing.T) {
	root := t.TempDir()
	if err := os.Symlink("/", filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := writeFiles(root, map[string]string{"/usr/lib/x/y.py": "\nprint(1)\n"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "usr/lib/x/y.py")); string(b) != "print(1)\n" {
		t.Errorf("content %q (the leading newline of a TOML multi-line string goes)", b)
	}
	if err := writeFiles(root, map[string]string{"/escape/tmp/sandpit-test-escape": "x"}); err == nil {
		os.Remove("/tmp/sandpit-test-escape")
		t.Error("a file through a symlink out of the rootfs was written")
	}
}

// The test images are the catalog's: testenv cannot import this package.
func TestTestImagesAreTheCatalogs(t *testing.T) {
	c := DefaultCatalog()
	for name, want := range map[string]string{"toolchain": testenv.DefaultImage, "datascience": testenv.DefaultDataImage} {
		if r, err := c.Recipe(name); err != nil || r.Ref != want {
			t.Errorf("catalog image %s has ref %q (%v); testenv says %s", name, r.Ref, err, want)
		}
	}
}
