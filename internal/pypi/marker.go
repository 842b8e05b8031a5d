package pypi

import (
	"fmt"
	"strings"
)

// Marker is a parsed PEP 508 environment marker, such as
// `python_version < "3.8" and sys_platform == "linux"`. Package metadata
// uses them to guard dependencies; ParseRequirement refuses them from
// callers (a caller names what the target needs).
type Marker struct {
	root markerNode
	text string
}

// Env holds the marker variables of a target (python_version,
// sys_platform, ...). "extra" is set by the evaluator, not here.
type Env map[string]string

// maxMarkerDepth bounds parenthesis nesting.
const maxMarkerDepth = 16

var markerVars = map[string]string{
	"python_version":                 "python_version",
	"python_full_version":            "python_full_version",
	"os_name":                        "os_name",
	"sys_platform":                   "sys_platform",
	"platform_release":               "platform_release",
	"platform_system":                "platform_system",
	"platform_version":               "platform_version",
	"platform_machine":               "platform_machine",
	"platform_python_implementation": "platform_python_implementation",
	"implementation_name":            "implementation_name",
	"implementation_version":         "implementation_version",
	"extra":                          "extra",
	// PEP 345 spellings packaging still accepts.
	"os.name":                        "os_name",
	"sys.platform":                   "sys_platform",
	"platform.version":               "platform_version",
	"platform.machine":               "platform_machine",
	"platform.python_implementation": "platform_python_implementation",
	"python_implementation":          "platform_python_implementation",
}

type markerNode interface {
	eval(env Env) (bool, error)
}

type markerOr []markerNode
type markerAnd []markerNode

type markerCmp struct {
	lhs, rhs markerValue
	op       string
}

type markerValue struct {
	variable string // canonical variable name, or ""
	literal  string
}

