package npm

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		in, name, rng string // rng: the range as String gives it
	}{
		{"left-pad", "left-pad", "*"},
		{"left-pad@1.3.0", "left-pad", "1.3.0"},
		{"left-pad@^1.2", "left-pad", "^1.2"},
		{"@scope/name@~2.0.1", "@scope/name", "~2.0.1"},
		{"@scope/name", "@scope/name", "*"},
		{"a@>=1.0.0 <2 || 3.x", "a", ">=1.0.0 <2 || 3.x"},
		{"a@1.2.3 - 2.0", "a", "1.2.3 - 2.0"},
		{"a@x", "a", "x"},
		{"a@*", "a", "*"},
		{"a@latest", "a", "latest"},
		{"lodash.get@4.4.2", "lodash.get", "4.4.2"},
		{"a@1.0.0-beta.1", "a", "1.0.0-beta.1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			s, err := ParseSpec(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != tt.name || s.Range.String() != tt.rng || s.Raw != tt.in {
				t.Fatalf("ParseSpec = %q %q %q, want %q %q", s.Name, s.Range, s.Raw, tt.name, tt.rng)
			}
		})
	}
}

func TestParseSpecRefuses(t *testing.T) {
	tests := []struct{ in, say string }{
		{"https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz", "a URL"},
		{"git+https://github.com/a/b.git", "a URL"},
		{"git+ssh://git@github.com/a/b", "a URL"},
		{"git@github.com:a/b.git", "git repository"},
		{"github:user/repo", "hosted git"},
		{"gitlab:user/repo", "hosted git"},
		{"user/repo", "GitHub user/repo"},
		{"user/repo#main", "GitHub user/repo"},
		{"file:../lib", "local path"},
		{"./lib", "local path"},
		{"/srv/lib", "local path"},
		{"~/lib", "local path"},
		{"../lib.tgz", "local path"},
		{"lib.tgz", "a tarball"},
		{"a@npm:b@1", "npm: alias"},
		{"npm:b@1", "npm: alias"},
		{"a@file:../x", "local path"},
		{"a@github:u/r", "hosted git"},
		{"a@next", `"next" is a dist-tag; only "latest"`},
		{"a@beta", "dist-tag"},
		{"a@", "ends with @"},
		{"a@1.0,2.0", "commas"},
		{"a@!=1.0", "characters no npm range has"},
		{"a@>>1", "does not parse"},
		{"", "empty"},
		{" left-pad", "spaces around"},
		{"left-pad ", "spaces around"},
		{"left-pad\t", "control character"},
		{"left\x00pad", "control character"},
		{"left-pad\n@1", "control character"},
		{"left\u202epad", "non-ASCII"},
		{"lеft-pad", "non-ASCII"}, // a Cyrillic e
		{"Left-Pad", "capital letters"},
		{".hidden", "starts with . or _"},
		{"_private", "starts with . or _"},
		{"@scope/.x", "starts with . or _"},
		{"@scope", "no name after a /"},
		{"@/x", "empty part"},
		{"a b", "not URL-safe"},
		{"a%2fb", "not URL-safe"},
		{"a:b", "not URL-safe"},
		{"a~b", "not URL-safe"}, // npm refuses ~'!()* in new names
		{"node_modules", "reserved"},
		{"favicon.ico", "reserved"},
		{strings.Repeat("a", 215), "215 bytes"},
		{strings.Repeat("a", 1001), "over the 1000-byte limit"},
		{"a@" + strings.Repeat("1.x || ", 40) + "1", "has 41 alternatives, over the limit of 32"},
	}
	for _, tt := range tests {
		t.Run(tt.in[:min(len(tt.in), 40)], func(t *testing.T) {
			_, err := ParseSpec(tt.in)
			if !errors.Is(err, ErrInvalidSpec) || !errors.Is(err, sandpit.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.say) {
				t.Fatalf("ParseSpec(%q) = %v, want ErrInvalidSpec saying %q", tt.in, err, tt.say)
			}
		})
	}
}

func TestDependencyNames(t *testing.T) {
	// Old packages may be depended on by names npm refuses today.
	for _, ok := range []string{"JSONStream", "ms", "@types/node", "a~b"} {
		if err := ValidDepName(ok); err != nil {
			t.Errorf("ValidDepName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"..", "../x", "a/b", ".x", "_x", "x\x1b[0m", "", "a b"} {
		if err := ValidDepName(bad); err == nil {
			t.Errorf("ValidDepName(%q) = nil", bad)
		}
	}
}

func TestRange(t *testing.T) {
	tests := []struct {
		rng     string
		version string
		want    bool
	}{
		{"^1.2.3", "1.9.0", true},
		{"^1.2.3", "2.0.0", false},
		{"^0.2.3", "0.3.0", false},
		{"^0.0.3", "0.0.4", false},
		{"~1.2.3", "1.2.9", true},
		{"~1.2.3", "1.3.0", false},
		{"1.2 - 2.3", "2.3.9", true},
		{"1.2 - 2.3", "2.4.0", false},
		{"1.x", "1.99.0", true},
		{"", "3.0.0", true},
		{">=1 <2 || >=3", "2.5.0", false},
		{">=1 <2 || >=3", "3.1.0", true},
		// Prereleases: only when the range names one of the same
		// major.minor.patch, as npm has it.
		{"^1.2.3", "1.5.0-rc.1", false},
		{"*", "2.0.0-alpha", false},
		{"^1.2.3-beta.1", "1.2.3-beta.2", true},
		{"^1.2.3-beta.1", "1.9.0-alpha", false},
		{"^1.2.3-beta.1", "1.9.0", true},
		{">=1.0.0-0 <2", "1.0.0-alpha", true},
		{"1.0.0-beta || 2.x", "2.0.0-rc.1", false},
	}
	for _, tt := range tests {
		r, err := ParseRange(tt.rng)
		if err != nil {
			t.Fatalf("ParseRange(%q): %v", tt.rng, err)
		}
		v, err := ParseVersion(tt.version)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Contains(v); got != tt.want {
			t.Errorf("%q contains %s = %v, want %v", tt.rng, tt.version, got, tt.want)
		}
	}
}
