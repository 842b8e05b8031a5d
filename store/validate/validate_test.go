package validate

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/store/workspace"
)

func registry(t *testing.T, dir string) *Registry {
	t.Helper()
	r, err := NewRegistry(dir, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestBuiltins(t *testing.T) {
	r := registry(t, "")
	tests := []struct {
		name, schema, data string
		wantValid          bool
		wantLocs           []string // instance locations of the errors, in any order
	}{
		{"config ok", "config", `{"name": "api", "environment": "production", "server": {"port": 8080}, "features": {"beta": true}}`, true, nil},
		{"config bad port and env", "config", `{"name": "api", "environment": "prod", "server": {"port": 70000}}`, false, []string{"/environment", "/server/port"}},
		{"config missing server", "config", `{"name": "api", "environment": "staging"}`, false, []string{""}},
		{"user ok", "user", `{"id": 1, "username": "ada_l", "email": "ada@example.com", "roles": ["admin"], "created_at": "2024-01-02T03:04:05Z"}`, true, nil},
		{"user bad", "user", `{"id": 0, "username": "Ada!", "email": "not-an-email", "age": -1, "roles": ["root"]}`, false, []string{"/id", "/username", "/email", "/age", "/roles/0"}},
		{"user extra property", "user", `{"id": 1, "username": "ada", "email": "a@b.co", "password": "x"}`, false, []string{""}},
		{"dataset ok", "dataset", `{"name": "sales", "columns": [{"name": "day", "type": "date"}], "rows": [{"day": "2024-01-01"}]}`, true, nil},
		{"dataset bad column", "dataset", `{"name": "sales", "columns": [{"name": "1day", "type": "time"}], "rows": [{"day": {"nested": 1}}]}`, false, []string{"/columns/0/name", "/columns/0/type", "/rows/0/day"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.ValidateJSON(t.Context(), SchemaRef{Name: tt.schema}, strings.NewReader(tt.data), false, 0)
			if err != nil {
				t.Fatal(err)
			}
			if res.Valid != tt.wantValid {
				t.Fatalf("valid = %v, want %v; errors %+v", res.Valid, tt.wantValid, res.Errors)
			}
			got := map[string]bool{}
			for _, e := range res.Errors {
				got[e.InstanceLocation] = true
				if e.Message == "" || !strings.HasPrefix(e.SchemaLocation, tt.schema+".json#/") {
					t.Errorf("error %+v: want a message and a schema location in %s.json", e, tt.schema)
				}
			}
			for _, l := range tt.wantLocs {
				if !got[l] {
					t.Errorf("no error at %q; got %+v", l, res.Errors)
				}
			}
			if res.ErrorCount != len(res.Errors) {
				t.Errorf("error_count %d, listed %d", res.ErrorCount, len(res.Errors))
			}
		})
	}
}

func TestJSONL(t *testing.T) {
	r := registry(t, "")
	ref := SchemaRef{Inline: map[string]any{
		"type": "object", "required": []any{"id"},
		"properties": map[string]any{"id": map[string]any{"type": "integer"}, "tag": map[string]any{"type": "string", "maxLength": 3.0}},
	}}
	data := "{\"id\": 1}\n\n{\"id\": \"two\"}\n{\"id\": 3, \"tag\": \"long\"}\n{not json}\n{\"id\": 5}\n"
	res, err := r.ValidateJSON(t.Context(), ref, strings.NewReader(data), true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Valid || res.Records != 5 || res.Invalid != 3 || res.ErrorCount != 3 {
		t.Fatalf("result %+v", res)
	}
	want := []struct {
		line int
		loc  string
	}{{3, "/id"}, {4, "/tag"}, {5, ""}}
	for i, w := range want {
		if e := res.Errors[i]; e.Line != w.line || e.InstanceLocation != w.loc {
			t.Errorf("error %d = %+v, want line %d at %q", i, e, w.line, w.loc)
		}
	}
	if !strings.Contains(res.Errors[2].Message, "not valid JSON") {
		t.Errorf("syntax error message: %q", res.Errors[2].Message)
	}
}

func TestErrorCap(t *testing.T) {
	r := registry(t, "")
	ref := SchemaRef{Inline: map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}
	res, err := r.ValidateJSON(t.Context(), ref, strings.NewReader(`[1,2,3,4,5,6,7,8,9,10]`), false, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 4 || res.ErrorCount != 10 || !res.Truncated {
		t.Fatalf("listed %d of %d, truncated %v", len(res.Errors), res.ErrorCount, res.Truncated)
	}
}

func TestSchemaRefs(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "order.json"), []byte(`{"$schema": "http://json-schema.org/draft-07/schema#", "description": "an order",
		"type": "object", "properties": {"buyer": {"$ref": "user.json"}, "qty": {"type": "integer", "exclusiveMinimum": 0}}, "required": ["qty"]}`), 0o644)
	r := registry(t, dir)
	names := map[string]bool{}
	for _, n := range r.List() {
		names[n.Name] = true
	}
	for _, n := range []string{"config", "user", "dataset", "order"} {
		if !names[n] {
			t.Errorf("schema %s not listed", n)
		}
	}
	// A draft-07 schema from the directory, referencing a built-in by name.
	if _, err := r.Schema(SchemaRef{Name: "order"}); err != nil {
		t.Fatal(err)
	}
	res, _ := r.ValidateJSON(t.Context(), SchemaRef{Name: "order"}, strings.NewReader(`{"qty": 0, "buyer": {"id": 1, "username": "ab", "email": "a@b.co"}}`), false, 0)
	if res.Valid || res.ErrorCount != 2 {
		t.Fatalf("want 2 errors (qty, buyer.username), got %+v", res.Errors)
	}

	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "ok.json"), []byte(`{"$ref": "parts/id.json"}`), 0o644)
	os.MkdirAll(filepath.Join(ws, "parts"), 0o755)
	os.WriteFile(filepath.Join(ws, "parts", "id.json"), []byte(`{"type": "integer"}`), 0o644)
	os.WriteFile(filepath.Join(ws, "escape.json"), []byte(`{"$ref": "../secret.json"}`), 0o644)
	os.WriteFile(filepath.Join(filepath.Dir(ws), "secret.json"), []byte(`{"type": "integer"}`), 0o644)

	open := workspaceOpener(t, ws)
	if _, err := r.Schema(SchemaRef{Path: "ok.json", Open: open}); err != nil {
		t.Fatalf("file ref inside the schema's directory: %v", err)
	}
	if res, _ := r.ValidateJSON(t.Context(), SchemaRef{Path: "ok.json", Open: open}, strings.NewReader(`"x"`), false, 0); res.Valid {
		t.Error("file-referenced schema not applied")
	}

	bad := []struct {
		name    string
		ref     SchemaRef
		wantErr error
	}{
		{"remote https ref", SchemaRef{Inline: map[string]any{"$ref": "https://example.com/schema.json"}}, ErrRemoteRef},
		{"remote http $schema", SchemaRef{Inline: map[string]any{"$schema": "http://example.com/meta", "type": "object"}}, ErrRemoteRef},
		{"file ref from inline", SchemaRef{Inline: map[string]any{"$ref": "file:///etc/passwd"}}, ErrRemoteRef},
		{"file ref leaving the directory", SchemaRef{Path: "escape.json", Open: open}, ErrRemoteRef},
		{"schema file without a workspace", SchemaRef{Path: "ok.json"}, ErrBadSchema},
		{"bad schema", SchemaRef{Inline: map[string]any{"type": "integr"}}, ErrBadSchema},
		{"bad minimum", SchemaRef{Inline: map[string]any{"minimum": "ten"}}, ErrBadSchema},
		{"not an object", SchemaRef{Inline: []any{1.0}}, ErrBadSchema},
		{"unknown name", SchemaRef{Name: "nope"}, ErrUnknownSchema},
		{"none", SchemaRef{}, ErrBadSchema},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.Schema(tt.ref)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			t.Log(err)
		})
	}
}

func TestBadRegistryDir(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "broken.json"), []byte(`{"type": 5}`), 0o644)
	if _, err := NewRegistry(dir, Limits{}); !errors.Is(err, ErrBadSchema) {
		t.Fatalf("err = %v", err)
	}
	if _, err := NewRegistry(filepath.Join(dir, "missing"), Limits{}); err == nil {
		t.Fatal("missing directory accepted")
	}
}

func TestListIsJSON(t *testing.T) {
	for _, s := range registry(t, "").List() {
		if !json.Valid(s.Schema) || s.Description == "" || s.Source != "builtin" {
			t.Errorf("%s: %+v", s.Name, s)
		}
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// workspaceOpener opens files of the workspace at dir the way serve does.
func workspaceOpener(t testing.TB, dir string) OpenFunc {
	t.Helper()
	ws, err := workspace.Open(dir, workspace.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return ws.OpenFile
}
