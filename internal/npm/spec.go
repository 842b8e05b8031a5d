package npm

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/Masterminds/semver/v3"
)

// Spec bounds.
const (
	MaxSpecLen    = 1000 // bytes of one spec
	MaxNameLen    = 214  // bytes of a package name, scope included (npm's own limit)
	maxRangeSets  = 32   // "||"-separated sets in one range
	maxVersionLen = 256  // bytes of one version in a packument
)

// Spec is one package a caller asks for: name@range.
type Spec struct {
	Name  string // "left-pad", "@scope/name"
	Range Range
	Raw   string // as written
}

func (s Spec) String() string { return s.Name + "@" + s.Range.String() }

// Range is an npm version range ("^1.2", "1.2.3 - 2", ">=1 <3 || 4.x",
// "*"), or the dist-tag "latest". Prerelease versions match only when a
// comparator of the same set names a prerelease of the same
// major.minor.patch, as npm has it.
type Range struct {
	raw  string
	tag  string // "latest", or ""
	sets []rangeSet
}

type rangeSet struct {
	c   *semver.Constraints
	pre map[[3]uint64]bool // major.minor.patch of prereleases it names
}

// Tag is the dist-tag the range names ("latest"), or "".
func (r Range) Tag() string { return r.tag }

func (r Range) String() string {
	if r.raw == "" {
		return "*"
	}
	return r.raw
}

// Contains reports whether v satisfies the range. The dist-tag "latest" is
// satisfied only by the version the tag names, which the caller checks; here
// it admits any release.
func (r Range) Contains(v *semver.Version) bool {
	if r.tag != "" {
		return v.Prerelease() == ""
	}
	for _, s := range r.sets {
		if !s.c.Check(v) {
			continue
		}
		if v.Prerelease() != "" && !s.pre[[3]uint64{v.Major(), v.Minor(), v.Patch()}] {
			continue
		}
		return true
	}
	return false
}

