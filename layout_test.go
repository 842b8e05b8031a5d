package sandpit_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestImportRules keeps the arrows between packages one way (STYLE.md, "Who
// owns what"): the root vocabulary imports nothing of ours; mcp and store
// never build against containerd or the runtime; the libraries below mcp
// never import mcp-go or cmd.
func TestImportRules(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		testenv.Skip(t, "the go command is not on PATH: cannot list dependencies")
	}
	const mod = "github.com/sandpit-dev/sandpit"
	tests := []struct {
		name      string
		pkgs      []string
		forbidden []string
		direct    bool // the packages' own imports only, not their dependencies
	}{
		{"root imports nothing of ours", []string{"."}, []string{mod + "/"}, false},
		{"root imports no containerd", []string{"."}, []string{"github.com/containerd/"}, false},
		{"mcp and store stay off containerd and the runtime", []string{"./mcp/...", "./store/..."},
			[]string{"github.com/containerd/", mod + "/runtime", mod + "/images", mod + "/cmd/"}, false},
		{"libraries never import mcp-go or cmd", []string{"./oci/...", "./runtime/...", "./store/...", "./images/..."},
			[]string{"github.com/mark3labs/mcp-go", mod + "/cmd/", mod + "/mcp"}, false},
		{"oci is pure: no daemon client", []string{"./oci/..."}, []string{"github.com/containerd/containerd$", mod + "/runtime"}, false},
		// The engine seam (issue 26): orchestration reaches containerd
		// only through runtime/engine, whose one implementation here is
		// runtime/ctrd; the seam itself knows no engine.
		{"runtime's orchestration imports no containerd", []string{"./runtime"}, []string{"github.com/containerd/"}, true},
		{"the engine seam is neutral", []string{"./runtime/engine"},
			[]string{"github.com/containerd/", mod + "/runtime$", mod + "/runtime/ctrd", mod + "/oci"}, false},
		{"the containerd engine never reaches up into orchestration", []string{"./runtime/ctrd"}, []string{mod + "/runtime$"}, false},
		// The attack payloads are data any test may import (the runtime's,
		// a cluster's through MCP): they bring no engine or protocol along.
		{"the attack payloads are data only", []string{"./internal/attacks"},
			[]string{"github.com/containerd/", "github.com/mark3labs/mcp-go", mod + "/runtime", mod + "/mcp", mod + "/cmd/", mod + "/oci"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, tt.pkgs...)
			if tt.direct {
				args = append([]string{"list", "-f", `{{join .Imports "\n"}}`}, tt.pkgs...)
			}
			out, err := exec.Command("go", args...).Output()
			if err != nil {
				t.Fatalf("go %s: %v", strings.Join(args, " "), err)
			}
			deps := strings.Fields(string(out))
			if len(deps) == 0 {
				t.Fatal("go list printed no packages")
			}
			for _, d := range deps {
				for _, f := range tt.forbidden {
					// "x$" forbids exactly x; anything else is a prefix.
					exact, isExact := strings.CutSuffix(f, "$")
					if (isExact && d == exact || !isExact && strings.HasPrefix(d, f)) && d != mod {
						t.Errorf("%v depends on %s", tt.pkgs, d)
					}
				}
			}
		})
	}
}

// TestIntegrationTestFilesNamed: a test file that needs a real containerd
// is named *integration_test.go, so a reader (and `go test -run` by file)
// tells the pure tests from the ones that create containers.
func TestIntegrationTestFilesNamed(t *testing.T) {
	markers := []string{"testenv.Containerd(", "testruntime."}
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, "internal/test") || path == "layout_test.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range markers {
			if strings.Contains(string(b), m) {
				n++
				if !strings.HasSuffix(path, "integration_test.go") {
					t.Errorf("%s uses %s (a real containerd) but is not named *integration_test.go", path, strings.TrimSuffix(m, "("))
				}
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("found no integration test files: the markers are wrong")
	}
}
