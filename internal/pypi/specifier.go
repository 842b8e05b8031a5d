package pypi

import (
	"fmt"
	"regexp"
	"strings"
)

// maxSpecifiers bounds the comma-separated clauses of one specifier set.
const maxSpecifiers = 20

// Specifier is one PEP 440 version clause: an operator and a version.
type Specifier struct {
	Op       string  // ==, !=, <, <=, >, >=, ~= or ===
	Version  Version // parsed version (zero for ===)
	Text     string  // the version as written, without ".*"
	Wildcard bool    // ==X.Y.* or !=X.Y.*
}

// Specifiers is a set of clauses that must all hold (a comma-separated
// list). The empty set matches every version.
type Specifiers []Specifier

var (
	specOpRE = regexp.MustCompile(`^\s*(~=|===|==|!=|<=|>=|<|>)\s*(\S.*?)\s*$`)
	// ==, != with a wildcard: epoch and release only.
	wildcardRE = regexp.MustCompile(`(?i)^v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*\.\*$`)
)

// ParseSpecifier parses one clause, such as ">=2.31" or "==1.2.*".
func ParseSpecifier(s string) (Specifier, error) {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 && s[i] != '\t' || s[i] >= 0x7f {
			return Specifier{}, fmt.Errorf("%w: a version specifier has a control or non-ASCII byte (%#x)", ErrInvalidVersion, s[i])
		}
	}
	m := specOpRE.FindStringSubmatch(s)
	if m == nil {
		return Specifier{}, fmt.Errorf("%w: %q is not a version specifier (an operator ==, !=, <, <=, >, >=, ~= or === and a version)", ErrInvalidVersion, strings.TrimSpace(s))
	}
	sp := Specifier{Op: m[1], Text: m[2]}
	if sp.Op == "===" {
		if strings.ContainsAny(sp.Text, " \t,;") || len(sp.Text) > maxVersionLen {
			return Specifier{}, fmt.Errorf("%w: %q is not an arbitrary-equality version", ErrInvalidVersion, sp.Text)
		}
		return sp, nil
	}
	if strings.HasSuffix(sp.Text, ".*") {
		if sp.Op != "==" && sp.Op != "!=" {
			return Specifier{}, fmt.Errorf("%w: %s%s: a .* wildcard works only with == and !=", ErrInvalidVersion, sp.Op, sp.Text)
		}
		if !wildcardRE.MatchString(sp.Text) {
			return Specifier{}, fmt.Errorf("%w: %s%s: a .* wildcard follows release numbers only", ErrInvalidVersion, sp.Op, sp.Text)
		}
		sp.Wildcard = true
		sp.Text = strings.TrimSuffix(sp.Text, ".*")
	}
	v, err := ParseVersion(sp.Text)
	if err != nil {
		return Specifier{}, err
	}
	sp.Version = v
	if v.IsLocal() && sp.Op != "==" && sp.Op != "!=" {
		return Specifier{}, fmt.Errorf("%w: %s%s: a local version label works only with == and !=", ErrInvalidVersion, sp.Op, sp.Text)
	}
	if sp.Op == "~=" && len(v.Release) < 2 {
		return Specifier{}, fmt.Errorf("%w: ~=%s: a compatible-release clause needs at least two release numbers (~=1.4, not ~=1)", ErrInvalidVersion, sp.Text)
	}
	return sp, nil
}

// ParseSpecifiers parses a comma-separated set of clauses; "" is the empty
// set.
func ParseSpecifiers(s string) (Specifiers, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > maxSpecifiers {
		return nil, fmt.Errorf("%w: %d version clauses, over the limit of %d", ErrInvalidVersion, len(parts), maxSpecifiers)
	}
	var out Specifiers
	for _, p := range parts {
		sp, err := ParseSpecifier(p)
		if err != nil {
			return nil, err
		}
		out = append(out, sp)
	}
	return out, nil
}

func (s Specifier) String() string {
	if s.Wildcard {
		return s.Op + s.Text + ".*"
	}
	return s.Op + s.Text
}

func (ss Specifiers) String() string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = s.String()
	}
	return strings.Join(parts, ",")
}

