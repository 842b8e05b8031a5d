package pypi

import (
	"errors"
	"slices"
	"testing"
)

func TestTagsFor(t *testing.T) {
	tags := TagsFor(3, 11, 2, 17, "x86_64")
	strs := make([]string, len(tags))
	for i, tg := range tags {
		strs[i] = tg.String()
	}
	// packaging.tags.sys_tags() on CPython 3.11, glibc 2.17, x86_64.
	head := []string{
		"cp311-cp311-manylinux_2_17_x86_64",
		"cp311-cp311-manylinux2014_x86_64",
		"cp311-cp311-manylinux_2_16_x86_64",
	}
	if !slices.Equal(strs[:3], head) {
		t.Errorf("first tags %v, want %v", strs[:3], head)
	}
	if got := strs[len(strs)-1]; got != "py30-none-any" {
		t.Errorf("last tag %s, want py30-none-any", got)
	}
	// 13 manylinux_2_x (17..5), 3 legacy aliases, linux_x86_64: 17
	// platforms; cp311 x {cp311, abi3, none}, cp310..cp32 abi3, 13 py
	// versions on each platform; then cp311-none-any and 13 py any.
	if want := 17*(3+9+13) + 1 + 13; len(tags) != want {
		t.Errorf("%d tags, want %d", len(tags), want)
	}
	order := []string{
		"cp311-cp311-linux_x86_64",
		"cp311-abi3-manylinux_2_17_x86_64",
		"cp311-none-manylinux_2_17_x86_64",
		"cp310-abi3-manylinux_2_17_x86_64",
		"cp32-abi3-linux_x86_64",
		"py311-none-manylinux_2_17_x86_64",
		"py3-none-manylinux1_x86_64",
		"cp311-none-any",
		"py311-none-any",
		"py3-none-any",
		"py310-none-any",
	}
	last := -1
	for _, s := range order {
		i := slices.Index(strs, s)
		if i <= last {
			t.Errorf("%s at %d, want after %d", s, i, last)
		}
		last = i
	}
	for _, absent := range []string{"cp311-cp311-manylinux_2_18_x86_64", "cp311-cp311-manylinux_2_17_aarch64", "cp312-abi3-linux_x86_64", "cp311-cp311-musllinux_1_1_x86_64"} {
		if slices.Contains(strs, absent) {
			t.Errorf("%s listed", absent)
		}
	}
	if arm := TagsFor(3, 12, 2, 28, "aarch64"); arm[len(arm)-1].String() != "py30-none-any" || slices.ContainsFunc(arm, func(tg Tag) bool { return tg.Platform == "manylinux_2_16_aarch64" }) {
		t.Errorf("aarch64 goes below glibc 2.17")
	}
}

func TestParseWheelFilename(t *testing.T) {
	tests := []struct {
		fn      string
		name    string
		version string
		build   string
		tags    int
	}{
		{"requests-2.31.0-py3-none-any.whl", "requests", "2.31.0", "", 1},
		{"numpy-1.26.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "numpy", "1.26.0", "", 2},
		{"six-1.16.0-py2.py3-none-any.whl", "six", "1.16.0", "", 2},
		{"Foo_Bar-1.0-1-py2.py3-none-any.whl", "foo-bar", "1.0", "1", 2},
		{"zope.interface-6.0-cp311-cp311-win_amd64.whl", "zope-interface", "6.0", "", 1},
	}
	for _, tt := range tests {
		w, err := ParseWheelFilename(tt.fn)
		if err != nil {
			t.Fatalf("%s: %v", tt.fn, err)
		}
		if w.Name != tt.name || w.Version.String() != tt.version || w.Build != tt.build || len(w.Tags) != tt.tags {
			t.Errorf("%s: got %s %s %q %d tags", tt.fn, w.Name, w.Version, w.Build, len(w.Tags))
		}
	}
	for _, bad := range []string{"foo-1.0.whl", "foo-1.0-py3-none-any.zip", "foo-bar-1.0-py3-none-any-x.whl", "foo-1.0-x1-py3-none-any.whl",
		"../foo-1.0-py3-none-any.whl", "foo-one-py3-none-any.whl", "foo-1.0-py3-none-any.whl\n"} {
		if _, err := ParseWheelFilename(bad); !errors.Is(err, ErrRefusedFile) {
			t.Errorf("ParseWheelFilename(%q) = %v, want ErrRefusedFile", bad, err)
		}
	}
}

func TestWheelCompatible(t *testing.T) {
	tags := target(t).Tags
	tests := []struct {
		fn   string
		want bool
	}{
		{"x-1.0-py3-none-any.whl", true},
		{"x-1.0-py2.py3-none-any.whl", true},
		{"x-1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", true},
		{"x-1.0-cp38-abi3-manylinux_2_28_x86_64.whl", true},
		{"x-1.0-cp311-cp311-manylinux_2_36_x86_64.whl", false}, // newer glibc than the target's 2.35
		{"x-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", false},
		{"x-1.0-cp311-cp311-win_amd64.whl", false},
		{"x-1.0-cp311-cp311-macosx_11_0_arm64.whl", false},
		{"x-1.0-cp311-cp311-manylinux_2_17_aarch64.whl", false},
		{"x-1.0-py2-none-any.whl", false},
	}
	for _, tt := range tests {
		w, err := ParseWheelFilename(tt.fn)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.Compatible(tags); got != tt.want {
			t.Errorf("%s compatible: %v, want %v", tt.fn, got, tt.want)
		}
	}
	tg := target(t)
	native := mustWheel(t, "x-1.0-cp311-cp311-manylinux_2_17_x86_64.whl")
	pure := mustWheel(t, "x-1.0-py3-none-any.whl")
	if tg.Rank(native) >= tg.Rank(pure) {
		t.Errorf("a native wheel ranks %d, not before a pure one (%d)", tg.Rank(native), tg.Rank(pure))
	}
}

func mustWheel(t *testing.T, fn string) Wheel {
	t.Helper()
	w, err := ParseWheelFilename(fn)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestLinuxTargetRefuses(t *testing.T) {
	for _, tt := range [][3]string{{"3", "2.35", "x86_64"}, {"python3", "2.35", "x86_64"}, {"3.11", "2", "x86_64"}, {"3.11", "2.35", "sparc"}, {"3.11", "1.9", "x86_64"}} {
		if _, err := LinuxTarget(tt[0], tt[1], tt[2]); err == nil {
			t.Errorf("LinuxTarget%v accepted", tt)
		}
	}
}