func (o markerOr) eval(env Env) (bool, error) {
	for _, n := range o {
		ok, err := n.eval(env)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

func (a markerAnd) eval(env Env) (bool, error) {
	for _, n := range a {
		ok, err := n.eval(env)
		if err != nil || !ok {
			return ok, err
		}
	}
	return true, nil
}

func (v markerValue) value(env Env) (string, error) {
	if v.variable == "" {
		return v.literal, nil
	}
	s, ok := env[v.variable]
	if !ok {
		return "", fmt.Errorf("marker variable %s is not known for this target", v.variable)
	}
	return s, nil
}

// eval follows packaging's rule: when the right side and operator form a
// valid version specifier and the left side is a valid version, compare
// as versions; otherwise compare as strings (in, not in, ==, !=, <, ...).
func (c markerCmp) eval(env Env) (bool, error) {
	l, err := c.lhs.value(env)
	if err != nil {
		return false, err
	}
	r, err := c.rhs.value(env)
	if err != nil {
		return false, err
	}
	if c.lhs.variable == "extra" || c.rhs.variable == "extra" {
		l, r = Normalize(l), Normalize(r)
	}
	switch c.op {
	case "in":
		return strings.Contains(r, l), nil
	case "not in":
		return !strings.Contains(r, l), nil
	}
	if sp, err := ParseSpecifier(c.op + r); err == nil {
		if v, err := ParseVersion(l); err == nil {
			return sp.Contains(v), nil
		}
	}
	switch c.op {
	case "==", "===":
		return l == r, nil
	case "!=":
		return l != r, nil
	case "<":
		return l < r, nil
	case "<=":
		return l <= r, nil
	case ">":
		return l > r, nil
	case ">=":
		return l >= r, nil
	}
	return false, fmt.Errorf("marker %q %s %q compares no versions", l, c.op, r)
}

// Eval evaluates the marker for env with each of extras as "extra" (and
// with no extra): true when any of them makes it hold.
func (m *Marker) Eval(env Env, extras []string) (bool, error) {
	if m == nil {
		return true, nil
	}
	e := make(Env, len(env)+1)
	for k, v := range env {
		e[k] = v
	}
	for _, x := range append([]string{""}, extras...) {
		e["extra"] = x
		ok, err := m.root.eval(e)
		if err != nil {
			return false, fmt.Errorf("marker %q: %w", m.text, err)
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

// MentionsExtra reports whether the marker tests "extra": a dependency of
// an optional feature.
func (m *Marker) MentionsExtra() bool {
	return m != nil && mentionsExtra(m.root)
}

func mentionsExtra(n markerNode) bool {
	switch n := n.(type) {
	case markerOr:
		for _, c := range n {
			if mentionsExtra(c) {
				return true
			}
		}
	case markerAnd:
		for _, c := range n {
			if mentionsExtra(c) {
				return true
			}
		}
	case markerCmp:
		return n.lhs.variable == "extra" || n.rhs.variable == "extra"
	}
	return false
}

func (m *Marker) String() string {
	if m == nil {
		return ""
	}
	return m.text
}

// ParseMarker parses a PEP 508 marker expression.
func ParseMarker(s string) (*Marker, error) {
	toks, err := markerTokens(s)
	if err != nil {
		return nil, err
	}
	p := &markerParser{toks: toks}
	root, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if p.pos != len(p.toks) {
		return nil, fmt.Errorf("%w: marker %q: unexpected %q", ErrInvalidRequirement, s, p.toks[p.pos].text)
	}
	return &Marker{root: root, text: strings.TrimSpace(s)}, nil
}

type markerToken struct {
	kind byte // 's' string, 'w' word, 'o' operator, '(' or ')'
	text string
}

func markerTokens(s string) ([]markerToken, error) {
	var toks []markerToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '(' || c == ')':
			toks = append(toks, markerToken{kind: c, text: string(c)})
			i++
		case c == '"' || c == '\'':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("%w: marker %q: unterminated string", ErrInvalidRequirement, s)
			}
			toks = append(toks, markerToken{kind: 's', text: s[i+1 : i+1+j]})
			i += j + 2
		case strings.IndexByte("<>=!~", c) >= 0:
			j := i
			for j < len(s) && strings.IndexByte("<>=!~", s[j]) >= 0 {
				j++
			}
			op := s[i:j]
			switch op {
			case "<", "<=", ">", ">=", "==", "!=", "~=", "===":
			default:
				return nil, fmt.Errorf("%w: marker %q: unknown operator %q", ErrInvalidRequirement, s, op)
			}
			toks = append(toks, markerToken{kind: 'o', text: op})
			i = j
		case isWordByte(c):
			j := i
			for j < len(s) && (isWordByte(s[j]) || s[j] == '.') {
				j++
			}
			toks = append(toks, markerToken{kind: 'w', text: s[i:j]})
			i = j
		default:
			return nil, fmt.Errorf("%w: marker %q: unexpected %q", ErrInvalidRequirement, s, string(c))
		}
	}
	return toks, nil
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

type markerParser struct {
	toks []markerToken
	pos  int
}

func (p *markerParser) peek() (markerToken, bool) {
	if p.pos < len(p.toks) {
		return p.toks[p.pos], true
	}
	return markerToken{}, false
}

func (p *markerParser) isWord(w string) bool {
	t, ok := p.peek()
	return ok && t.kind == 'w' && t.text == w
}

func (p *markerParser) or(depth int) (markerNode, error) {
	var out markerOr
	for {
		n, err := p.and(depth)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
		if !p.isWord("or") {
			break
		}
		p.pos++
	}
	if len(out) == 1 {
		return out[0], nil
	}
	return out, nil
}

func (p *markerParser) and(depth int) (markerNode, error) {
	var out markerAnd
	for {
		n, err := p.atom(depth)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
		if !p.isWord("and") {
			break
		}
		p.pos++
	}
	if len(out) == 1 {
		return out[0], nil
	}
	return out, nil
}

func (p *markerParser) atom(depth int) (markerNode, error) {
	t, ok := p.peek()
	if !ok {
		return nil, fmt.Errorf("%w: marker ends early", ErrInvalidRequirement)
	}
	if t.kind == '(' {
		if depth >= maxMarkerDepth {
			return nil, fmt.Errorf("%w: marker nests parentheses deeper than %d", ErrInvalidRequirement, maxMarkerDepth)
		}
		p.pos++
		n, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		if t, ok := p.peek(); !ok || t.kind != ')' {
			return nil, fmt.Errorf("%w: marker: missing )", ErrInvalidRequirement)
		}
		p.pos++
		return n, nil
	}
	lhs, err := p.value()
	if err != nil {
		return nil, err
	}
	var op string
	switch t, ok := p.peek(); {
	case ok && t.kind == 'o':
		op = t.text
		p.pos++
	case ok && t.kind == 'w' && t.text == "in":
		op = "in"
		p.pos++
	case ok && t.kind == 'w' && t.text == "not":
		p.pos++
		if !p.isWord("in") {
			return nil, fmt.Errorf("%w: marker: \"not\" must be followed by \"in\"", ErrInvalidRequirement)
		}
		p.pos++
		op = "not in"
	default:
		return nil, fmt.Errorf("%w: marker: expected a comparison operator", ErrInvalidRequirement)
	}
	rhs, err := p.value()
	if err != nil {
		return nil, err
	}
	return markerCmp{lhs: lhs, rhs: rhs, op: op}, nil
}

func (p *markerParser) value() (markerValue, error) {
	t, ok := p.peek()
	if !ok {
		return markerValue{}, fmt.Errorf("%w: marker ends early", ErrInvalidRequirement)
	}
	p.pos++
	switch t.kind {
	case 's':
		return markerValue{literal: t.text}, nil
	case 'w':
		if v, ok := markerVars[t.text]; ok {
			return markerValue{variable: v}, nil
		}
		return markerValue{}, fmt.Errorf("%w: marker: unknown variable %q", ErrInvalidRequirement, t.text)
	}
	return markerValue{}, fmt.Errorf("%w: marker: expected a variable or a quoted string, got %q", ErrInvalidRequirement, t.text)
}
