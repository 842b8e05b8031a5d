package images

import (
	_ "embed"
	"fmt"
	"os"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// The catalog is the one declarative place that says which languages
// sandpit runs, how (source file name, compile and run argv, version probe),
// which images exist (recipes: Debian packages, files, setup commands,
// libraries to record) and which image serves which language. sandpit ships
// one (catalog.toml); a user's file is read on top of it.

//go:embed catalog.toml
var builtinCatalog string

// EnvCatalog names a catalog file read on top of the built-in one.
const EnvCatalog = "SANDPIT_CATALOG"

// Catalog is the parsed catalog.
type Catalog struct {
	// DefaultImage is the recipe name every language runs on unless
	// LanguageImages names another.
	DefaultImage   string            `toml:"default_image"`
	LanguageImages map[string]string `toml:"language_images"`
	Languages      []LanguageDef     `toml:"language"`
	Images         []Recipe          `toml:"image"`
}

// LanguageDef says how to run one language. In Compile and Run, "{src}"
// stands for the source file and "{prog}" for the compiled program.
type LanguageDef struct {
	Name        string   `toml:"name"`
	Aliases     []string `toml:"aliases"`
	Description string   `toml:"description"`
	// File is the source file's name, e.g. main.py.
	File    string   `toml:"file"`
	Compile []string `toml:"compile"`
	Run     []string `toml:"run"`
	// Version runs in the image at build time; the first dotted number on
	// its first line of output is recorded, after VersionPrefix.
	Version       []string `toml:"version"`
	VersionPrefix string   `toml:"version_prefix"`
}

// BuiltinCatalog is the text of the built-in catalog file.
func BuiltinCatalog() string { return builtinCatalog }

// DefaultCatalog is the built-in catalog.
func DefaultCatalog() *Catalog {
	c, err := parseCatalog(builtinCatalog, "built-in catalog")
	if err != nil {
		panic(err) // caught by TestDefaultCatalog
	}
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

// LoadCatalog is the built-in catalog with the file at path (if not empty)
// read on top: its languages and images replace those of the same name and
// add the others; its default_image and language_images, when set, win.
func LoadCatalog(file string) (*Catalog, error) {
	c := DefaultCatalog()
	if file == "" {
		return c, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	user, err := parseCatalog(string(b), file)
	if err != nil {
		return nil, err
	}
	c.merge(user)
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("catalog %s: %w", file, err)
	}
	return c, nil
}

func parseCatalog(text, name string) (*Catalog, error) {
	var c Catalog
	md, err := toml.Decode(text, &c)
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", name, err, ErrInvalidRecipe)
	}
	if undec := md.Undecoded(); len(undec) > 0 {
		keys := make([]string, len(undec))
		for i, k := range undec {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("%s: unknown keys %s: %w", name, strings.Join(keys, ", "), ErrInvalidRecipe)
	}
	return &c, nil
}

func (c *Catalog) merge(o *Catalog) {
	if o.DefaultImage != "" {
		c.DefaultImage = o.DefaultImage
	}
	if c.LanguageImages == nil {
		c.LanguageImages = map[string]string{}
	}
	for k, v := range o.LanguageImages {
		c.LanguageImages[k] = v
	}
	for _, l := range o.Languages {
		if i := slices.IndexFunc(c.Languages, func(x LanguageDef) bool { return x.Name == l.Name }); i >= 0 {
			c.Languages[i] = l
		} else {
			c.Languages = append(c.Languages, l)
		}
	}
	for _, r := range o.Images {
		if i := slices.IndexFunc(c.Images, func(x Recipe) bool { return x.Name == r.Name }); i >= 0 {
			c.Images[i] = r
		} else {
			c.Images = append(c.Images, r)
		}
	}
}

// Validate checks that every name resolves: each image's languages are
// defined, every language runs on an image that serves it, no alias is
// taken twice, and every recipe can be built.
func (c *Catalog) Validate() error {
	names := map[string]string{}
	for _, l := range c.Languages {
		if err := l.validate(); err != nil {
			return err
		}
		for _, n := range append([]string{l.Name}, l.Aliases...) {
			n = strings.ToLower(n)
			if other, ok := names[n]; ok {
				return fmt.Errorf("language name or alias %q is used by %s and %s: %w", n, other, l.Name, ErrInvalidRecipe)
			}
			names[n] = l.Name
		}
	}
	for _, r := range c.Images {
		for _, l := range r.Serves {
			if _, ok := c.language(l); !ok {
				return fmt.Errorf("image %s serves language %q, which the catalog does not define: %w", r.Name, l, ErrInvalidRecipe)
			}
		}
		full, err := c.Recipe(r.Name)
		if err != nil {
			return err
		}
		if err := full.Validate(); err != nil {
			return err
		}
	}
	if _, ok := c.image(c.DefaultImage); !ok {
		return fmt.Errorf("default_image %q is not an image of the catalog: %w", c.DefaultImage, ErrInvalidRecipe)
	}
	for _, l := range c.Languages {
		img := c.ImageFor(l.Name)
		r, ok := c.image(img)
		if !ok {
			return fmt.Errorf("language %s runs on image %q, which the catalog does not define: %w", l.Name, img, ErrInvalidRecipe)
		}
		if !slices.Contains(r.Serves, l.Name) {
			return fmt.Errorf("language %s runs on image %s, which does not list it under languages: %w", l.Name, img, ErrInvalidRecipe)
		}
	}
	for l := range c.LanguageImages {
		if _, ok := c.language(l); !ok {
			return fmt.Errorf("language_images names %q, which is not a language of the catalog: %w", l, ErrInvalidRecipe)
		}
	}
	return nil
}

func (l LanguageDef) validate() error {
	bad := func(why string) error {
		return fmt.Errorf("language %q: %s: %w", l.Name, why, ErrInvalidRecipe)
	}
	switch {
	case !validName.MatchString(l.Name):
		return bad("needs a lowercase name")
	case l.File == "" || path.Base(l.File) != l.File || strings.HasPrefix(l.File, "."):
		return bad("file must be a plain file name such as main.py")
	case len(l.Run) == 0:
		return bad("run is empty")
	case len(l.Version) == 0:
		return bad("version (the command that prints its version) is empty")
	case len(l.Compile) > 0 && !slices.Contains(l.Compile, "{prog}"):
		return bad("compile must write the program to {prog}")
	}
	return nil
}

func (c *Catalog) language(name string) (LanguageDef, bool) {
	i := slices.IndexFunc(c.Languages, func(l LanguageDef) bool { return l.Name == name })
	if i < 0 {
		return LanguageDef{}, false
	}
	return c.Languages[i], true
}

func (c *Catalog) image(name string) (Recipe, bool) {
	i := slices.IndexFunc(c.Images, func(r Recipe) bool { return r.Name == name })
	if i < 0 {
		return Recipe{}, false
	}
	return c.Images[i], true
}

// ImageFor is the name of the image language runs on.
func (c *Catalog) ImageFor(language string) string {
	if img, ok := c.LanguageImages[language]; ok {
		return img
	}
	return c.DefaultImage
}

// UsedImages are the names of the images some language runs on, default
// first.
func (c *Catalog) UsedImages() []string {
	seen := map[string]bool{c.DefaultImage: true}
	out := []string{c.DefaultImage}
	var rest []string
	for _, l := range c.Languages {
		if img := c.ImageFor(l.Name); !seen[img] {
			seen[img] = true
			rest = append(rest, img)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// ImageNames lists every image of the catalog.
func (c *Catalog) ImageNames() []string {
	out := make([]string, len(c.Images))
	for i, r := range c.Images {
		out[i] = r.Name
	}
	return out
}

// Recipe is the named image's recipe, ready to build: its languages'
// version probes and the image config filled in.
func (c *Catalog) Recipe(name string) (Recipe, error) {
	r, ok := c.image(name)
	if !ok {
		return Recipe{}, fmt.Errorf("no image %q in the catalog (it has %s): %w", name, strings.Join(c.ImageNames(), ", "), ErrInvalidRecipe)
	}
	r.Packages = slices.Clone(r.Packages)
	if r.Suite == "" {
		r.Suite = "bookworm"
	}
	r.Languages = nil
	for _, n := range r.Serves {
		l, ok := c.language(n)
		if !ok {
			return Recipe{}, fmt.Errorf("image %s serves language %q, which the catalog does not define: %w", r.Name, n, ErrInvalidRecipe)
		}
		r.Languages = append(r.Languages, Language{Name: l.Name, Command: l.Version, Prefix: l.VersionPrefix})
	}
	r.withConfigDefaults()
	return r, nil
}

// Binding is a language and the image it runs on.
type Binding struct {
	LanguageDef
	// Image is the recipe name, Ref the image's name in containerd.
	Image, Ref string
}

// Bindings lists the catalog's languages with the image each runs on.
func (c *Catalog) Bindings() []Binding {
	var out []Binding
	for _, l := range c.Languages {
		name := c.ImageFor(l.Name)
		r, ok := c.image(name)
		if !ok {
			continue // Validate reports it
		}
		out = append(out, Binding{LanguageDef: l, Image: name, Ref: r.Ref})
	}
	return out
}
