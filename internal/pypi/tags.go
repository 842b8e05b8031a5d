package pypi

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Tag is one wheel compatibility tag (PEP 425): interpreter, ABI and
// platform, such as cp311-cp311-manylinux_2_17_x86_64.
type Tag struct {
	Interpreter, ABI, Platform string
}

func (t Tag) String() string { return t.Interpreter + "-" + t.ABI + "-" + t.Platform }

// manylinuxArches are the architectures manylinux wheels are built for,
// with the oldest glibc minor (of 2.x) each has tags for.
var manylinuxArches = map[string]int{
	"x86_64": 5, "i686": 5,
	"aarch64": 17, "armv7l": 17, "ppc64": 17, "ppc64le": 17, "s390x": 17, "riscv64": 17,
}

// legacyManylinux are the PEP 513/571/599 names of glibc versions.
var legacyManylinux = map[int]string{17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}

// TagsFor lists the tags a CPython pyMajor.pyMinor on glibc
// glibcMajor.glibcMinor Linux on arch supports, most preferred first, in
// packaging.tags' order: the interpreter's own ABI, abi3, none on each
// platform (manylinux newest glibc first, then linux_<arch>); abi3 of older
// minors; pure-Python tags for the platforms; then cpXY-none-any and
// pyXY-none-any. An unknown arch or a glibc other than 2.x yields only the
// linux_<arch> platform.
func TagsFor(pyMajor, pyMinor, glibcMajor, glibcMinor int, arch string) []Tag {
	var platforms []string
	if oldest, ok := manylinuxArches[arch]; ok && glibcMajor == 2 {
		for m := glibcMinor; m >= oldest; m-- {
			platforms = append(platforms, fmt.Sprintf("manylinux_2_%d_%s", m, arch))
			if legacy, ok := legacyManylinux[m]; ok {
				platforms = append(platforms, legacy+"_"+arch)
			}
		}
	}
	platforms = append(platforms, "linux_"+arch)

	cp := fmt.Sprintf("cp%d%d", pyMajor, pyMinor)
	var tags []Tag
	each := func(interp, abi string) {
		for _, p := range platforms {
			tags = append(tags, Tag{interp, abi, p})
		}
	}
	each(cp, cp)
	abi3 := pyMajor == 3 && pyMinor >= 2
	if abi3 {
		each(cp, "abi3")
	}
	each(cp, "none")
	if abi3 {
		for m := pyMinor - 1; m >= 2; m-- {
			each(fmt.Sprintf("cp%d%d", pyMajor, m), "abi3")
		}
	}
	py := pyRange(pyMajor, pyMinor)
	for _, p := range py {
		each(p, "none")
	}
	tags = append(tags, Tag{cp, "none", "any"})
	for _, p := range py {
		tags = append(tags, Tag{p, "none", "any"})
	}
	return tags
}

// pyRange: py311, py3, py310, ..., py30.
func pyRange(major, minor int) []string {
	out := []string{fmt.Sprintf("py%d%d", major, minor), fmt.Sprintf("py%d", major)}
	for m := minor - 1; m >= 0; m-- {
		out = append(out, fmt.Sprintf("py%d%d", major, m))
	}
	return out
}

// Target is the environment wheels are chosen for: the interpreter's
// version, the tags it supports (most preferred first) and the values of
// marker variables.
type Target struct {
	Python Version // the full interpreter version, e.g. 3.11.9
	Tags   []Tag
	Env    Env
	Name   string // for messages, e.g. "CPython 3.11 manylinux_2_35_x86_64"
}

// LinuxTarget is CPython python ("3.11" or "3.11.9"; "3.11" counts as
// 3.11.0 where a marker or Requires-Python names a micro version) on glibc
// glibc ("2.35") Linux on arch ("x86_64", "aarch64", ...).
func LinuxTarget(python, glibc, arch string) (Target, error) {
	pv, err := ParseVersion(python)
	if err != nil || len(pv.Release) < 2 || len(pv.Release) > 3 || pv.Epoch != 0 || pv.IsLocal() || pv.IsPostrelease() || pv.Release[0] > 9 || pv.Release[1] > 99 {
		return Target{}, fmt.Errorf("%w: %q is not a Python version such as 3.11 or 3.11.9", ErrInvalidVersion, python)
	}
	gmaj, gmin, ok := strings.Cut(glibc, ".")
	ga, err1 := strconv.Atoi(gmaj)
	gb, err2 := strconv.Atoi(gmin)
	if !ok || err1 != nil || err2 != nil || ga != 2 || gb < 0 || gb > 999 {
		return Target{}, fmt.Errorf("%w: %q is not a glibc version such as 2.35", ErrInvalidVersion, glibc)
	}
	if _, ok := manylinuxArches[arch]; !ok {
		return Target{}, fmt.Errorf("%w: %q is not an architecture manylinux wheels exist for (x86_64, aarch64, ...)", ErrInvalidVersion, arch)
	}
	major, minor := int(pv.Release[0]), int(pv.Release[1])
	full := fmt.Sprintf("%d.%d.%d", major, minor, at(pv.Release, 2))
	t := Target{
		Python: MustVersion(full),
		Tags:   TagsFor(major, minor, ga, gb, arch),
		Name:   fmt.Sprintf("CPython %d.%d manylinux_%d_%d_%s", major, minor, ga, gb, arch),
		Env: Env{
			"python_version":                 fmt.Sprintf("%d.%d", major, minor),
			"python_full_version":            full,
			"implementation_version":         full,
			"os_name":                        "posix",
			"sys_platform":                   "linux",
			"platform_system":                "Linux",
			"platform_machine":               arch,
			"platform_python_implementation": "CPython",
			"implementation_name":            "cpython",
			"platform_release":               "",
			"platform_version":               "",
		},
	}
	return t, nil
}

// Rank is the position in t.Tags of the best tag w supports (lower is
// better), or -1 when w fits none.
func (t *Target) Rank(w Wheel) int {
	for i, tag := range t.Tags {
		if slices.Contains(w.Tags, tag) {
			return i
		}
	}
	return -1
}

func (t *Target) String() string {
	if t.Name != "" {
		return t.Name
	}
	return "Python " + t.Python.String()
}
