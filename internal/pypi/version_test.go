package pypi

import (
	"errors"
	"slices"
	"testing"
)

// PEP 440, "Summary of permitted suffixes and relative ordering", with
// local versions and an epoch appended.
var pepOrder = []string{
	"1.0.dev456",
	"1.0a1",
	"1.0a2.dev456",
	"1.0a12.dev456",
	"1.0a12",
	"1.0b1.dev456",
	"1.0b2",
	"1.0b2.post345.dev456",
	"1.0b2.post345",
	"1.0rc1.dev456",
	"1.0rc1",
	"1.0",
	"1.0+abc.5",
	"1.0+abc.7",
	"1.0+5",
	"1.0.post456.dev34",
	"1.0.post456",
	"1.0.15",
	"1.1.dev1",
	"1!0.1",
}

func TestVersionOrder(t *testing.T) {
	for i, a := range pepOrder {
		for j, b := range pepOrder {
			got := MustVersion(a).Compare(MustVersion(b))
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got != want {
				t.Errorf("Compare(%s, %s) = %d, want %d", a, b, got, want)
			}
		}
	}
}

func TestVersionNormalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"1.0", "1.0"},
		{"v1.0", "1.0"},
		{" 1.0 ", "1.0"},
		{"01.02", "1.2"},
		{"1.0-RC1", "1.0rc1"},
		{"1.0alpha1", "1.0a1"},
		{"1.0c1", "1.0rc1"},
		{"1.0preview2", "1.0rc2"},
		{"1.0b", "1.0b0"},
		{"1.0-1", "1.0.post1"},
		{"1.0.post", "1.0.post0"},
		{"1.0.r4", "1.0.post4"},
		{"1.0-rev4", "1.0.post4"},
		{"1.0-dev", "1.0.dev0"},
		{"1.0.DEV3", "1.0.dev3"},
		{"1.0+ubuntu-1", "1.0+ubuntu.1"},
		{"1.0+Ubuntu_01", "1.0+ubuntu.1"},
		{"0!1.0", "1.0"},
		{"2!1.0.post2.dev3", "2!1.0.post2.dev3"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			v, err := ParseVersion(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := v.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestVersionEquality(t *testing.T) {
	for _, pair := range [][2]string{{"1.0", "1.0.0"}, {"1.0", "1.0.0.0"}, {"1.0rc1", "1.0c1"}, {"1.0.post0", "1.0-0"}} {
		if !MustVersion(pair[0]).Equal(MustVersion(pair[1])) {
			t.Errorf("%s != %s", pair[0], pair[1])
		}
	}
}

func TestVersionInvalid(t *testing.T) {
	for _, s := range []string{"", "1.0+", "french toast", "1.0.x", "1..0", "1.0-", "=1.0", "1.0 2.0",
		"99999999999999999999", "1.2.3.4.5.6.7.8.9.10.11.12.13.14.15.16.17.18.19.20.21",
		"1." + string(make([]byte, 200))} {
		if _, err := ParseVersion(s); !errors.Is(err, ErrInvalidVersion) {
			t.Errorf("ParseVersion(%q) = %v, want ErrInvalidVersion", s, err)
		}
	}
}

func TestVersionPredicates(t *testing.T) {
	tests := []struct {
		v              string
		pre, post, loc bool
	}{
		{"1.0", false, false, false},
		{"1.0a1", true, false, false},
		{"1.0.dev1", true, false, false},
		{"1.0.post1.dev1", true, true, false},
		{"1.0.post1", false, true, false},
		{"1.0+local", false, false, true},
	}
	for _, tt := range tests {
		v := MustVersion(tt.v)
		if v.IsPrerelease() != tt.pre || v.IsPostrelease() != tt.post || v.IsLocal() != tt.loc {
			t.Errorf("%s: pre %v post %v local %v, want %v %v %v", tt.v, v.IsPrerelease(), v.IsPostrelease(), v.IsLocal(), tt.pre, tt.post, tt.loc)
		}
	}
}

func TestSpecifierContains(t *testing.T) {
	tests := []struct {
		spec string
		yes  []string
		no   []string
	}{
		// PEP 440's own examples.
		{"~=2.2", []string{"2.2", "2.3", "2.9.post1"}, []string{"3.0", "2.1"}},
		{"~=1.4.5", []string{"1.4.5", "1.4.9"}, []string{"1.5.0", "1.4.4"}},
		{"~=2.2.post3", []string{"2.2.post3", "2.3"}, []string{"2.2", "3.0"}},
		{"~=1.4.5a4", []string{"1.4.5a4", "1.4.5", "1.4.6"}, []string{"1.5.0", "1.4.5a3"}},
		{"~=2.2.0", []string{"2.2.0", "2.2.9"}, []string{"2.3"}},
		{"~=1.4.5.0", []string{"1.4.5.0", "1.4.5.9"}, []string{"1.4.6"}},
		{"==1.1", []string{"1.1", "1.1.0", "1.1+local"}, []string{"1.1.post1", "1.1a1", "1.1.1"}},
		{"==1.1.post1", []string{"1.1.post1"}, []string{"1.1"}},
		{"==1.1.*", []string{"1.1", "1.1.0", "1.1.post1", "1.1.5", "1.1a1"}, []string{"1.2", "1.10"}},
		{"==1.*", []string{"1", "1.9.9"}, []string{"2.0", "0.9"}},
		{"==1.0.0.*", []string{"1", "1.0"}, []string{"1.0.1"}},
		{"!=1.1.*", []string{"1.2", "1.0"}, []string{"1.1.post1", "1.1"}},
		{"!=1.1", []string{"1.1.post1", "1.2"}, []string{"1.1", "1.1.0"}},
		{"==1.0+local", []string{"1.0+local"}, []string{"1.0", "1.0+other"}},
		{">1.7", []string{"1.7.1", "1.8"}, []string{"1.7", "1.7.0.post1", "1.7+local"}},
		{">1.7.post2", []string{"1.7.1", "1.7.0.post3"}, []string{"1.7.0.post2", "1.7.0.post1"}},
		{"<1.7", []string{"1.6", "1.6.9.post1"}, []string{"1.7", "1.7.0rc1", "1.7.dev0"}},
		{"<1.7.0rc1", []string{"1.7.0b1", "1.6"}, []string{"1.7.0rc1"}},
		{"<3.1", []string{"3.0.dev0", "3.0"}, []string{"3.1.dev0"}},
		{">=1.7", []string{"1.7", "1.7.0", "2"}, []string{"1.6.99"}},
		{"<=2.0", []string{"2.0", "2.0+local", "1.0"}, []string{"2.0.post1"}},
		{"===foobar", nil, []string{"1.0"}},
		{"===1.0", []string{"1.0"}, []string{"1.0.0"}},
	}
	for _, tt := range tests {
		sp, err := ParseSpecifier(tt.spec)
		if err != nil {
			t.Fatalf("ParseSpecifier(%q): %v", tt.spec, err)
		}
		for _, v := range tt.yes {
			if !sp.Contains(MustVersion(v)) {
				t.Errorf("%s does not contain %s", tt.spec, v)
			}
		}
		for _, v := range tt.no {
			if sp.Contains(MustVersion(v)) {
				t.Errorf("%s contains %s", tt.spec, v)
			}
		}
	}
}

func TestSpecifierInvalid(t *testing.T) {
	for _, s := range []string{"~=1", "~=1.0.*", ">=1.0.*", "<1.0+local", "=1.0", "1.0", "==", "==1.0a1.*", ">= 1.0 1"} {
		if _, err := ParseSpecifier(s); !errors.Is(err, ErrInvalidVersion) {
			t.Errorf("ParseSpecifier(%q) = %v, want ErrInvalidVersion", s, err)
		}
	}
}

func TestSpecifiersFilterPrereleases(t *testing.T) {
	vs := func(ss ...string) []Version {
		var out []Version
		for _, s := range ss {
			out = append(out, MustVersion(s))
		}
		return out
	}
	str := func(vs []Version) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.String())
		}
		return out
	}
	tests := []struct {
		spec string
		in   []Version
		want []string
	}{
		{">=1.0", vs("2.0b1", "1.5", "1.0"), []string{"1.5", "1.0"}},
		{">=1.0", vs("2.0b1"), []string{"2.0b1"}}, // only pre-releases match: accepted
		{">=2.0b1", vs("2.0b1", "1.5"), []string{"2.0b1"}},
		{"", vs("2.0.dev1", "1.0"), []string{"1.0"}},
		{"==2.0b1", vs("2.0b1", "2.0"), []string{"2.0b1"}},
		{"!=2.0b1", vs("2.0b2", "1.0"), []string{"1.0"}},
	}
	for _, tt := range tests {
		ss, err := ParseSpecifiers(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := str(ss.Filter(tt.in)); !slices.Equal(got, tt.want) {
			t.Errorf("%q.Filter = %v, want %v", tt.spec, got, tt.want)
		}
	}
}

