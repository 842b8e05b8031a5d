package runtime_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/runtime"
)

func TestPreflightPolicy(t *testing.T) {
	policy, err := runtime.ParsePreflightPolicy("socket,subprocess,os.system", "eval,__import__")
	if err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, func(c *runtime.Config) { c.Preflight = policy })
	tests := []struct {
		name, lang, code string
		rejected         []string // reasons the error must name; empty: it runs
	}{
		{"clean code runs", "python", "import json\nprint(json.dumps([1]))", nil},
		{"import", "python", "import os\nimport socket\n", []string{"line 2 imports socket"}},
		{"from import", "python", "from subprocess import run", []string{"imports subprocess"}},
		{"submodule", "python", "from os import system, path", []string{"imports os.system"}},
		{"dynamic import", "python", "m = __import__('socket')", []string{"imports socket", "uses builtin __import__"}},
		{"builtin by reference", "python", "f = eval\nprint(f('1+1'))", []string{"line 1 uses builtin eval"}},
		{"coding cookie runs", "python", "# -*- coding: latin-1 -*-\nprint('ok')\n", nil},
		// The interpreter decodes the file by its coding cookie, and so must
		// the checker: in UTF-7, "+AAo-" is a newline that ends the comment.
		{"utf-7 coding cookie", "python", "# -*- coding: utf-7 -*-\n# +AAo-import socket\nprint('socket' in dir())\n", []string{"imports socket"}},
		// The parser stops at a NUL byte; running the file may not.
		{"trailing NUL byte", "python", "import socket\nprint('ran')\n\x00", []string{"could not parse", "null bytes"}},
		{"unknown coding cookie", "python", "# coding: nosuch\nimport socket\n", []string{"could not parse", "unknown encoding"}},
		{"syntax error is refused with the parser's message", "python", "def (:", []string{"could not parse", "line 1"}},
		{"other languages are not checked", "bash", "echo import socket", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.Run(t.Context(), sandpit.Request{Language: tt.lang, Code: tt.code})
			if len(tt.rejected) == 0 {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				if res.ID == "" {
					t.Error("no run happened")
				}
				return
			}
			if !errors.Is(err, runtime.ErrInvalidRequest) {
				t.Fatalf("err = %v (result %+v), want a pre-flight rejection wrapping ErrInvalidRequest", err, res)
			}
			for _, want := range tt.rejected {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("rejection %q does not say %q", err, want)
				}
			}
		})
	}
}
