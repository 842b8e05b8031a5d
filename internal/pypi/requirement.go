package pypi

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Requirement bounds.
const (
	maxRequirementLen = 1000
	maxNameLen        = 100
	maxExtras         = 20
)

// Requirement is a package name with optional extras and version clauses:
// "requests>=2.31,<3", "polars==1.2.0", "httpx[http2]~=0.27".
type Requirement struct {
	Name       string   // normalized (PEP 503)
	Extras     []string // normalized, sorted, unique
	Specifiers Specifiers
	// Marker guards a dependency read from package metadata; it is always
	// nil in what ParseRequirement returns.
	Marker *Marker
}

func (r Requirement) String() string {
	var b strings.Builder
	b.WriteString(r.Name)
	if len(r.Extras) > 0 {
		b.WriteString("[" + strings.Join(r.Extras, ",") + "]")
	}
	b.WriteString(r.Specifiers.String())
	if r.Marker != nil {
		b.WriteString("; " + r.Marker.String())
	}
	return b.String()
}

var (
	nameRE      = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?`)
	separatorRE = regexp.MustCompile(`[-_.]+`)
)

// Normalize is a project name's PEP 503 form: runs of "-", "_" and "."
// become one "-", letters lower case.
func Normalize(name string) string {
	return strings.ToLower(separatorRE.ReplaceAllString(name, "-"))
}

// ValidName reports why name cannot be a project name, or nil.
func ValidName(name string) error {
	if err := plainText(name, "package name"); err != nil {
		return err
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("%w: the package name is %d characters, over the %d-character limit", ErrInvalidRequirement, len(name), maxNameLen)
	}
	if m := nameRE.FindString(name); m != name || name == "" {
		return fmt.Errorf("%w: %q is not a package name (letters, digits, '.', '_' and '-', starting and ending with a letter or digit)", ErrInvalidRequirement, name)
	}
	return nil
}

// plainText refuses text with control characters or non-ASCII, naming the
// first (escaped, so a terminal shows it rather than obeys it).
func plainText(s, what string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: the %s is not valid UTF-8", ErrInvalidRequirement, what)
	}
	for i, r := range s {
		switch {
		case r < 0x20 || r == 0x7f:
			return fmt.Errorf("%w: the %s has a control character (%U at byte %d)", ErrInvalidRequirement, what, r, i)
		case r > 0x7e:
			return fmt.Errorf("%w: the %s has a non-ASCII character (%U at byte %d); package names and versions are ASCII", ErrInvalidRequirement, what, r, i)
		}
	}
	return nil
}

var (
	archiveSuffixes = []string{".whl", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip"}
	vcsPrefixes     = []string{"git+", "hg+", "svn+", "bzr+"}
)

// ParseRequirement parses what a caller asks to install: a name, optional
// extras and optional version clauses ("requests>=2.31,<3",
// "polars==1.2.0", "httpx[http2]"). It refuses, each with a message that
// says what to write instead: direct references (name @ URL), URLs and
// paths, VCS links, pip options, environment markers, control characters
// and non-ASCII text, names over 100 characters, more than 20 version
// clauses or 20 extras, and text over 1,000 bytes.
func ParseRequirement(s string) (Requirement, error) {
	return parseRequirement(s, false)
}

func parseRequirement(s string, allowMarker bool) (Requirement, error) {
	if len(s) > maxRequirementLen {
		return Requirement{}, fmt.Errorf("%w: the requirement is %d bytes, over the %d-byte limit", ErrInvalidRequirement, len(s), maxRequirementLen)
	}
	if err := plainText(s, "requirement"); err != nil {
		return Requirement{}, err
	}
	text := strings.TrimSpace(s)
	if text == "" {
		return Requirement{}, fmt.Errorf("%w: the requirement is empty", ErrInvalidRequirement)
	}
	spec, marker, hasMarker := strings.Cut(text, ";")
	spec = strings.TrimSpace(spec)
	if err := refuseReference(spec); err != nil {
		return Requirement{}, err
	}
	var req Requirement
	if hasMarker {
		if !allowMarker {
			return Requirement{}, fmt.Errorf("%w: %q has an environment marker (after ';'): name only the packages this environment needs, e.g. %q", ErrInvalidRequirement, text, spec)
		}
		m, err := ParseMarker(marker)
		if err != nil {
			return Requirement{}, err
		}
		req.Marker = m
	}
	name := nameRE.FindString(spec)
	if name == "" {
		return Requirement{}, fmt.Errorf("%w: %q does not start with a package name", ErrInvalidRequirement, text)
	}
	if err := ValidName(name); err != nil {
		return Requirement{}, err
	}
	req.Name = Normalize(name)
	rest := strings.TrimLeft(spec[len(name):], " \t")
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return Requirement{}, fmt.Errorf("%w: %q: missing ']' after the extras", ErrInvalidRequirement, text)
		}
		for x := range strings.SplitSeq(rest[1:end], ",") {
			x = strings.TrimSpace(x)
			if x == "" {
				continue
			}
			if m := nameRE.FindString(x); m != x {
				return Requirement{}, fmt.Errorf("%w: %q: %q is not an extra's name", ErrInvalidRequirement, text, x)
			}
			req.Extras = append(req.Extras, Normalize(x))
		}
		slices.Sort(req.Extras)
		req.Extras = slices.Compact(req.Extras)
		if len(req.Extras) > maxExtras {
			return Requirement{}, fmt.Errorf("%w: %q names %d extras, over the limit of %d", ErrInvalidRequirement, text, len(req.Extras), maxExtras)
		}
		rest = strings.TrimLeft(rest[end+1:], " \t")
	}
	if strings.HasPrefix(rest, "@") {
		return Requirement{}, directReference(text)
	}
	if strings.HasPrefix(rest, "(") {
		if !strings.HasSuffix(rest, ")") {
			return Requirement{}, fmt.Errorf("%w: %q: missing ')' after the version clauses", ErrInvalidRequirement, text)
		}
		rest = rest[1 : len(rest)-1]
	}
	if rest != "" && strings.IndexByte("<>=!~", rest[0]) < 0 {
		return Requirement{}, fmt.Errorf("%w: %q: expected version clauses after the name (such as ==1.2.0 or >=2.31,<3), not %q", ErrInvalidRequirement, text, rest)
	}
	if n := strings.Count(rest, ",") + 1; rest != "" && n > maxSpecifiers {
		return Requirement{}, fmt.Errorf("%w: %q has %d version clauses, over the limit of %d", ErrInvalidRequirement, text, n, maxSpecifiers)
	}
	sp, err := ParseSpecifiers(rest)
	if err != nil {
		return Requirement{}, fmt.Errorf("%w: %q: %w", ErrInvalidRequirement, text, err)
	}
	req.Specifiers = sp
	return req, nil
}

// refuseReference refuses what names an artifact rather than a package: a
// URL, a path, a VCS link or a pip option.
func refuseReference(s string) error {
	lower := strings.ToLower(s)
	switch {
	case strings.HasPrefix(s, "-"):
		return fmt.Errorf("%w: %q is a pip option; options are refused: name a package and a version (e.g. requests==2.31.0)", ErrInvalidRequirement, s)
	case nameRE.MatchString(s) && strings.Contains(strings.SplitN(s, "://", 2)[0], "@"):
		name, ver, _ := strings.Cut(s, "@")
		if _, err := ParseVersion(ver); err == nil && ValidName(strings.TrimSpace(name)) == nil {
			return fmt.Errorf("%w: %q is npm's syntax; for Python write %s==%s", ErrInvalidRequirement, s, strings.TrimSpace(name), strings.TrimSpace(ver))
		}
		return directReference(s)
	case strings.Contains(s, "://") || hasAnyPrefix(lower, vcsPrefixes) || strings.HasPrefix(lower, "file:"):
		return fmt.Errorf("%w: %q is a URL, not a requirement: packages come only from the configured index; name the package and a version instead (e.g. requests==2.31.0)", ErrInvalidRequirement, s)
	case strings.ContainsAny(s, `/\`) || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "~") || hasAnySuffix(lower, archiveSuffixes):
		return fmt.Errorf("%w: %q is a file path, not a requirement: packages come only from the configured index; name the package and a version instead (e.g. requests==2.31.0)", ErrInvalidRequirement, s)
	}
	return nil
}

func directReference(s string) error {
	return fmt.Errorf("%w: %q is a direct reference (name @ URL), which is refused: packages come only from the configured index; name a version instead (e.g. name==1.2.0)", ErrInvalidRequirement, s)
}

func hasAnyPrefix(s string, ps []string) bool {
	for _, p := range ps {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func hasAnySuffix(s string, ps []string) bool {
	for _, p := range ps {
		if strings.HasSuffix(s, p) {
			return true
		}
	}
	return false
}
