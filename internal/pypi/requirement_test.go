package pypi

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

func TestParseRequirement(t *testing.T) {
	tests := []struct {
		in     string
		name   string
		extras []string
		specs  string
	}{
		{"requests", "requests", nil, ""},
		{"polars==1.2.0", "polars", nil, "==1.2.0"},
		{"requests>=2.31,<3", "requests", nil, ">=2.31,<3"},
		{"requests >= 2.31 , < 3", "requests", nil, ">=2.31,<3"},
		{"Django~=1.4", "django", nil, "~=1.4"},
		{"numpy!=1.5", "numpy", nil, "!=1.5"},
		{"zope.interface==5.*", "zope-interface", nil, "==5.*"},
		{"Foo__Bar-.baz", "foo-bar-baz", nil, ""},
		{"httpx[http2, CLI]>=0.27", "httpx", []string{"cli", "http2"}, ">=0.27"},
		{"name (>=1.0, <2)", "name", nil, ">=1.0,<2"},
		{"  spaced  ", "spaced", nil, ""},
		{"a", "a", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := ParseRequirement(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if r.Name != tt.name || !slices.Equal(r.Extras, tt.extras) || r.Specifiers.String() != tt.specs {
				t.Errorf("got %q %v %q, want %q %v %q", r.Name, r.Extras, r.Specifiers, tt.name, tt.extras, tt.specs)
			}
		})
	}
}

func TestParseRequirementRefused(t *testing.T) {
	long := strings.Repeat("a", 101)
	many := "x" + strings.TrimSuffix(strings.Repeat(">=1,", 21), ",")
	tests := []struct {
		name, in, want string
	}{
		{"direct reference", "requests @ https://evil.example/requests.whl", "direct reference"},
		{"direct reference, no spaces", "requests@https://evil.example/r.whl", "direct reference"},
		{"direct file reference", "requests @ file:///tmp/requests.whl", "direct reference"},
		{"direct reference with extras", "requests[socks] @ https://x/y.whl", "direct reference"},
		{"npm syntax", "left-pad@1.3.0", "npm's syntax"},
		{"bare URL", "https://evil.example/x-1.0-py3-none-any.whl", "is a URL"},
		{"VCS URL", "git+https://github.com/psf/requests", "is a URL"},
		{"file URL", "file:/tmp/x.whl", "is a URL"},
		{"relative wheel path", "./x.whl", "file path"},
		{"absolute path", "/tmp/x", "file path"},
		{"home path", "~/src/pkg", "file path"},
		{"bare wheel filename", "x-1.0-py3-none-any.whl", "file path"},
		{"windows path", `C:\pkgs\x.zip`, "file path"},
		{"pip option", "--index-url=https://evil.example/simple", "pip option"},
		{"editable", "-e .", "pip option"},
		{"requirements file", "-r requirements.txt", "pip option"},
		{"marker", `requests; python_version<"3.8"`, "environment marker"},
		{"control character", "requ\x1bests", "control character"},
		{"newline", "requests\n--index-url http://x", "control character"},
		{"NUL", "requests\x00", "control character"},
		{"non-ASCII", "reqüests", "non-ASCII"},
		{"bidi", "requests\u202e", "non-ASCII"},
		{"name too long", long, "over the 100-character limit"},
		{"too many specifiers", many, "over the limit of 20"},
		{"too long", "x" + strings.Repeat(" ", 1000), "over the 1000-byte limit"},
		{"empty", "  ", "empty"},
		{"bad name", "-requests", "pip option"},
		{"bad start", "_x", "does not start with a package name"},
		{"trailing junk", "requests 2.31", "expected version clauses"},
		{"bad specifier", "requests=2.31", "not a version specifier"},
		{"bad version", "requests==two", "not a PEP 440 version"},
		{"unclosed extras", "httpx[http2", "missing ']'"},
		{"bad extra", "httpx[a b]", "not an extra's name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRequirement(tt.in)
			if !errors.Is(err, ErrInvalidRequirement) || !errors.Is(err, sandpit.ErrInvalidArgument) {
				t.Fatalf("ParseRequirement(%q) = %v, want ErrInvalidRequirement", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if strings.ContainsAny(err.Error(), "\x1b\x00\n") || strings.Contains(err.Error(), "\u202e") {
				t.Errorf("error %q echoes a control character", err)
			}
		})
	}
}

func TestRequiresDistWithMarkers(t *testing.T) {
	r, err := parseRequirement(`PySocks!=1.5.7,>=1.5.6; extra == "socks"`, true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "pysocks" || r.Specifiers.String() != "!=1.5.7,>=1.5.6" || !r.Marker.MentionsExtra() {
		t.Errorf("got %q %q marker %q", r.Name, r.Specifiers, r.Marker)
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{"Friendly-Bard": "friendly-bard", "FRIENDLY-BARD": "friendly-bard",
		"friendly.bard": "friendly-bard", "friendly_bard": "friendly-bard", "friendly--bard": "friendly-bard", "FrIeNdLy-._.-bArD": "friendly-bard"} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}
