package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	goruntime "runtime"
	"slices"
	"strings"

	"github.com/sandpit-dev/sandpit"
)

// DefaultRef is the image every sandbox runs unless told otherwise.
const DefaultRef = "sandpit.local/toolchain:bookworm"

// RecipeVersion is part of every recipe key. Bump it whenever the build
// changes what ends up in the rootfs (customisation, layer writing), so
// caches and images built by older code are rebuilt rather than reused.
const RecipeVersion = 1

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
)

// Recipe says what goes into an image built from Debian packages.
type Recipe struct {
	// Ref is the name the image is stored under in containerd.
	Ref string
	// Suite is the Debian release, e.g. "bookworm".
	Suite string
	// Packages are passed to debootstrap --include on top of minbase.
	Packages []string
	// Languages are probed in the finished rootfs and recorded as labels.
	Languages []Language
	// Env is the image config's default environment.
	Env []string
	// Cmd is the image config's default command.
	Cmd []string
	// WorkingDir is the image config's default working directory.
	WorkingDir string
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

// DefaultRecipe is the toolchain image: Python 3 (the full interpreter:
// python3-minimal lacks json and ctypes), gcc, g++ and bash on Debian
// bookworm.
func DefaultRecipe() Recipe {
	return Recipe{
		Ref:      DefaultRef,
		Suite:    "bookworm",
		Packages: []string{"python3", "gcc", "g++", "libc6-dev", "bash", "coreutils"},
		Languages: []Language{
			{Name: "python", Command: []string{"python3", "--version"}},
			{Name: "c", Command: []string{"gcc", "--version"}, Prefix: "gcc "},
			{Name: "cpp", Command: []string{"g++", "--version"}, Prefix: "g++ "},
			{Name: "bash", Command: []string{"bash", "--version"}},
		},
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LANG=C.UTF-8",
			"HOME=/tmp",
			"PYTHONDONTWRITEBYTECODE=1",
			"PYTHONUNBUFFERED=1",
		},
		Cmd:        []string{"/bin/bash"},
		WorkingDir: sandpit.WorkspaceDir,
	}
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
	for _, p := range r.Packages {
		if !validName.MatchString(p) {
			return fmt.Errorf("recipe package %q is not a Debian package name: %w", p, ErrInvalidRecipe)
		}
	}
	for _, l := range r.Languages {
		if !validName.MatchString(l.Name) || len(l.Command) == 0 {
			return fmt.Errorf("recipe language %q needs a lowercase name and a command: %w", l.Name, ErrInvalidRecipe)
		}
	}
	return nil
}

// Key identifies the rootfs a recipe produces: the same key means the same
// packages, suite, architecture, probes and build code. The mirror, the ref
// and the image config are not part of it, since they do not change the
// rootfs.
func (r Recipe) Key() string {
	pkgs := slices.Clone(r.Packages)
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)
	b, err := json.Marshal(struct {
		Version   int
		Arch      string
		Suite     string
		Packages  []string
		Languages []Language
	}{RecipeVersion, goruntime.GOARCH, r.Suite, pkgs, r.Languages})
	if err != nil {
		panic(err) // plain strings always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:32]
}

// describe is the build command recorded in the image history.
func (r Recipe) describe() string {
	return fmt.Sprintf("debootstrap --variant=minbase --include=%s %s", strings.Join(r.Packages, ","), r.Suite)
}

var versionNumber = regexp.MustCompile(`[0-9]+(\.[0-9]+)+`)

// parseVersion takes the first dotted number on the first line of a
// --version output: "gcc (Debian 12.2.0-14) 12.2.0" gives "12.2.0".
func parseVersion(output string) (string, bool) {
	line, _, _ := strings.Cut(strings.TrimSpace(output), "\n")
	v := versionNumber.FindString(line)
	return v, v != ""
}
