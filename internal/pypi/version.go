package pypi

import (
	"cmp"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Version bounds: a version string comes from the index or a caller.
const (
	maxVersionLen     = 128
	maxReleaseParts   = 20
	maxVersionNumbers = 19 // digits: fits a uint64
)

// Version is a PEP 440 version. The zero value is not a valid version; use
// ParseVersion.
type Version struct {
	Epoch   uint64
	Release []uint64
	pre     string // "", "a", "b" or "rc"
	preN    uint64
	hasPost bool
	post    uint64
	hasDev  bool
	dev     uint64
	local   []string // lower case, separators removed
}

// The PEP 440 appendix's regular expression (as packaging has it).
var versionRE = regexp.MustCompile(`(?i)^v?(?:(?:(?P<epoch>[0-9]+)!)?(?P<release>[0-9]+(?:\.[0-9]+)*)` +
	`(?P<pre>[-_.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>[0-9]+)?)?` +
	`(?P<post>(?:-(?P<post_n1>[0-9]+))|(?:[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?))?` +
	`(?P<dev>[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?)` +
	`(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?$`)

var versionGroup = func() map[string]int {
	m := map[string]int{}
	for i, n := range versionRE.SubexpNames() {
		if n != "" {
			m[n] = i
		}
	}
	return m
}()

// ParseVersion parses a PEP 440 version, accepting the spellings the PEP
// normalizes (1.0-RC1, v2, 1.0.post-1, ...).
func ParseVersion(s string) (Version, error) {
	if len(s) > maxVersionLen {
		return Version{}, fmt.Errorf("%w: version is %d bytes, over the %d-byte limit", ErrInvalidVersion, len(s), maxVersionLen)
	}
	t := strings.TrimSpace(s)
	m := versionRE.FindStringSubmatch(t)
	if m == nil {
		return Version{}, fmt.Errorf("%w: %q is not a PEP 440 version", ErrInvalidVersion, s)
	}
	g := func(name string) string { return m[versionGroup[name]] }
	var v Version
	var err error
	num := func(d string) uint64 {
		if err != nil || d == "" {
			return 0
		}
		d = trimZeros(d)
		if len(d) > maxVersionNumbers {
			err = fmt.Errorf("%w: %q has a number over %d digits", ErrInvalidVersion, s, maxVersionNumbers)
			return 0
		}
		n, perr := strconv.ParseUint(d, 10, 64)
		if perr != nil {
			err = fmt.Errorf("%w: %q: %v", ErrInvalidVersion, s, perr)
			return 0
		}
		return n
	}
	v.Epoch = num(g("epoch"))
	parts := strings.Split(g("release"), ".")
	if len(parts) > maxReleaseParts {
		return Version{}, fmt.Errorf("%w: %q has %d release numbers, over the limit of %d", ErrInvalidVersion, s, len(parts), maxReleaseParts)
	}
	for _, p := range parts {
		v.Release = append(v.Release, num(p))
	}
	if g("pre") != "" {
		switch strings.ToLower(g("pre_l")) {
		case "a", "alpha":
			v.pre = "a"
		case "b", "beta":
			v.pre = "b"
		default: // c, rc, pre, preview
			v.pre = "rc"
		}
		v.preN = num(g("pre_n"))
	}
	if g("post") != "" {
		v.hasPost = true
		v.post = num(g("post_n1") + g("post_n2"))
	}
	if g("dev") != "" {
		v.hasDev = true
		v.dev = num(g("dev_n"))
	}
	if l := g("local"); l != "" {
		for _, p := range strings.FieldsFunc(strings.ToLower(l), func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
			if isDigits(p) {
				p = trimZeros(p)
			}
			v.local = append(v.local, p)
		}
	}
	if err != nil {
		return Version{}, err
	}
	return v, nil
}

// MustVersion is ParseVersion for constants; it panics on a bad version.
func MustVersion(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func trimZeros(d string) string {
	t := strings.TrimLeft(d, "0")
	if t == "" {
		return "0"
	}
	return t
}

// IsValid reports whether v came from ParseVersion.
func (v Version) IsValid() bool { return len(v.Release) > 0 }

// IsPrerelease reports whether v is a pre-release or a development
// release (PEP 440 counts both).
func (v Version) IsPrerelease() bool { return v.pre != "" || v.hasDev }

// IsPostrelease reports whether v has a post-release segment.
func (v Version) IsPostrelease() bool { return v.hasPost }

// IsLocal reports whether v has a local version label.
func (v Version) IsLocal() bool { return len(v.local) > 0 }

// Public is v without its local label.
func (v Version) Public() Version {
	v.local = nil
	return v
}

// Base is v's epoch and release alone.
func (v Version) Base() Version {
	return Version{Epoch: v.Epoch, Release: v.Release}
}

// String is v's normalized form (1.0rc1, 2!1.0.post2.dev3+ubuntu.1).
func (v Version) String() string {
	var b strings.Builder
	if v.Epoch != 0 {
		fmt.Fprintf(&b, "%d!", v.Epoch)
	}
	for i, r := range v.Release {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(strconv.FormatUint(r, 10))
	}
	if v.pre != "" {
		fmt.Fprintf(&b, "%s%d", v.pre, v.preN)
	}
	if v.hasPost {
		fmt.Fprintf(&b, ".post%d", v.post)
	}
	if v.hasDev {
		fmt.Fprintf(&b, ".dev%d", v.dev)
	}
	if len(v.local) > 0 {
		b.WriteByte('+')
		b.WriteString(strings.Join(v.local, "."))
	}
	return b.String()
}

// Compare orders versions as PEP 440 does: -1 when v < w, 0 when equal
// (1.0 == 1.0.0), +1 when v > w. Local labels order after the same public
// version, segment by segment, numbers above letters.
func (v Version) Compare(w Version) int {
	if c := cmpU(v.Epoch, w.Epoch); c != 0 {
		return c
	}
	n := max(len(v.Release), len(w.Release))
	for i := range n {
		if c := cmpU(at(v.Release, i), at(w.Release, i)); c != 0 {
			return c
		}
	}
	if c := cmpInt(v.preRank(), w.preRank()); c != 0 {
		return c
	}
	if v.pre != "" {
		if c := cmpInt(preOrder(v.pre), preOrder(w.pre)); c != 0 {
			return c
		}
		if c := cmpU(v.preN, w.preN); c != 0 {
			return c
		}
	}
	// No post release sorts before any post release.
	if c := cmpBool(v.hasPost, w.hasPost); c != 0 {
		return c
	}
	if c := cmpU(v.post, w.post); c != 0 {
		return c
	}
	// No dev release sorts after any dev release.
	if c := cmpBool(w.hasDev, v.hasDev); c != 0 {
		return c
	}
	if c := cmpU(v.dev, w.dev); c != 0 {
		return c
	}
	return compareLocal(v.local, w.local)
}

// Equal is Compare == 0.
func (v Version) Equal(w Version) bool { return v.Compare(w) == 0 }

// preRank: a dev release of a final (1.0.dev1) sorts before every
// pre-release of it (1.0a1), and a final after them all.
func (v Version) preRank() int {
	switch {
	case v.pre == "" && !v.hasPost && v.hasDev:
		return 0
	case v.pre != "":
		return 1
	default:
		return 2
	}
}

func preOrder(p string) int {
	switch p {
	case "a":
		return 0
	case "b":
		return 1
	}
	return 2
}

func compareLocal(a, b []string) int {
	if len(a) == 0 || len(b) == 0 {
		return cmpInt(len(a), len(b))
	}
	for i := range min(len(a), len(b)) {
		x, y := a[i], b[i]
		xn, yn := isDigits(x), isDigits(y)
		switch {
		case xn && yn:
			if c := cmpInt(len(x), len(y)); c != 0 {
				return c
			}
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
		case xn:
			return 1
		case yn:
			return -1
		default:
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
		}
	}
	return cmpInt(len(a), len(b))
}

func at(r []uint64, i int) uint64 {
	if i < len(r) {
		return r[i]
	}
	return 0
}

func cmpU(a, b uint64) int { return cmp.Compare(a, b) }

func cmpInt(a, b int) int { return cmp.Compare(a, b) }

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