func TestMarkers(t *testing.T) {
	env := target(t).Env
	tests := []struct {
		marker string
		extras []string
		want   bool
	}{
		{`python_version < "3.8"`, nil, false},
		{`python_version >= "3.8"`, nil, true},
		{`python_version >= "3.8" and sys_platform == "linux"`, nil, true},
		{`sys_platform == "win32" or (python_version > "3.10" and implementation_name == "cpython")`, nil, true},
		{`sys_platform == "win32" or platform_system == "Darwin"`, nil, false},
		{`python_full_version >= "3.11.4"`, nil, true},
		{`python_full_version < "3.11.10"`, nil, true},
		{`platform_machine in "x86_64 aarch64"`, nil, true},
		{`"arm" in platform_machine`, nil, false},
		{`platform_machine not in "arm64"`, nil, true},
		{`extra == "socks"`, nil, false},
		{`extra == "socks"`, []string{"socks"}, true},
		{`extra == "Socks_Proxy"`, []string{"socks-proxy"}, true},
		{`python_version < "3.8" and extra == "socks"`, []string{"socks"}, false},
		{`os.name == 'posix'`, nil, true},
		{`python_version ~= "3.10"`, nil, true},
		{`python_version == "3.*"`, nil, true},
		{`platform_release >= "5"`, nil, false}, // not versions: compared as strings
	}
	for _, tt := range tests {
		m, err := ParseMarker(tt.marker)
		if err != nil {
			t.Fatalf("ParseMarker(%q): %v", tt.marker, err)
		}
		got, err := m.Eval(env, tt.extras)
		if err != nil {
			t.Fatalf("Eval(%q): %v", tt.marker, err)
		}
		if got != tt.want {
			t.Errorf("%s with extras %v = %v, want %v", tt.marker, tt.extras, got, tt.want)
		}
	}
	for _, bad := range []string{`python_version <`, `foo == "1"`, `python_version = "3"`, `(python_version > "3"`, `"a" "b"`,
		"((((((((((((((((((python_version > '3'))))))))))))))))))"} {
		if _, err := ParseMarker(bad); !errors.Is(err, ErrInvalidRequirement) {
			t.Errorf("ParseMarker(%q) = %v, want ErrInvalidRequirement", bad, err)
		}
	}
}
