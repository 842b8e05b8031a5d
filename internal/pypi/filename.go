package pypi

import (
	"fmt"
	"regexp"
	"strings"
)

// Filename bounds: a name comes from the index.
const (
	maxFilenameLen = 255
	maxTagSet      = 32   // parts of one compressed tag set (cp310.cp311)
	maxWheelTags   = 1024 // tags one wheel expands to
)

// Wheel is a parsed wheel filename (PEP 427):
// {name}-{version}(-{build})?-{python}-{abi}-{platform}.whl, whose tag
// parts may be compressed sets ("py2.py3").
type Wheel struct {
	Name    string // normalized
	Version Version
	Build   string
	Tags    []Tag // the expanded set
}

var (
	filenameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+!-]*$`)
	wheelNameRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?$`)
	buildRE     = regexp.MustCompile(`^[0-9][A-Za-z0-9_.]*$`)
	tagPartRE   = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
)

// ParseWheelFilename parses a wheel's filename.
func ParseWheelFilename(fn string) (Wheel, error) {
	bad := func(why string) (Wheel, error) {
		return Wheel{}, fmt.Errorf("%w: %q is not a wheel filename: %s", ErrRefusedFile, fn, why)
	}
	if len(fn) > maxFilenameLen {
		return bad(fmt.Sprintf("over %d bytes", maxFilenameLen))
	}
	if !filenameRE.MatchString(fn) {
		return bad("unexpected characters")
	}
	stem, ok := strings.CutSuffix(fn, ".whl")
	if !ok {
		return bad("no .whl suffix")
	}
	parts := strings.Split(stem, "-")
	if len(parts) != 5 && len(parts) != 6 {
		return bad("expected name-version(-build)-python-abi-platform")
	}
	if !wheelNameRE.MatchString(parts[0]) {
		return bad("bad project name")
	}
	v, err := ParseVersion(parts[1])
	if err != nil {
		return bad("bad version")
	}
	w := Wheel{Name: Normalize(parts[0]), Version: v}
	if len(parts) == 6 {
		if !buildRE.MatchString(parts[2]) {
			return bad("a build tag starts with a digit")
		}
		w.Build = parts[2]
	}
	py, abi, plat := parts[len(parts)-3], parts[len(parts)-2], parts[len(parts)-1]
	sets := [3][]string{}
	for i, p := range []string{py, abi, plat} {
		s := strings.Split(p, ".")
		if len(s) > maxTagSet {
			return bad(fmt.Sprintf("a tag set of over %d parts", maxTagSet))
		}
		for _, t := range s {
			if !tagPartRE.MatchString(t) {
				return bad("bad tag")
			}
		}
		sets[i] = s
	}
	if len(sets[0])*len(sets[1])*len(sets[2]) > maxWheelTags {
		return bad(fmt.Sprintf("over %d tags", maxWheelTags))
	}
	for _, a := range sets[0] {
		for _, b := range sets[1] {
			for _, c := range sets[2] {
				// Tags compare in lower case, as packaging's do.
				w.Tags = append(w.Tags, Tag{strings.ToLower(a), strings.ToLower(b), strings.ToLower(c)})
			}
		}
	}
	return w, nil
}

// Compatible reports whether the wheel supports one of tags.
func (w Wheel) Compatible(tags []Tag) bool {
	t := Target{Tags: tags}
	return t.Rank(w) >= 0
}

// Kind is what a file on the index is.
type Kind int

const (
	KindOther Kind = iota // neither a wheel nor an sdist (egg, exe, ...)
	KindWheel
	KindSdist
)

func (k Kind) String() string {
	switch k {
	case KindWheel:
		return "wheel"
	case KindSdist:
		return "sdist"
	}
	return "other"
}

var sdistSuffixes = []string{".tar.gz", ".zip", ".tar.bz2", ".tgz", ".tar.xz", ".tar"}

// parseSdistFilename splits {name}-{version}.{ext} at the last "-", as
// packaging does.
func parseSdistFilename(fn string) (name string, v Version, err error) {
	stem := ""
	for _, s := range sdistSuffixes {
		if t, ok := strings.CutSuffix(fn, s); ok {
			stem = t
			break
		}
	}
	i := strings.LastIndexByte(stem, '-')
	if stem == "" || i <= 0 {
		return "", Version{}, fmt.Errorf("%w: %q is not an sdist filename (name-version.tar.gz)", ErrRefusedFile, fn)
	}
	v, err = ParseVersion(stem[i+1:])
	if err != nil {
		return "", Version{}, fmt.Errorf("%w: %q is not an sdist filename: %w", ErrRefusedFile, fn, err)
	}
	return Normalize(stem[:i]), v, nil
}

func isSdistName(fn string) bool { return hasAnySuffix(strings.ToLower(fn), sdistSuffixes) }
