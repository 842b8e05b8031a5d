package runtime

import (
	"path"

	"github.com/sandpit-dev/sandpit"
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

// DefaultLanguages are python, c, cpp and bash, all on one toolchain image.
func DefaultLanguages(image string) []LanguageSpec {
	src := func(f string) string { return path.Join(sandpit.SourceDir, f) }
	prog := path.Join(sandpit.BuildDir, "prog")
	return []LanguageSpec{
		{
			Name: "python", Aliases: []string{"python3", "py"}, Image: image,
			Description: "CPython 3 with the standard library; run as `python3 main.py`",
			File:        "main.py",
			Run:         []string{"python3", src("main.py")},
		},
		{
			Name: "c", Image: image,
			Description: "C (gcc, -std=gnu17 -O2, linked with -lm), compiled then run",
			File:        "main.c",
			Compile:     []string{"gcc", "-std=gnu17", "-O2", "-Wall", "-o", prog, src("main.c"), "-lm"},
			Run:         []string{prog},
		},
		{
			Name: "cpp", Aliases: []string{"c++", "cxx"}, Image: image,
			Description: "C++ (g++, -std=gnu++17 -O2), compiled then run",
			File:        "main.cpp",
			Compile:     []string{"g++", "-std=gnu++17", "-O2", "-Wall", "-o", prog, src("main.cpp"), "-lm"},
			Run:         []string{prog},
		},
		{
			Name: "bash", Aliases: []string{"sh", "shell"}, Image: image,
			Description: "GNU bash with coreutils; run as `bash main.sh`",
			File:        "main.sh",
			Run:         []string{"bash", src("main.sh")},
		},
	}
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