var (
	// preRE finds the versions with a prerelease a comparator set names.
	preRE = regexp.MustCompile(`(\d+)\.(\d+)\.(\d+)-[0-9A-Za-z.-]+`)
	// rangeCharsRE is what npm ranges are made of.
	rangeCharsRE = regexp.MustCompile(`^[0-9A-Za-z.+\-^~<>=*| ]*$`)
	tagRE        = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]*$`)
)

// ParseRange parses an npm range ("" is "*") or the dist-tag "latest".
func ParseRange(s string) (Range, error) {
	r := Range{raw: s}
	if s == "latest" {
		r.tag = s
		return r, nil
	}
	if len(s) > MaxSpecLen {
		return r, fmt.Errorf("%w: the range is %d bytes, over the %d-byte limit", ErrInvalidSpec, len(s), MaxSpecLen)
	}
	if !rangeCharsRE.MatchString(s) {
		if strings.ContainsRune(s, ',') {
			return r, fmt.Errorf("%w: range %.100q: npm separates comparators with spaces, not commas (write \">=1.2.0 <2.0.0\")", ErrInvalidSpec, s)
		}
		return r, fmt.Errorf("%w: range %.100q has characters no npm range has; write a version (1.3.0) or a range (^1.3.0, ~2.0.1, >=1 <3, 1.x)", ErrInvalidSpec, s)
	}
	if strings.TrimSpace(s) == "" {
		s = "*"
	}
	parts := strings.Split(s, "||")
	if len(parts) > maxRangeSets {
		return r, fmt.Errorf("%w: range %.100q has %d alternatives, over the limit of %d", ErrInvalidSpec, s, len(parts), maxRangeSets)
	}
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			p = "*" // npm: "1.x || " admits anything
		}
		c, err := semver.NewConstraint(p)
		if err != nil {
			if tagRE.MatchString(s) {
				return r, fmt.Errorf("%w: %q is a dist-tag; only \"latest\" is accepted: name a version (1.3.0) or a range (^1.3.0) instead", ErrInvalidSpec, s)
			}
			return r, fmt.Errorf("%w: range %.100q does not parse (%v); write a version (1.3.0) or a range (^1.3.0, ~2.0.1, >=1 <3, 1.x)", ErrInvalidSpec, s, err)
		}
		set := rangeSet{c: c, pre: map[[3]uint64]bool{}}
		for _, m := range preRE.FindAllStringSubmatch(p, -1) {
			var t [3]uint64
			for i := range t {
				fmt.Sscan(m[i+1], &t[i])
			}
			set.pre[t] = true
		}
		r.sets = append(r.sets, set)
	}
	return r, nil
}

// ParseVersion parses a version as a registry publishes it: strict
// semver 2.0 (npm cleans versions when they are published).
func ParseVersion(s string) (*semver.Version, error) {
	if len(s) > maxVersionLen {
		return nil, fmt.Errorf("%w: a version over %d bytes", ErrInvalidSpec, maxVersionLen)
	}
	v, err := semver.StrictNewVersion(s)
	if err != nil {
		return nil, fmt.Errorf("%w: version %q: %v", ErrInvalidSpec, s, err)
	}
	return v, nil
}

// ParseSpec parses "name", "name@1.3.0", "name@^1.2", "@scope/name@~2.0.1",
// "name@>=1 <3 || 4.x", "name@1.2 - 2", "name@1.x", "name@latest". It
// refuses, saying what to write instead: URLs, git and hosted-git
// shorthands (git+…, github:, user/repo), file: and paths, tarballs, npm:
// aliases, dist-tags other than latest, control characters, non-ASCII
// text, tabs and surrounding spaces, and names npm would not publish.
func ParseSpec(s string) (Spec, error) {
	spec := Spec{Raw: s}
	if len(s) > MaxSpecLen {
		return spec, fmt.Errorf("%w: the spec is %d bytes, over the %d-byte limit", ErrInvalidSpec, len(s), MaxSpecLen)
	}
	if err := plainText(s); err != nil {
		return spec, fmt.Errorf("%w: %q: %v; write name@version, such as left-pad@1.3.0", ErrInvalidSpec, s, err)
	}
	if s == "" {
		return spec, fmt.Errorf("%w: an empty spec; write name@version, such as left-pad@1.3.0", ErrInvalidSpec)
	}
	if strings.TrimSpace(s) != s {
		return spec, fmt.Errorf("%w: %q has spaces around it; write name@version without them", ErrInvalidSpec, s)
	}
	if why := notRegistry(s); why != "" {
		return spec, fmt.Errorf("%w: %q is %s; only packages from the registry can be installed: write name@version, such as left-pad@1.3.0", ErrInvalidSpec, s, why)
	}
	name, rng := s, ""
	at := strings.IndexByte(s[min(1, len(s)):], '@') // a scope's @ is not a separator
	if at >= 0 {
		at++
		name, rng = s[:at], s[at+1:]
		if rng == "" {
			return spec, fmt.Errorf("%w: %q ends with @; write %s or %s@1.2.3", ErrInvalidSpec, s, name, name)
		}
	}
	if strings.Contains(name, "/") && !strings.HasPrefix(name, "@") {
		return spec, fmt.Errorf("%w: %q looks like a GitHub user/repo; only packages from the registry can be installed: write the package's npm name and version", ErrInvalidSpec, s)
	}
	if err := ValidName(name); err != nil {
		return spec, err
	}
	if why := notRegistry(rng); why != "" {
		return spec, fmt.Errorf("%w: %q: the version is %s; write a version or range from the registry, such as %s@1.2.3", ErrInvalidSpec, s, why, name)
	}
	r, err := ParseRange(rng)
	if err != nil {
		return spec, fmt.Errorf("%s: %w", name, err)
	}
	spec.Name, spec.Range = name, r
	return spec, nil
}

// notRegistry says what kind of non-registry reference s is, or "".
func notRegistry(s string) string {
	l := strings.ToLower(s)
	switch {
	case strings.Contains(l, "://"):
		return "a URL"
	case strings.HasPrefix(l, "git+") || strings.HasPrefix(l, "git:") || strings.HasPrefix(l, "git@"):
		return "a git repository"
	case hasAnyPrefix(l, "github:", "gitlab:", "bitbucket:", "gist:"):
		return "a hosted git repository"
	case hasAnyPrefix(l, "file:", "link:", "workspace:", "portal:", "patch:"):
		return "a local path"
	case hasAnyPrefix(l, "/", "./", "../", "~/", ".\\") || l == "." || l == "..":
		return "a local path"
	case strings.HasPrefix(l, "npm:") || strings.Contains(l, "@npm:"):
		return "an npm: alias (install the real name instead)"
	case strings.HasSuffix(l, ".tgz") || strings.HasSuffix(l, ".tar.gz") || strings.HasSuffix(l, ".tar"):
		return "a tarball"
	case strings.Contains(l, "\\"):
		return "a path"
	}
	return ""
}

func hasAnyPrefix(s string, ps ...string) bool {
	for _, p := range ps {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// plainText refuses what is not printable ASCII (with single spaces).
func plainText(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("not UTF-8")
	}
	for _, r := range s {
		switch {
		case r < 0x20 || r == 0x7f:
			return fmt.Errorf("a control character (%U)", r)
		case r > 0x7e:
			return fmt.Errorf("a non-ASCII character (%U); npm names and versions are ASCII", r)
		}
	}
	return nil
}

var (
	// namePartRE is a URL-safe lower-case name (or scope) part, as
	// validate-npm-package-name accepts for new packages.
	namePartRE = regexp.MustCompile(`^[a-z0-9-][a-z0-9._-]*$`)
	// oldNamePartRE also admits what old packages may have: capitals and
	// ~'!()*, which encodeURIComponent leaves alone.
	oldNamePartRE = regexp.MustCompile(`^[A-Za-z0-9~'!()*-][A-Za-z0-9._~'!()*-]*$`)
)

// ValidName refuses a name npm would not publish today: empty or over 214
// bytes, capitals, a leading "." or "_", anything not URL-safe,
// node_modules and favicon.ico. A scoped name is @scope/name with both
// parts so.
func ValidName(name string) error { return checkName(name, namePartRE) }

// ValidDepName is ValidName for the names dependencies give: packages
// published before npm's current rules (JSONStream) may have capitals and
// ~'!()*, which are still safe in a URL and a path.
func ValidDepName(name string) error { return checkName(name, oldNamePartRE) }

func checkName(name string, part *regexp.Regexp) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: package name %.100q %s; npm names are lower case letters, digits and - . _ (optionally @scope/name), at most %d bytes", ErrInvalidSpec, name, why, MaxNameLen)
	}
	if name == "" {
		return bad("is empty")
	}
	if len(name) > MaxNameLen {
		return bad(fmt.Sprintf("is %d bytes", len(name)))
	}
	if err := plainText(name); err != nil {
		return bad(fmt.Sprintf("has %v", err))
	}
	parts := []string{name}
	if strings.HasPrefix(name, "@") {
		scope, rest, ok := strings.Cut(name[1:], "/")
		if !ok {
			return bad("has a scope but no name after a /")
		}
		parts = []string{scope, rest}
	}
	for _, p := range parts {
		switch {
		case p == "":
			return bad("has an empty part")
		case p[0] == '.' || p[0] == '_':
			return bad("starts with . or _")
		case !part.MatchString(p):
			if strings.ToLower(p) != p && part == namePartRE {
				return bad("has capital letters")
			}
			return bad("has characters that are not URL-safe")
		}
	}
	if l := strings.ToLower(name); l == "node_modules" || l == "favicon.ico" {
		return bad("is reserved")
	}
	return nil
}
