package mcp

import (
	"strings"
	"testing"
)

// The arguments are checked against each tool's input schema before its
// handler runs, and the error names what is wrong in words.
func TestArgumentsCheckedAgainstSchema(t *testing.T) {
	f := newFixture(t, nil)
	tests := []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"missing required", "run_code", map[string]any{"code": "print(1)"}, "missing property 'language'"},
		{"wrong type", "run_code", map[string]any{"language": 5, "code": "print(1)"}, "language: got number, want string"},
		{"wrong item type", "run_code", map[string]any{"language": "python", "code": "x", "args": []any{1}}, "args.0: got number, want string"},
		{"no arguments at all", "get_run", nil, "missing property 'id'"},
		{"number for a string", "get_execution_history", map[string]any{"status": 3}, "status: got number, want string"},
		{"blank string", "get_run", map[string]any{"id": "  "}, "invalid arguments: id: must not be empty"},
		{"empty string said once", "get_run", map[string]any{"id": ""}, "invalid arguments: id: must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := f.call(t, tt.tool, tt.args, nil)
			text := resultText(res)
			if !res.IsError || !strings.Contains(text, tt.want) || !strings.HasPrefix(text, "invalid arguments") || strings.Count(text, ":") > 3 {
				t.Errorf("isError=%v %q, want an invalid-arguments error containing %q", res.IsError, text, tt.want)
			}
		})
	}
}
