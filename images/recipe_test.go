package images

import (
	"errors"
	"testing"
)

func TestRecipeKey(t *testing.T) {
	base := DefaultRecipe()
	tests := []struct {
		name   string
		change func(r *Recipe)
		same   bool
	}{
		{"unchanged", func(r *Recipe) {}, true},
		{"package order", func(r *Recipe) {
			r.Packages = []string{"nodejs", "coreutils", "bash", "libc6-dev", "g++", "gcc", "python3"}
		}, true},
		{"duplicate package", func(r *Recipe) { r.Packages = append(r.Packages, "gcc") }, true},
		{"ref", func(r *Recipe) { r.Ref = "example.org/other:1" }, true},
		{"env", func(r *Recipe) { r.Env = []string{"PATH=/bin"} }, true},
		{"cmd", func(r *Recipe) { r.Cmd = []string{"/bin/sh"} }, true},
		{"extra package", func(r *Recipe) { r.Packages = append(r.Packages, "make") }, false},
		{"fewer packages", func(r *Recipe) { r.Packages = r.Packages[1:] }, false},
		{"suite", func(r *Recipe) { r.Suite = "trixie" }, false},
		{"probe command", func(r *Recipe) { r.Languages[0].Command = []string{"python3", "-V"} }, false},
		{"probe prefix", func(r *Recipe) { r.Languages[1].Prefix = "" }, false},
		{"extra package", func(r *Recipe) { *r = r.WithPackages("python3-bs4") }, false},
		{"extra package already in", func(r *Recipe) { *r = r.WithPackages("gcc") }, true},
		{"file", func(r *Recipe) { r.Files = map[string]string{"/etc/x": "y"} }, false},
		{"setup", func(r *Recipe) { r.Setup = []string{"true"} }, false},
		{"library", func(r *Recipe) { r.Libraries = []Library{{"python", "json", "python3"}} }, false},
	}
	want := base.Key()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := DefaultRecipe()
			tt.change(&r)
			got := r.Key()
			if (got == want) != tt.same {
				t.Errorf("Key() = %s, base %s; want same=%v", got, want, tt.same)
			}
		})
	}
}

func TestDefaultRecipe(t *testing.T) {
	r := DefaultRecipe()
	if err := r.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	for _, p := range []string{"python3", "gcc", "g++", "libc6-dev", "bash", "coreutils"} {
		found := false
		for _, q := range r.Packages {
			found = found || q == p
		}
		if !found {
			t.Errorf("default recipe lacks package %s", p)
		}
	}
	for _, q := range r.Packages {
		if q == "python3-minimal" {
			t.Errorf("default recipe must use the full python3, not python3-minimal (no json, ctypes)")
		}
	}
	if r.Ref != DefaultRef {
		t.Errorf("Ref = %q, want %q", r.Ref, DefaultRef)
	}
}

func TestRecipeValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(r *Recipe)
		ok     bool
	}{
		{"default", func(r *Recipe) {}, true},
		{"no ref", func(r *Recipe) { r.Ref = "" }, false},
		{"suite with slash", func(r *Recipe) { r.Suite = "../etc" }, false},
		{"package option injection", func(r *Recipe) { r.Packages = append(r.Packages, "--foreign") }, false},
		{"package with comma", func(r *Recipe) { r.Packages = append(r.Packages, "a,b") }, false},
		{"language without command", func(r *Recipe) { r.Languages[0].Command = nil }, false},
		{"language with upper case", func(r *Recipe) { r.Languages[0].Name = "Python" }, false},
		{"extra package option injection", func(r *Recipe) { *r = r.WithPackages("-oAPT::x") }, false},
		{"library from a package not installed", func(r *Recipe) { r.Libraries = []Library{{"python", "numpy", "python3-numpy"}} }, false},
		{"library with a bad module", func(r *Recipe) { r.Libraries = []Library{{"python", "os;rm", "python3"}} }, false},
		{"relative file", func(r *Recipe) { r.Files = map[string]string{"etc/x": ""} }, false},
		{"file with dot-dot", func(r *Recipe) { r.Files = map[string]string{"/etc/../x": ""} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := DefaultRecipe()
			tt.change(&r)
			err := r.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidRecipe) {
				t.Errorf("Validate() = %v, want ErrInvalidRecipe", err)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct {
		name, output, want string
		ok                 bool
	}{
		{"python", "Python 3.11.2\n", "3.11.2", true},
		{"gcc", "gcc (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.\n", "12.2.0", true},
		{"g++", "g++ (Debian 12.2.0-14) 12.2.0\n", "12.2.0", true},
		{"bash", "GNU bash, version 5.2.15(1)-release (x86_64-pc-linux-gnu)\nCopyright (C) 2022\n", "5.2.15", true},
		{"version only on second line", "some banner\nversion 1.2\n", "", false},
		{"no number", "command not found", "", false},
		{"empty", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseVersion(tt.output)
			if got != tt.want || ok != tt.ok {
				t.Errorf("parseVersion(%q) = %q, %v; want %q, %v", tt.output, got, ok, tt.want, tt.ok)
			}
		})
	}
}
