package runtime

import (
	"reflect"
	"testing"

	"github.com/sandpit-dev/sandpit/images"
)

// The catalog's table expands to exactly what the runtime ran before the
// table moved there, plus javascript.
func TestDefaultLanguagesFromCatalog(t *testing.T) {
	want := map[string]LanguageSpec{
		"python":     {Name: "python", Aliases: []string{"python3", "py"}, File: "main.py", Run: []string{"python3", "/sandpit/src/main.py"}},
		"c":          {Name: "c", File: "main.c", Compile: []string{"gcc", "-std=gnu17", "-O2", "-Wall", "-o", "/sandpit/out/prog", "/sandpit/src/main.c", "-lm"}, Run: []string{"/sandpit/out/prog"}},
		"cpp":        {Name: "cpp", Aliases: []string{"c++", "cxx"}, File: "main.cpp", Compile: []string{"g++", "-std=gnu++17", "-O2", "-Wall", "-o", "/sandpit/out/prog", "/sandpit/src/main.cpp", "-lm"}, Run: []string{"/sandpit/out/prog"}},
		"bash":       {Name: "bash", Aliases: []string{"sh", "shell"}, File: "main.sh", Run: []string{"bash", "/sandpit/src/main.sh"}},
		"javascript": {Name: "javascript", Aliases: []string{"js", "node", "nodejs"}, File: "main.js", Run: []string{"node", "/sandpit/src/main.js"}},
	}
	got := DefaultLanguages("img")
	if len(got) != len(want) {
		t.Fatalf("%d languages, want %d", len(got), len(want))
	}
	for _, l := range got {
		w := want[l.Name]
		w.Image, w.Description = "img", l.Description
		if len(w.Aliases) == 0 {
			w.Aliases = l.Aliases
		}
		if !reflect.DeepEqual(l, w) {
			t.Errorf("language %s:\n got %+v\nwant %+v", l.Name, l, w)
		}
	}
	// runtime.Languages puts each on the image the catalog picks.
	for _, l := range Languages(images.DefaultCatalog()) {
		if l.Image != "sandpit.local/datascience:bookworm" {
			t.Errorf("%s runs on %s", l.Name, l.Image)
		}
	}
}

func TestLibrariesFromLabels(t *testing.T) {
	labels := map[string]string{"org.sandpit.lib.python.pandas": "1.5.3", "org.sandpit.lib.python.PIL": "9.4.0", "org.sandpit.lib.r.dplyr": "1.1", "org.sandpit.version.python": "3.11.2"}
	if got := libraries(labels, "python"); !reflect.DeepEqual(got, []string{"pandas 1.5.3", "PIL 9.4.0"}) {
		t.Errorf("libraries = %v", got)
	}
}
