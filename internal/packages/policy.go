package packages

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/npm"
	"github.com/sandpit-dev/sandpit/internal/pypi"
)

// Policy is the operator's allowlist and denylist (--package-allow FILE).
// Every package of a resolution is checked, dependencies too: an allowlist
// that names only requests refuses urllib3 unless it is listed.
//
// The file has one rule a line; # starts a comment:
//
//	allow python requests >=2.31,<3   # this name, these versions
//	allow python numpy                # any version
//	deny  python evil-package
//	allow javascript left-pad 1.3.0   # npm range syntax
//	deny  javascript *                # no npm packages at all
//
// Deny rules win. Once a language has an allow rule, only what an allow
// rule matches is installed for it.
type Policy struct {
	rules []rule
}

type rule struct {
	allow    bool
	language string
	name     string // normalized; "*" for any
	spec     string // version range as written; "" for any
	line     int
	py       pypi.Specifiers
}

// ReadPolicy reads a policy file.
func ReadPolicy(path string) (*Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("package policy: %w", err)
	}
	p, err := ParsePolicy(b)
	if err != nil {
		return nil, fmt.Errorf("package policy %s: %w", path, err)
	}
	return p, nil
}

// ParsePolicy parses a policy file's text.
func ParsePolicy(b []byte) (*Policy, error) {
	p := &Policy{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	n := 0
	for sc.Scan() {
		n++
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 || (f[0] != "allow" && f[0] != "deny") {
			return nil, fmt.Errorf("line %d: want `allow|deny LANGUAGE NAME [VERSIONS]`, got %q", n, strings.TrimSpace(line))
		}
		r := rule{allow: f[0] == "allow", language: f[1], name: f[2], spec: strings.Join(f[3:], " "), line: n}
		switch r.language {
		case Python:
			if r.name != "*" {
				if err := pypi.ValidName(r.name); err != nil {
					return nil, fmt.Errorf("line %d: %w", n, err)
				}
				r.name = pypi.Normalize(r.name)
			}
			if r.spec != "" {
				ss, err := pypi.ParseSpecifiers(r.spec)
				if err != nil {
					return nil, fmt.Errorf("line %d: %w", n, err)
				}
				r.py = ss
			}
		case JavaScript:
			// npm names are exact: old packages have capitals (JSONStream).
			if r.name != "*" {
				if err := npm.ValidDepName(r.name); err != nil {
					return nil, fmt.Errorf("line %d: %w", n, err)
				}
			}
			if r.spec != "" {
				if _, err := jsRange(r.spec); err != nil {
					return nil, fmt.Errorf("line %d: %w", n, err)
				}
			}
		default:
			return nil, fmt.Errorf("line %d: language %q: give python or javascript", n, r.language)
		}
		p.rules = append(p.rules, r)
	}
	return p, sc.Err()
}

// Check says why a package may not be installed, or "" when it may.
func (p *Policy) Check(language, name, version string) string {
	if p == nil {
		return ""
	}
	if language == Python {
		name = pypi.Normalize(name)
	}
	hasAllow, allowed := false, false
	for _, r := range p.rules {
		if r.language != language {
			continue
		}
		match := (r.name == "*" || r.name == name) && r.versionMatches(version)
		if !r.allow && language == JavaScript && strings.EqualFold(r.name, name) && r.versionMatches(version) {
			// A deny holds for every capitalisation: npm once took both
			// JSONStream and jsonstream.
			match = true
		}
		if !r.allow && match {
			return fmt.Sprintf("the operator's package policy denies %s %s (line %d)", name, version, r.line)
		}
		if r.allow {
			hasAllow = true
			allowed = allowed || match
		}
	}
	if hasAllow && !allowed {
		return fmt.Sprintf("%s %s is not on the operator's allowlist for %s; ask the operator to add it (--package-allow)", name, version, language)
	}
	return ""
}

func (r rule) versionMatches(version string) bool {
	if r.spec == "" {
		return true
	}
	switch r.language {
	case Python:
		v, err := pypi.ParseVersion(version)
		return err == nil && r.py.Contains(v)
	case JavaScript:
		ok, err := jsRangeContains(r.spec, version)
		return err == nil && ok
	}
	return false
}
