package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	goruntime "runtime"
	"slices"
	"strings"

	"github.com/sandpit-dev/sandpit"
)

// DefaultRef is the small toolchain image: the image tests run on, and the
// ref of the catalog's "toolchain" recipe (a test keeps the two equal).
const DefaultRef = "sandpit.local/toolchain:bookworm"

// RecipeVersion is part of every recipe key. Bump it whenever the build
// changes what ends up in the rootfs (customisation, layer writing), so
// caches and images built by older code are rebuilt rather than reused.
const RecipeVersion = 3

// DefaultMirror is the Debian mirror debootstrap fetches from unless the
// Builder names another.
const DefaultMirror = "http://deb.debian.org/debian"

// Label keys written into the image config.
const (
	// LabelVersionPrefix + a language name holds that language's version,
	// e.g. org.sandpit.version.python=3.11.2.
	LabelVersionPrefix = "org.sandpit.version."
	// LabelRecipe holds the key of the recipe the image was built from.
	LabelRecipe = "org.sandpit.recipe"
	// LabelImage holds the catalog name of the recipe, e.g. datascience.
	LabelImage = "org.sandpit.image"
	// LabelLibraryPrefix + language + "." + module holds a library's
	// version: org.sandpit.lib.python.pandas=1.5.3.
	LabelLibraryPrefix = "org.sandpit.lib."
	// LabelPackagePrefix + a Debian package holds its version, for the
	// packages added with `images build --packages`.
	LabelPackagePrefix = "org.sandpit.pkg."
	// LabelExtraPackages lists (comma-separated) the packages added on top
	// of the recipe, and LabelBase the key of the recipe without them: an
	// image extended so is kept by Ensure, and rebuilt with them.
	LabelExtraPackages = "org.sandpit.packages.extra"
	LabelBase          = "org.sandpit.recipe.base"
)

// Recipe says what goes into an image built from Debian packages. The
// catalog holds them (see catalog.toml for what each field means there).
type Recipe struct {
	// Name is the catalog's name for it: toolchain, datascience.
	Name string `toml:"name"`
	// Ref is the name the image is stored under in containerd.
	Ref string `toml:"ref"`
	// Suite is the Debian release, e.g. "bookworm".
	Suite string `toml:"suite"`
	// Packages are passed to debootstrap --include on top of minbase.
	Packages []string `toml:"packages"`
	// Serves names the catalog languages the image runs.
	Serves []string `toml:"languages"`
	// Libraries are recorded with their versions, for callers to know what
	// they can import.
	Libraries []Library `toml:"libraries"`
	// Files are written into the rootfs (absolute path → content) after the
	// packages are installed, before Setup.
	Files map[string]string `toml:"files"`
	// Setup commands run in the rootfs (chroot, /bin/sh -c, as root) after
	// the packages and files are in; any failure fails the build.
	Setup []string `toml:"setup"`

	// Extra are packages added on top with WithPackages.
	Extra []string `toml:"-"`
	// Languages are probed in the finished rootfs and recorded as labels
	// (the catalog fills them from the languages the image serves).
	Languages []Language `toml:"-"`
	// Env is the image config's default environment.
	Env []string `toml:"-"`
	// Cmd is the image config's default command.
	Cmd []string `toml:"-"`
	// WorkingDir is the image config's default working directory.
	WorkingDir string `toml:"-"`
}

// Library is something a language can use from the image: a module name
// callers import and the Debian package that provides it.
type Library struct {
	Language string `toml:"language"`
	Name     string `toml:"name"`
	Package  string `toml:"package"`
}

// Language names a language the image supports and how to ask its version.
type Language struct {
	// Name is the label suffix and the name callers use: "python", "c".
	Name string
	// Command runs inside the rootfs; its first line of output must
	// contain a dotted version number.
	Command []string
	// Prefix is put before the version in the label, e.g. "gcc ".
	Prefix string
}

// DefaultRecipe is the toolchain image of the built-in catalog: Python 3
// (the full interpreter: python3-minimal lacks json and ctypes), gcc, g++,
// bash and Node.js on Debian bookworm.
func DefaultRecipe() Recipe {
	r, err := DefaultCatalog().Recipe("toolchain")
	if err != nil {
		panic(err) // caught by TestDefaultRecipe
	}
	return r
}