// Contains reports whether v satisfies the clause, pre-release policy
// aside (see Specifiers.Allows).
func (s Specifier) Contains(v Version) bool {
	switch s.Op {
	case "===":
		return strings.EqualFold(v.String(), s.Text)
	case "==":
		return s.equal(v)
	case "!=":
		return !s.equal(v)
	case "~=":
		if v.Public().Compare(s.Version) < 0 {
			return false
		}
		return prefixMatch(v, s.Version.Epoch, s.Version.Release[:len(s.Version.Release)-1])
	case "<=":
		return v.Public().Compare(s.Version) <= 0
	case ">=":
		return v.Public().Compare(s.Version) >= 0
	case "<":
		if v.Compare(s.Version) >= 0 {
			return false
		}
		// <3.1 does not admit 3.1's own pre-releases (3.1a1), unless it
		// names a pre-release itself.
		return s.Version.IsPrerelease() || !v.IsPrerelease() || !v.Base().Equal(s.Version.Base())
	case ">":
		if v.Compare(s.Version) <= 0 {
			return false
		}
		// >3.1 does not admit 3.1's post-releases or local versions.
		if !s.Version.IsPostrelease() && v.IsPostrelease() && v.Base().Equal(s.Version.Base()) {
			return false
		}
		return !v.IsLocal() || !v.Base().Equal(s.Version.Base())
	}
	return false
}

func (s Specifier) equal(v Version) bool {
	if s.Wildcard {
		return prefixMatch(v, s.Version.Epoch, s.Version.Release)
	}
	if !s.Version.IsLocal() {
		v = v.Public()
	}
	return v.Compare(s.Version) == 0
}

// prefixMatch: v's epoch is epoch and its release, padded with zeros,
// starts with release (==1.2.* holds for 1.2, 1.2.0, 1.2.5.post1, 1.2rc1).
func prefixMatch(v Version, epoch uint64, release []uint64) bool {
	if v.Epoch != epoch {
		return false
	}
	for i, r := range release {
		if at(v.Release, i) != r {
			return false
		}
	}
	return true
}

// NamesPrerelease reports whether the clause names a pre-release, which
// lets the set admit pre-releases (PEP 440: ">=1.0a1" asks for them).
func (s Specifier) NamesPrerelease() bool {
	switch s.Op {
	case "==", ">=", "<=", "~=", "<", ">":
		return s.Version.IsPrerelease()
	case "===":
		v, err := ParseVersion(s.Text)
		return err == nil && v.IsPrerelease()
	}
	return false
}

// Contains reports whether v satisfies every clause, pre-release policy
// aside.
func (ss Specifiers) Contains(v Version) bool {
	for _, s := range ss {
		if !s.Contains(v) {
			return false
		}
	}
	return true
}

// AllowsPrereleases reports whether some clause names a pre-release.
func (ss Specifiers) AllowsPrereleases() bool {
	for _, s := range ss {
		if s.NamesPrerelease() {
			return true
		}
	}
	return false
}

// Filter returns the versions the set admits under PEP 440's pre-release
// rule: pre-releases only when a clause names one, or when no final
// release satisfies the set at all. The order of vs is kept.
func (ss Specifiers) Filter(vs []Version) []Version {
	var final, pre []Version
	for _, v := range vs {
		if !ss.Contains(v) {
			continue
		}
		if v.IsPrerelease() {
			pre = append(pre, v)
		} else {
			final = append(final, v)
		}
	}
	if ss.AllowsPrereleases() {
		out := make([]Version, 0, len(final)+len(pre))
		for _, v := range vs {
			if ss.Contains(v) {
				out = append(out, v)
			}
		}
		return out
	}
	if len(final) > 0 {
		return final
	}
	return pre
}

// isPin reports whether the set pins one exact version (== without a
// wildcard, or ===): PEP 592 lets such a pin select a yanked file.
func (ss Specifiers) isPin() bool {
	for _, s := range ss {
		if (s.Op == "==" && !s.Wildcard) || s.Op == "===" {
			return true
		}
	}
	return false
}
