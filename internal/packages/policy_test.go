package packages

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParsePolicyErrors(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string // the error says this
	}{
		{name: "bad verb", text: "allow python requests\npermit python numpy\n", want: "line 2"},
		{name: "verb in capitals", text: "ALLOW python requests\n", want: "line 1"},
		{name: "too few fields", text: "# header\n\nallow python\n", want: "line 3"},
		{name: "only a verb", text: "deny\n", want: "line 1"},
		{name: "unknown language", text: "allow python a\nallow ruby rails\n", want: `line 2: language "ruby"`},
		{name: "language in capitals", text: "allow Python requests\n", want: "line 1"},
		{name: "bad python name", text: "allow python -requests\n", want: "line 1"},
		{name: "bad python specifier", text: "allow python requests >=2.31,<3\nallow python numpy ~=banana\n", want: "line 2"},
		{name: "npm range in a python rule", text: "allow python requests ^2.31\n", want: "line 1"},
		{name: "bad npm range", text: "allow javascript left-pad ^1.x.banana!\n", want: "line 1"},
		{name: "npm range with commas", text: "\n\n\n\nallow javascript left-pad >=1.0.0,<2\n", want: "line 5"},
		{name: "comment does not hide a bad line", text: "deny python  # evil\n", want: "line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(tt.text))
			if err == nil {
				t.Fatalf("ParsePolicy accepted %q: %+v", tt.text, p)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func TestParsePolicyAccepts(t *testing.T) {
	text := `# the operator's policy

allow python requests >=2.31,<3   # this name, these versions
allow python numpy                # any version
allow python  urllib3  >= 2 , < 3
deny  python evil-package
	allow javascript left-pad 1.3.0   # npm range syntax
allow javascript lodash ^4.17.0
allow javascript debug >=1 <3
deny  javascript *
`
	p, err := ParsePolicy([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(p.rules), 8; got != want {
		t.Errorf("%d rules, want %d", got, want)
	}
	if got, want := p.rules[len(p.rules)-1].line, 10; got != want {
		t.Errorf("last rule on line %d, want %d", got, want)
	}
}

func TestReadPolicy(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(good, []byte("deny python evil\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("deny python\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := ReadPolicy(good)
	if err != nil {
		t.Fatal(err)
	}
	if p.Check(Python, "evil", "1.0") == "" {
		t.Error("the policy read does not deny evil")
	}
	if _, err := ReadPolicy(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("ReadPolicy(bad) = %v, want an error naming the file and line 1", err)
	}
	if _, err := ReadPolicy(filepath.Join(dir, "missing")); err == nil {
		t.Error("ReadPolicy of a missing file succeeded")
	}
}

func TestPolicyCheck(t *testing.T) {
	type check struct {
		language, name, version string
		allowed                 bool
	}
	tests := []struct {
		name   string
		policy string
		checks []check
	}{
		{
			name:   "empty policy allows all",
			policy: "# nothing\n",
			checks: []check{
				{Python, "requests", "2.31.0", true},
				{JavaScript, "left-pad", "1.3.0", true},
			},
		},
		{
			name:   "deny only",
			policy: "deny python evil-package\n",
			checks: []check{
				{Python, "evil-package", "1.0", false},
				{Python, "requests", "2.31.0", true},
				{JavaScript, "evil-package", "1.0.0", true},
			},
		},
		{
			name:   "deny wins over allow, whatever the order",
			policy: "allow python requests\ndeny python requests\nallow javascript *\ndeny javascript left-pad\nallow javascript left-pad\n",
			checks: []check{
				{Python, "requests", "2.31.0", false},
				{JavaScript, "left-pad", "1.3.0", false},
				{JavaScript, "lodash", "4.17.21", true},
			},
		},
		{
			name:   "deny wins over a wildcard allow",
			policy: "allow python *\ndeny python evil-package\n",
			checks: []check{
				{Python, "evil-package", "1.0", false},
				{Python, "anything", "1.0", true},
			},
		},
		{
			name:   "an allow line makes the language an allowlist; the other language is unaffected",
			policy: "allow python requests\n",
			checks: []check{
				{Python, "requests", "2.31.0", true},
				{Python, "urllib3", "2.0.7", false},
				{JavaScript, "left-pad", "1.3.0", true},
			},
		},
		{
			name:   "javascript allowlist leaves python open",
			policy: "allow javascript left-pad\n",
			checks: []check{
				{JavaScript, "left-pad", "1.3.0", true},
				{JavaScript, "lodash", "4.17.21", false},
				{Python, "anything", "1.0", true},
			},
		},
		{
			name:   "python version ranges (PEP 440)",
			policy: "allow python requests >=2.31,<3\nallow python numpy ==1.26.*\ndeny python urllib3 <2\nallow python urllib3\n",
			checks: []check{
				{Python, "requests", "2.31.0", true},
				{Python, "requests", "2.32.3", true},
				{Python, "requests", "2.30.0", false},
				{Python, "requests", "3.0", false},
				{Python, "requests", "3.0.0rc1", false},
				{Python, "numpy", "1.26.4", true},
				{Python, "numpy", "2.0.0", false},
				{Python, "urllib3", "1.26.18", false},
				{Python, "urllib3", "2.0.7", true},
				{Python, "requests", "not-a-version", false},
			},
		},
		{
			name:   "javascript version ranges (npm)",
			policy: "allow javascript left-pad 1.x\nallow javascript lodash ^4.17.0\nallow javascript debug >=1 <3\ndeny javascript ms <2.1.0\nallow javascript ms\n",
			checks: []check{
				{JavaScript, "left-pad", "1.3.0", true},
				{JavaScript, "left-pad", "1.0.0", true},
				{JavaScript, "left-pad", "2.0.0", false},
				{JavaScript, "lodash", "4.17.21", true},
				{JavaScript, "lodash", "4.16.0", false},
				{JavaScript, "lodash", "5.0.0", false},
				{JavaScript, "debug", "2.6.9", true},
				{JavaScript, "debug", "3.0.0", false},
				{JavaScript, "ms", "2.0.0", false},
				{JavaScript, "ms", "2.1.3", true},
				{JavaScript, "left-pad", "not-a-version", false},
			},
		},
		{
			name:   "star name",
			policy: "deny javascript *\nallow python * >=1\n",
			checks: []check{
				{JavaScript, "left-pad", "1.3.0", false},
				{JavaScript, "@types/node", "20.1.0", false},
				{Python, "requests", "2.31.0", true},
				{Python, "ancient", "0.9", false},
			},
		},
		{
			name:   "python names compare normalized",
			policy: "allow python Foo_Bar\ndeny python Zope.Interface\nallow python *\n",
			checks: []check{
				{Python, "foo-bar", "1.0", true},
				{Python, "zope-interface", "5.0", false},
				// Check's callers pass the normalized name today; a
				// caller that passes the name as written must not slip
				// past a deny rule.
				{Python, "Zope.Interface", "5.0", false},
				{Python, "zope_interface", "5.0", false},
			},
		},
		{
			name:   "python allowlist by a name as written",
			policy: "allow python foo-bar\n",
			checks: []check{
				{Python, "foo-bar", "1.0", true},
				{Python, "Foo_Bar", "1.0", true},
				{Python, "foo-baz", "1.0", false},
			},
		},
		{
			// npm packages published before its current rules have
			// capitals (JSONStream), and the resolver accepts them as
			// dependencies: a rule naming one must match it.
			name:   "javascript legacy names with capitals",
			policy: "deny javascript JSONStream\nallow javascript *\n",
			checks: []check{
				{JavaScript, "JSONStream", "1.3.5", false},
				{JavaScript, "jsonstream", "1.3.5", false},
				{JavaScript, "left-pad", "1.3.0", true},
			},
		},
		{
			name:   "scoped npm names",
			policy: "allow javascript @types/node\n",
			checks: []check{
				{JavaScript, "@types/node", "20.1.0", true},
				{JavaScript, "node", "20.1.0", false},
				{JavaScript, "@types/react", "18.0.0", false},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(tt.policy))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tt.checks {
				why := p.Check(c.language, c.name, c.version)
				if got := why == ""; got != c.allowed {
					t.Errorf("Check(%s, %s, %s) = %q, want allowed=%v", c.language, c.name, c.version, why, c.allowed)
				}
			}
		})
	}
}

func TestPolicyCheckReasons(t *testing.T) {
	p, err := ParsePolicy([]byte("allow python requests\n\ndeny python evil\n"))
	if err != nil {
		t.Fatal(err)
	}
	if why := p.Check(Python, "evil", "1.0"); !strings.Contains(why, "line 3") || !strings.Contains(why, "evil") {
		t.Errorf("deny reason %q does not name the package and line 3", why)
	}
	if why := p.Check(Python, "numpy", "1.26.4"); !strings.Contains(why, "numpy") || !strings.Contains(why, "allowlist") {
		t.Errorf("allowlist reason %q does not name the package and the allowlist", why)
	}
}

func TestNilPolicyAllowsAll(t *testing.T) {
	var p *Policy
	for _, c := range [][3]string{{Python, "requests", "2.31.0"}, {JavaScript, "left-pad", "1.3.0"}, {"ruby", "rails", "7"}} {
		if why := p.Check(c[0], c[1], c[2]); why != "" {
			t.Errorf("nil policy Check(%v) = %q, want \"\"", c, why)
		}
	}
}