// withConfigDefaults fills the image config every sandpit image has.
func (r *Recipe) withConfigDefaults() {
	if r.Env == nil {
		r.Env = []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LANG=C.UTF-8",
			"HOME=/tmp",
			"PYTHONDONTWRITEBYTECODE=1",
			"PYTHONUNBUFFERED=1",
		}
	}
	if r.Cmd == nil {
		r.Cmd = []string{"/bin/bash"}
	}
	if r.WorkingDir == "" {
		r.WorkingDir = sandpit.WorkspaceDir
	}
}

// WithPackages is r with Debian packages added on top (those it already
// has are left out). The image keeps a record of them, so that Ensure
// keeps the extended image, or rebuilds it with them.
func (r Recipe) WithPackages(pkgs ...string) Recipe {
	r.Extra = slices.Clone(r.Extra)
	for _, p := range pkgs {
		p = strings.TrimSpace(p)
		if p != "" && !slices.Contains(r.Packages, p) && !slices.Contains(r.Extra, p) {
			r.Extra = append(r.Extra, p)
		}
	}
	slices.Sort(r.Extra)
	return r
}

// all is every package debootstrap installs.
func (r Recipe) all() []string {
	return append(slices.Clone(r.Packages), r.Extra...)
}

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9.+-]*$`)

// Validate rejects a recipe that cannot be built, with the reason.
func (r Recipe) Validate() error {
	switch {
	case r.Ref == "":
		return fmt.Errorf("recipe has no image ref: %w", ErrInvalidRecipe)
	case !validName.MatchString(r.Suite):
		return fmt.Errorf("recipe suite %q is not a Debian suite name: %w", r.Suite, ErrInvalidRecipe)
	}
	for _, p := range r.all() {
		if !validName.MatchString(p) {
			return fmt.Errorf("recipe package %q is not a Debian package name: %w", p, ErrInvalidRecipe)
		}
	}
	for _, l := range r.Languages {
		if !validName.MatchString(l.Name) || len(l.Command) == 0 {
			return fmt.Errorf("recipe language %q needs a lowercase name and a command: %w", l.Name, ErrInvalidRecipe)
		}
	}
	for _, l := range r.Libraries {
		if !validName.MatchString(l.Language) || !validModule.MatchString(l.Name) || !validName.MatchString(l.Package) {
			return fmt.Errorf("recipe library %+v needs a language, a module name and a Debian package: %w", l, ErrInvalidRecipe)
		}
		if !slices.Contains(r.all(), l.Package) {
			return fmt.Errorf("recipe library %s comes from package %s, which the recipe does not install: %w", l.Name, l.Package, ErrInvalidRecipe)
		}
	}
	for p := range r.Files {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return fmt.Errorf("recipe file %q must be a clean absolute path: %w", p, ErrInvalidRecipe)
		}
	}
	return nil
}

var validModule = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// Key identifies the rootfs a recipe produces: the same key means the same
// packages, suite, architecture, probes and build code. The mirror, the ref
// and the image config are not part of it, since they do not change the
// rootfs.
func (r Recipe) Key() string {
	pkgs := r.all()
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)
	b, err := json.Marshal(struct {
		Version   int
		Arch      string
		Suite     string
		Packages  []string
		Languages []Language
		Libraries []Library         `json:",omitempty"`
		Files     map[string]string `json:",omitempty"`
		Setup     []string          `json:",omitempty"`
	}{RecipeVersion, goruntime.GOARCH, r.Suite, pkgs, r.Languages, r.Libraries, r.Files, r.Setup})
	if err != nil {
		panic(err) // plain strings always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:32]
}

// describe is the build command recorded in the image history.
func (r Recipe) describe() string {
	return fmt.Sprintf("debootstrap --variant=minbase --include=%s %s", strings.Join(r.all(), ","), r.Suite)
}

var versionNumber = regexp.MustCompile(`[0-9]+(\.[0-9]+)+`)

// parseVersion takes the first dotted number on the first line of a
// --version output: "gcc (Debian 12.2.0-14) 12.2.0" gives "12.2.0".
func parseVersion(output string) (string, bool) {
	line, _, _ := strings.Cut(strings.TrimSpace(output), "\n")
	v := versionNumber.FindString(line)
	return v, v != ""
}
