package mcp

import (
	"context"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/packages"
)

type offering map[string]bool

func (o offering) Configured(l string) bool { return o[l] }
func (offering) Layer(context.Context, []byte) (string, func(), error) {
	return "", func() {}, nil
}
func (offering) List([]byte) ([]packages.Package, error) { return nil, nil }
func (offering) Plan(context.Context, packages.Op, func(context.Context) ([]byte, error)) (*packages.Install, error) {
	return nil, nil
}

// TestMissingPackageHint: a run that failed on a missing module is told
// how to install it, only where this server installs that language.
func TestMissingPackageHint(t *testing.T) {
	both := Config{Packages: offering{"python": true, "javascript": true}}
	tests := []struct {
		name     string
		cfg      Config
		language string
		stderr   string
		want     string // "" for no hint
	}{
		{"python", both, "python", "Traceback ...\nModuleNotFoundError: No module named 'requests'\n", `packages=["requests"]`},
		{"python submodule", both, "python", "ModuleNotFoundError: No module named 'polars.io'", `packages=["polars"]`},
		{"node", both, "javascript", "Error: Cannot find module 'left-pad'\nRequire stack:", `language="javascript", packages=["left-pad"]`},
		{"node scoped subpath", both, "javascript", "Error: Cannot find module '@scope/pkg/lib/x'", `packages=["@scope/pkg"]`},
		{"node deep path", both, "javascript", "Error: Cannot find module 'lodash/fp'", `packages=["lodash"]`},
		{"node relative", both, "javascript", "Error: Cannot find module './mine'", ""},
		{"node builtin", both, "javascript", "Error: Cannot find module 'node:nope'", ""},
		{"other error", both, "python", "NameError: name 'x' is not defined", ""},
		{"not offered", Config{Packages: offering{"javascript": true}}, "python", "ModuleNotFoundError: No module named 'requests'", ""},
		{"no packages", Config{}, "python", "ModuleNotFoundError: No module named 'requests'", ""},
		{"bash", both, "bash", "ModuleNotFoundError: No module named 'requests'", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cfg.missingPackageHint(tt.language, tt.stderr)
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("hint = %q, want one with %q", got, tt.want)
			}
		})
	}
}

// TestSecureScriptPromptPackages: the prompt says packages come through
// install_packages where the server offers them, and that nothing can be
// installed where it does not.
func TestSecureScriptPromptPackages(t *testing.T) {
	langs := []sandpit.Language{{Name: "python", Version: "3.11"}, {Name: "javascript", Version: "18"}}
	s := StatusReport{Languages: langs, Libraries: map[string][]string{"python": {"numpy 1.24"}}, Packages: []string{"python"}}
	got := secureScriptPrompt(s, "task", "")
	for _, want := range []string{"numpy 1.24; more only through the install_packages tool", "the program itself cannot install packages"} {
		if !strings.Contains(got, want) {
			t.Errorf("prompt with python packages lacks %q:\n%s", want, got)
		}
	}
	if !strings.Contains(got, "javascript 18; nothing beyond what the image ships, and nothing can be installed") {
		t.Errorf("javascript is not offered, yet:\n%s", got)
	}
	s.Packages = nil
	if got := secureScriptPrompt(s, "task", ""); strings.Contains(got, "install_packages") || !strings.Contains(got, "(nothing else can be installed)") {
		t.Errorf("no packages offered:\n%s", got)
	}
}
