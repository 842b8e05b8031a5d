package runtime

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// The static pre-flight is defence in depth, never the boundary: the kernel
// (namespaces, seccomp, cgroups, no capabilities) is what contains a
// snippet. A policy lets an operator turn away Python code that imports
// listed modules or calls listed builtins before it runs, with the reason as
// an error the model reads. Python is dynamic enough (getattr, exec of
// strings, encoded payloads) that a determined snippet can evade any static
// check; the point is to stop the obvious cases early and legibly.
//
// The code is parsed by preflight.py inside a sandbox of its own, never in
// the server: a parser fed hostile input is attack surface too.

//go:embed preflight.py
var preflightPy string

// PreflightPolicy lists what Python code may not import or call. The zero
// value rejects nothing; a nil *PreflightPolicy turns the check off.
type PreflightPolicy struct {
	// DenyModules are module names; a name also denies its submodules
	// ("os.system" denies `from os import system`; "socket" denies
	// `import socket` and `__import__("socket")`).
	DenyModules []string
	// DenyBuiltins are builtin names whose use is rejected (eval, exec,
	// compile, __import__, open…), called or merely referenced.
	DenyBuiltins []string
	// Timeout bounds the checking sandbox; zero means 10 s.
	Timeout time.Duration
}

var pyName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// ParsePreflightPolicy builds a policy from comma-separated lists (the
// command-line form). Two empty lists give nil: no pre-flight.
func ParsePreflightPolicy(modules, builtins string) (*PreflightPolicy, error) {
	split := func(s string) []string {
		var out []string
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, f)
			}
		}
		return out
	}
	p := &PreflightPolicy{DenyModules: split(modules), DenyBuiltins: split(builtins)}
	if len(p.DenyModules) == 0 && len(p.DenyBuiltins) == 0 {
		return nil, nil
	}
	return p, p.Validate()
}

// Validate rejects names that are not Python identifiers (or dotted ones,
// for modules).
func (p *PreflightPolicy) Validate() error {
	for _, m := range p.DenyModules {
		if !pyName.MatchString(m) {
			return fmt.Errorf("pre-flight: %q is not a Python module name", m)
		}
	}
	for _, b := range p.DenyBuiltins {
		if !pyName.MatchString(b) || strings.Contains(b, ".") {
			return fmt.Errorf("pre-flight: %q is not a Python builtin name", b)
		}
	}
	return nil
}

// Violation is one use of a denied module or builtin.
type Violation struct {
	Line int    `json:"line"`
	Kind string `json:"kind"` // "import" or "builtin"
	Name string `json:"name"`
}

func (v Violation) String() string {
	if v.Kind == "import" {
		return fmt.Sprintf("line %d imports %s", v.Line, v.Name)
	}
	return fmt.Sprintf("line %d uses builtin %s", v.Line, v.Name)
}

// preflightKey marks the context of the checking run, which must not be
// checked itself.
type preflightKey struct{}

// admit decides, before anything runs, whether req may run at all: the OCI
// runtime must work on this host, the host must be able to enforce the
// limits (or the operator opted in to fallbacks; see ctrd/rootless.go), and
// Python code must pass the pre-flight policy.
func (r *Runtime) admit(ctx context.Context, lang *LanguageSpec, req sandpit.Request) error {
	if ctx.Value(preflightKey{}) != nil {
		return nil
	}
	if err := CheckRuntimeBinary(r.cfg.RuncBinary, r.cgroupMode); err != nil {
		return err
	}
	if _, err := r.eng.Limits(); err != nil {
		return err
	}
	p := r.cfg.Preflight
	if p == nil || lang.Name != "python" {
		return nil
	}
	if req.Code == "" {
		return fmt.Errorf("%w: the pre-flight policy checks Python code before it runs, so pass the code inline rather than a workspace path", ErrInvalidRequest)
	}
	vs, err := r.preflight(ctx, p, lang, req.Code)
	if err != nil {
		return err
	}
	if len(vs) == 0 {
		return nil
	}
	var parts []string
	for _, v := range vs {
		parts = append(parts, v.String())
	}
	return fmt.Errorf("%w: rejected by the pre-flight policy: %s (denied modules: %s; denied builtins: %s). Rewrite the code without them",
		ErrInvalidRequest, strings.Join(parts, "; "), listOrNone(p.DenyModules), listOrNone(p.DenyBuiltins))
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// ErrPreflight means the pre-flight check itself failed to give an answer.
// Runs are refused then: a security check fails closed.
var ErrPreflight = errors.New("pre-flight check failed")

// preflight parses code in a sandbox and returns the policy violations.
// Code the checker cannot parse is refused (an ErrInvalidRequest with the
// parser's message): the interpreter might still run it, or part of it, and
// a check that cannot read the code has nothing to say about it.
func (r *Runtime) preflight(ctx context.Context, p *PreflightPolicy, lang *LanguageSpec, code string) ([]Violation, error) {
	in, err := preflightInput(p, code)
	if err != nil {
		return nil, err
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = sandpit.DefaultTimeout
	}
	res, err := r.Run(context.WithValue(ctx, preflightKey{}, true), sandpit.Request{Language: lang.Name, Code: preflightPy, Stdin: in, Timeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPreflight, err)
	}
	if res.Status != sandpit.StatusSuccess {
		return nil, fmt.Errorf("%w: checker ended %s: %s", ErrPreflight, res.Status, strings.TrimSpace(res.Stderr))
	}
	return preflightVerdict(res.Stdout)
}

// preflightInput is the checker's stdin. The code goes as base64 of its
// bytes, exactly as the program's source file will hold them: JSON text
// would replace invalid UTF-8, and the checker must decode the bytes the way
// the interpreter does (coding cookie, BOM).
func preflightInput(p *PreflightPolicy, code string) ([]byte, error) {
	return json.Marshal(map[string]any{
		"code_b64": base64.StdEncoding.EncodeToString([]byte(code)),
		"modules":  p.DenyModules,
		"builtins": p.DenyBuiltins,
	})
}

// preflightVerdict reads the checker's answer: the violations, or an
// ErrInvalidRequest when the code does not parse.
func preflightVerdict(stdout string) ([]Violation, error) {
	var out struct {
		Violations  []Violation `json:"violations"`
		SyntaxError *string     `json:"syntax_error"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		return nil, fmt.Errorf("%w: checker output %.200q: %w", ErrPreflight, stdout, err)
	}
	if out.SyntaxError != nil {
		return nil, fmt.Errorf("%w: the pre-flight policy could not parse the code, so it does not run: %s. Fix it (a Python syntax error, an unknown coding cookie, a NUL byte) and try again",
			ErrInvalidRequest, *out.SyntaxError)
	}
	return out.Violations, nil
}
