package runtime

import (
	"path"
	"slices"
	"strings"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/images"
)

// LanguageSpec says how to run one language: where its source goes and, for
// compiled languages, how to build it first.
type LanguageSpec struct {
	Name        string
	Aliases     []string
	Image       string
	Description string
	// File is the source file name inside sandpit.SourceDir.
	File string
	// Compile, when set, is the compile step's argv; it must write the
	// program to sandpit.BuildDir/prog.
	Compile []string
	// Run is the program's argv before the caller's args. For interpreted
	// languages it runs the source file; for compiled ones the built program.
	Run []string
}

// Languages is the runtime's language table from a catalog: every language
// it defines, each on the image the catalog picks for it.
func Languages(c *images.Catalog) []LanguageSpec {
	var out []LanguageSpec
	for _, b := range c.Bindings() {
		out = append(out, languageSpec(b.LanguageDef, b.Ref))
	}
	return out
}

// DefaultLanguages are the built-in catalog's languages (python, c, cpp,
// bash, javascript), all on image.
func DefaultLanguages(image string) []LanguageSpec {
	var out []LanguageSpec
	for _, l := range images.DefaultCatalog().Languages {
		out = append(out, languageSpec(l, image))
	}
	return out
}

// languageSpec expands a catalog entry's placeholders: {src} is the source
// file in sandpit.SourceDir, {prog} the compiled program in sandpit.BuildDir.
func languageSpec(l images.LanguageDef, image string) LanguageSpec {
	expand := func(argv []string) []string {
		if argv == nil {
			return nil
		}
		r := strings.NewReplacer("{src}", path.Join(sandpit.SourceDir, l.File), "{prog}", path.Join(sandpit.BuildDir, "prog"))
		out := make([]string, len(argv))
		for i, a := range argv {
			out[i] = r.Replace(a)
		}
		return out
	}
	return LanguageSpec{
		Name:        l.Name,
		Aliases:     slices.Clone(l.Aliases),
		Image:       image,
		Description: l.Description,
		File:        l.File,
		Compile:     expand(l.Compile),
		Run:         expand(l.Run),
	}
}

// libraries are what an image's labels say language can use.
func libraries(labels map[string]string, language string) []string {
	libs, _ := images.Libraries(labels)
	return libs[language]
}

// argv returns argv with the source file replaced by the workspace file at
// rel, when a run names one.
func (l *LanguageSpec) argv(argv []string, rel string) []string {
	src := path.Join(sandpit.SourceDir, l.File)
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == src && rel != "" {
			a = path.Join(sandpit.WorkspaceDir, rel)
		}
		out[i] = a
	}
	return out
}

// runArgv is the program's command line for req: the run argv (with a
// workspace path in place of the source) and the request's arguments.
func (l *LanguageSpec) runArgv(req sandpit.Request) []string {
	return append(l.argv(l.Run, req.Path), req.Args...)
}
