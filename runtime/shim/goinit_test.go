package shim

import (
	"slices"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

// goInit swaps exactly the script's cold shape, on the loader path, when
// the runtime asked; anything else runs as given.
func TestGoInit(t *testing.T) {
	script := func(mode string, prog ...string) []string {
		return append([]string{loaderPath, loaderMode, "/bin/bash", "-c", "set -m ...", "sandpit-init", mode}, prog...)
	}
	asked := map[string]string{sandpit.InitAnnotation: "stdin"}
	tests := []struct {
		name string
		args []string
		ann  map[string]string
		want []string
	}{
		{"cold run", script("stdin", "python3", "main.py"), asked, []string{loaderPath, loaderMode, loaderInitFlag, "python3", "main.py"}},
		{"cold build step", script("stdin", "/bin/bash", "-c", "b", "sandpit-build", "gcc", "--", "./a.out"), asked,
			[]string{loaderPath, loaderMode, loaderInitFlag, "/bin/bash", "-c", "b", "sandpit-build", "gcc", "--", "./a.out"}},
		{"not asked", script("stdin", "python3"), nil, script("stdin", "python3")},
		{"pool mode", script("pool", "python3", "-c", "w"), map[string]string{sandpit.InitAnnotation: "pool"}, script("pool", "python3", "-c", "w")},
		{"asked, but pool-shaped", script("pool", "python3"), asked, script("pool", "python3")},
		{"no program", script("stdin"), asked, script("stdin")},
		{"not on the loader path", []string{"/bin/bash", "-c", "s", "sandpit-init", "stdin", "python3", "x", "y"}, asked,
			[]string{"/bin/bash", "-c", "s", "sandpit-init", "stdin", "python3", "x", "y"}},
		{"another shell", append([]string{loaderPath, loaderMode, "/bin/sh", "-c", "s", "sandpit-init", "stdin"}, "python3"), asked,
			append([]string{loaderPath, loaderMode, "/bin/sh", "-c", "s", "sandpit-init", "stdin"}, "python3")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := goInit(slices.Clone(tt.args), tt.ann); !slices.Equal(got, tt.want) {
				t.Errorf("goInit = %q, want %q", got, tt.want)
			}
		})
	}
}
