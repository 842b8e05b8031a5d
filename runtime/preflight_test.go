package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"testing"
)

func TestParsePreflightPolicy(t *testing.T) {
	tests := []struct {
		name, modules, builtins string
		wantNil, wantErr        bool
		wantModules             int
	}{
		{name: "off", wantNil: true},
		{name: "blank entries only", modules: " , ", builtins: ",", wantNil: true},
		{name: "modules and builtins", modules: "socket, ctypes,os.system", builtins: "eval,exec", wantModules: 3},
		{name: "bad module", modules: "socket;rm", wantErr: true},
		{name: "dotted builtin", builtins: "os.system", wantErr: true},
		{name: "leading digit", builtins: "1eval", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePreflightPolicy(tt.modules, tt.builtins)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if (p == nil) != tt.wantNil {
				t.Fatalf("policy = %+v, want nil %v", p, tt.wantNil)
			}
			if p != nil && len(p.DenyModules) != tt.wantModules {
				t.Errorf("modules = %q, want %d", p.DenyModules, tt.wantModules)
			}
		})
	}
}

// TestPreflightInputKeepsBytes: the checker gets the code's exact bytes
// (the interpreter reads those), not a JSON text rendering of them.
func TestPreflightInputKeepsBytes(t *testing.T) {
	p := &PreflightPolicy{DenyModules: []string{"socket"}}
	for _, code := range []string{"print(1)\n", "import socket\n\x00", "x = '\xff\xfe'\r\n", "\ufeffimport os\n"} {
		in, err := preflightInput(p, code)
		if err != nil {
			t.Fatal(err)
		}
		var req struct {
			Code []byte `json:"code_b64"` // encoding/json decodes base64 into []byte
		}
		if err := json.Unmarshal(in, &req); err != nil {
			t.Fatal(err)
		}
		if got := string(req.Code); got != code {
			t.Errorf("checker gets %q, want %q", got, code)
		}
	}
}

func TestPreflightVerdict(t *testing.T) {
	tests := []struct {
		name, stdout string
		want         int   // violations
		wantErr      error // nil: none
	}{
		{name: "clean", stdout: `{"violations": []}`},
		{name: "violations", stdout: `{"violations": [{"line": 2, "kind": "import", "name": "socket"}]}`, want: 1},
		{name: "does not parse", stdout: `{"syntax_error": "source code string cannot contain null bytes"}`, wantErr: ErrInvalidRequest},
		{name: "empty syntax error still refuses", stdout: `{"syntax_error": ""}`, wantErr: ErrInvalidRequest},
		{name: "garbage", stdout: `Traceback`, wantErr: ErrPreflight},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, err := preflightVerdict(tt.stdout)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if len(vs) != tt.want {
				t.Errorf("violations = %v, want %d", vs, tt.want)
			}
		})
	}
}

// TestPreflightCheckerScript runs preflight.py on the host's python3 (the
// sandboxed run is TestPreflightPolicy): the source's own encoding and
// bytes the parser stops at must not hide an import (review 2026-11-30, L1).
func TestPreflightCheckerScript(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this host")
	}
	p := &PreflightPolicy{DenyModules: []string{"socket"}, DenyBuiltins: []string{"eval"}}
	tests := []struct {
		name, code string
		imports    bool // a violation "import socket" is found
		unparsable bool
	}{
		{name: "clean", code: "print(1)\n"},
		{name: "import", code: "import socket\n", imports: true},
		{name: "utf-7 cookie", code: "# -*- coding: utf-7 -*-\n# +AAo-import socket\n", imports: true},
		{name: "latin-1 cookie", code: "# coding: latin-1\nprint('\xe9')\n"},
		{name: "BOM", code: "\ufeffimport socket\n", imports: true},
		{name: "trailing NUL", code: "import os\n\x00", unparsable: true},
		{name: "unknown encoding", code: "# coding: nosuch\nprint(1)\n", unparsable: true},
		{name: "invalid UTF-8", code: "s = '\xff'\n", unparsable: true},
		{name: "syntax error", code: "def (:", unparsable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := preflightInput(p, tt.code)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(py, "-I", "-c", preflightPy)
			cmd.Stdin = bytes.NewReader(in)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("checker: %v", err)
			}
			vs, err := preflightVerdict(string(out))
			if got := errors.Is(err, ErrInvalidRequest); got != tt.unparsable {
				t.Fatalf("refused as unparsable = %v (%v), want %v", got, err, tt.unparsable)
			}
			got := slices.ContainsFunc(vs, func(v Violation) bool { return v.Kind == "import" && v.Name == "socket" })
			if got != tt.imports {
				t.Errorf("import socket found = %v (violations %v), want %v", got, vs, tt.imports)
			}
		})
	}
}
