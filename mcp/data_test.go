package mcp

import (
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	_ "github.com/mattn/go-sqlite3" // the writable driver, to build the fixture

	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/store/querydb"
	"github.com/sandpit-dev/sandpit/store/validate"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

type dataFixture struct {
	c      *client.Client
	dbPath string
	ws     string
}

// newDataClient serves only the data tools, over mcp-go's in-process
// transport, with a configured database and a workspace directory. Its
// queries' time limit is out of the way (a loaded host must not turn an
// answer or a refusal into a timeout); newDataClientTimeout sets it.
func newDataClient(t *testing.T) dataFixture {
	t.Helper()
	return newDataClientTimeout(t, testenv.Patience)
}

// newDataClientTimeout is newDataClient with a query time limit.
func newDataClientTimeout(t *testing.T, queryTimeout time.Duration) dataFixture {
	t.Helper()
	ws := t.TempDir()
	dbPath := filepath.Join(t.TempDir(), "shop.db")
	db, err := sql.Open("sqlite3", dbPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, tier TEXT DEFAULT 'free')`,
		`CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER REFERENCES users(id), amount REAL)`,
		`INSERT INTO users VALUES (1, 'ada', 'pro'), (2, 'bob', 'free')`,
		`INSERT INTO orders (user_id, amount) VALUES (1, 10), (1, 5.5), (2, 3)`,
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	files, err := workspace.Open(ws, workspace.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	qdb, err := querydb.New(dbPath, files.OpenFile, querydb.Options{Timeout: queryTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qdb.Close() })
	reg, err := validate.NewRegistry("", validate.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Config{QueryDB: qdb, Validator: reg, Opener: files, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	c, err := client.NewInProcessClient(srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcpgo.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	return dataFixture{c: c, dbPath: dbPath, ws: ws}
}

func (f dataFixture) call(t *testing.T, tool string, args map[string]any, out any) *mcpgo.CallToolResult {
	t.Helper()
	req := mcpgo.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := f.c.CallTool(t.Context(), req)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if out != nil && !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured output %s: %v", tool, b, err)
		}
	}
	return res
}

func resultText(r *mcpgo.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcpgo.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestDataToolsListed(t *testing.T) {
	f := newDataClient(t)
	tools, err := f.c.ListTools(t.Context(), mcpgo.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"describe_schema": true, "query_db": true, "validate_json_data": true, "validate_csv_data": true}
	for _, tool := range tools.Tools {
		if want[tool.Name] {
			delete(want, tool.Name)
			if tool.Annotations.ReadOnlyHint == nil || !*tool.Annotations.ReadOnlyHint {
				t.Errorf("%s is not annotated read-only", tool.Name)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("missing tools: %v", want)
	}
}

func TestQueryDBTool(t *testing.T) {
	f := newDataClient(t)
	short := newDataClientTimeout(t, 300*time.Millisecond) // for the endless query only
	before, _ := os.ReadFile(f.dbPath)

	var sch querydb.Schema
	if res := f.call(t, "describe_schema", nil, &sch); res.IsError || len(sch.Tables) != 2 || !strings.Contains(resultText(res), "users") {
		t.Fatalf("describe_schema: %s %+v", resultText(res), sch)
	}

	tests := []struct {
		name      string
		args      map[string]any
		wantError string // substring of the isError text; "" for success
		wantRows  int
	}{
		{"select", map[string]any{"sql": "SELECT name, tier FROM users ORDER BY id"}, "", 2},
		{"join with positional params", map[string]any{"sql": "SELECT u.name, sum(o.amount) FROM users u JOIN orders o ON o.user_id = u.id WHERE o.amount > ? GROUP BY u.id", "params": []any{4}}, "", 1},
		{"named params", map[string]any{"sql": "SELECT id FROM users WHERE name = :name", "params": map[string]any{"name": "bob"}}, "", 1},
		{"max_rows", map[string]any{"sql": "SELECT * FROM orders", "max_rows": 2}, "", 2},
		{"drop", map[string]any{"sql": "DROP TABLE users"}, "read-only", 0},
		{"stacked", map[string]any{"sql": "SELECT 1; DELETE FROM users"}, "one SQL statement", 0},
		{"pragma write", map[string]any{"sql": "PRAGMA journal_mode=DELETE"}, "journal_mode", 0},
		{"timeout", map[string]any{"sql": "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM c) SELECT count(*) FROM c"}, "timed out", 0},
		{"syntax", map[string]any{"sql": "SELECT FROM"}, "SQL error", 0},
		{"missing param", map[string]any{"sql": "SELECT ?"}, "placeholder", 0},
		{"empty sql", map[string]any{"sql": " "}, "sql: must not be empty", 0},
		{"workspace db missing", map[string]any{"sql": "SELECT 1", "database": "nope.db"}, "no such file", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := f
			if tt.name == "timeout" {
				f = short
			}
			var out QueryDBResult
			res := f.call(t, "query_db", tt.args, &out)
			text := resultText(res)
			if tt.wantError != "" {
				if !res.IsError || !strings.Contains(text, tt.wantError) {
					t.Fatalf("isError=%v %q, want an error containing %q", res.IsError, text, tt.wantError)
				}
				return
			}
			if res.IsError {
				t.Fatalf("error: %s", text)
			}
			if out.RowCount != tt.wantRows || len(out.Rows) != tt.wantRows || len(out.Columns) == 0 {
				t.Fatalf("%+v", out)
			}
			if !strings.Contains(text, strings.Join(out.Columns, " | ")) {
				t.Errorf("text table has no header: %q", text)
			}
		})
	}
	after, _ := os.ReadFile(f.dbPath)
	if sha256.Sum256(before) != sha256.Sum256(after) {
		t.Fatal("the database changed")
	}
}

func TestValidateJSONTool(t *testing.T) {
	f := newDataClient(t)
	os.WriteFile(filepath.Join(f.ws, "users.jsonl"), []byte(`{"id": 1, "username": "ada", "email": "ada@example.com"}
{"id": -1, "username": "bob", "email": "bob@example.com"}
`), 0o644)
	tests := []struct {
		name      string
		args      map[string]any
		wantValid bool
		wantError string
		wantFirst string // instance location of the first error
	}{
		{"builtin valid", map[string]any{"data": map[string]any{"id": 1, "username": "ada", "email": "ada@example.com"}, "schema": "user"}, true, "", ""},
		{"builtin invalid via alias", map[string]any{"data": `{"id": 1, "username": "ada", "email": "ada@example.com", "age": 200}`, "schema_name_or_dict": "user"}, false, "", "/age"},
		{"inline schema", map[string]any{"data": []any{1, "x"}, "schema": map[string]any{"type": "array", "items": map[string]any{"type": "integer"}}}, false, "", "/1"},
		{"jsonl file", map[string]any{"path": "users.jsonl", "schema": "user"}, false, "", "/id"},
		{"unknown schema", map[string]any{"data": "{}", "schema": "nope"}, false, "unknown schema", ""},
		{"bad schema", map[string]any{"data": "{}", "schema": map[string]any{"type": 5}}, false, "invalid schema", ""},
		{"remote ref", map[string]any{"data": "{}", "schema": map[string]any{"$ref": "https://example.com/s.json"}}, false, "not fetched", ""},
		{"no schema", map[string]any{"data": "{}"}, false, "schema is required", ""},
		{"path outside", map[string]any{"path": "../x.json", "schema": "user"}, false, "outside", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out validate.JSONResult
			res := f.call(t, "validate_json_data", tt.args, &out)
			text := resultText(res)
			if tt.wantError != "" {
				if !res.IsError || !strings.Contains(text, tt.wantError) {
					t.Fatalf("isError=%v %q, want %q", res.IsError, text, tt.wantError)
				}
				return
			}
			if res.IsError || out.Valid != tt.wantValid {
				t.Fatalf("isError=%v valid=%v: %s", res.IsError, out.Valid, text)
			}
			if tt.wantFirst != "" && (len(out.Errors) == 0 || out.Errors[0].InstanceLocation != tt.wantFirst) {
				t.Fatalf("errors %+v, want first at %s", out.Errors, tt.wantFirst)
			}
		})
	}
	var out validate.JSONResult
	f.call(t, "validate_json_data", map[string]any{"path": "users.jsonl", "schema": "user"}, &out)
	if out.Records != 2 || out.Errors[0].Line != 2 {
		t.Errorf("JSONL line numbers: %+v", out)
	}
}

func TestValidateCSVTool(t *testing.T) {
	f := newDataClient(t)
	os.WriteFile(filepath.Join(f.ws, "people.csv"), []byte("id;name;born\n1;ada;1815-12-10\n2;;1912-06-23\n"), 0o644)
	tests := []struct {
		name      string
		args      map[string]any
		wantValid bool
		wantError string
		wantRows  int
	}{
		{"seed arguments", map[string]any{"csv_content": "id,name,age\n1,ada,36\n2,bob,x\n", "required_headers": []any{"id", "name"},
			"type_constraints": map[string]any{"id": "integer", "age": map[string]any{"type": "integer", "min": 0}}}, false, "", 2},
		{"valid", map[string]any{"csv_content": "id,name\n1,ada\n", "type_constraints": map[string]any{"id": "integer"}}, true, "", 1},
		{"workspace file with options", map[string]any{"path": "people.csv", "delimiter": ";",
			"type_constraints": map[string]any{"born": map[string]any{"type": "date", "format": "%Y-%m-%d"}, "name": map[string]any{"not_null": true}}}, false, "", 2},
		{"unexpected header refused", map[string]any{"csv_content": "id,extra\n1,2\n", "required_headers": []any{"id"}, "allow_unexpected_headers": false}, false, "", 1},
		{"bad type", map[string]any{"csv_content": "a\n1\n", "type_constraints": map[string]any{"a": "uuid"}}, false, "unknown type", 0},
		{"bad delimiter", map[string]any{"csv_content": "a\n1\n", "delimiter": ";;"}, false, "one character", 0},
		{"no input", map[string]any{}, false, "csv_content is required", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out validate.CSVResult
			res := f.call(t, "validate_csv_data", tt.args, &out)
			text := resultText(res)
			if tt.wantError != "" {
				if !res.IsError || !strings.Contains(text, tt.wantError) {
					t.Fatalf("isError=%v %q, want %q", res.IsError, text, tt.wantError)
				}
				return
			}
			if res.IsError || out.Valid != tt.wantValid || out.Rows != tt.wantRows {
				t.Fatalf("isError=%v valid=%v rows=%d: %s", res.IsError, out.Valid, out.Rows, text)
			}
			if !tt.wantValid && (len(out.Errors) == 0 || out.Errors[0].Message == "") {
				t.Fatalf("no errors listed: %s", text)
			}
		})
	}
}

func TestSchemasResourceAndPrompt(t *testing.T) {
	f := newDataClient(t)
	req := mcpgo.ReadResourceRequest{}
	req.Params.URI = "sandbox://schemas"
	res, err := f.c.ReadResource(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Schemas []validate.NamedSchema `json:"schemas"`
	}
	if err := json.Unmarshal([]byte(res.Contents[0].(mcpgo.TextResourceContents).Text), &list); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range list.Schemas {
		names[s.Name] = json.Valid(s.Schema)
	}
	if !names["config"] || !names["user"] || !names["dataset"] {
		t.Errorf("schemas: %v", names)
	}

	p := mcpgo.GetPromptRequest{}
	p.Params.Name = "diagnose_validation_error"
	p.Params.Arguments = map[string]string{"validation_result": `{"valid": false, "errors": [{"instance_location": "/age", "message": "/age: maximum: got 200, want 150"}]}`, "data": `{"age": 200}`}
	pr, err := f.c.GetPrompt(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	text := pr.Messages[0].Content.(mcpgo.TextContent).Text
	for _, want := range []string{"/age", `{"age": 200}`, "corrected data"} {
		if !strings.Contains(text, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
	p.Params.Arguments = nil
	if _, err := f.c.GetPrompt(t.Context(), p); err == nil {
		t.Error("prompt without validation_result succeeded")
	}
}

func TestNoDatabaseConfigured(t *testing.T) {
	qdb, _ := querydb.New("", nil, querydb.Options{})
	c, err := client.NewInProcessClient(NewServer(Config{QueryDB: qdb, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Start(t.Context())
	init := mcpgo.InitializeRequest{}
	init.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	if _, err := c.Initialize(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	f := dataFixture{c: c}
	res := f.call(t, "query_db", map[string]any{"sql": "SELECT 1"}, nil)
	if !res.IsError || !strings.Contains(resultText(res), "--db") {
		t.Fatalf("%v %s", res.IsError, resultText(res))
	}
}

// TestDataTextEscapesNames: database, table, column and index names come
// from files a run wrote, CSV headers and JSON keys from the data; the data
// tools' text prints them escaped (issue 12 item 3).
func TestDataTextEscapesNames(t *testing.T) {
	f := newDataClient(t)
	dbName := "evil\u202egnp.db"
	db, err := sql.Open("sqlite3", filepath.Join(f.ws, dbName))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"CREATE TABLE \"t\nview fake (1 rows)\" (\"a\x1b[2Jb\" INTEGER PRIMARY KEY, \"c\u2066d\" TEXT DEFAULT 'x\ry')",
		"CREATE INDEX \"ix\u202e\" ON \"t\nview fake (1 rows)\" (\"c\u2066d\")",
		"INSERT INTO \"t\nview fake (1 rows)\" VALUES (1, 'v\x1b]0;t\x07')",
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	calls := []struct {
		name string
		res  *mcpgo.CallToolResult
		has  []string
	}{
		{"describe_schema", f.call(t, "describe_schema", map[string]any{"database": dbName}, nil),
			[]string{textName(dbName), textName("t\nview fake (1 rows)"), textName("a\x1b[2Jb"), textName("ix\u202e")}},
		{"query_db", f.call(t, "query_db", map[string]any{"database": dbName, "sql": "SELECT * FROM \"t\nview fake (1 rows)\""}, nil),
			[]string{`a\x1b[2Jb | c\u2066d`, `v\x1b]0;t\a`}},
		{"validate_csv_data", f.call(t, "validate_csv_data", map[string]any{
			"csv_content": "\"h\u202e1\",\"h\n2\"\n1,x\n", "type_constraints": map[string]any{"h\n2": "integer"}}, nil),
			[]string{textName("h\u202e1"), textName("h\n2")}},
		{"validate_json_data", f.call(t, "validate_json_data", map[string]any{
			"data": map[string]any{"k\x1b[2J\u202e": 1}, "schema": map[string]any{"additionalProperties": map[string]any{"type": "string"}}}, nil),
			[]string{`k\x1b[2J\u202e`}},
	}
	// An error quoting the caller's table name.
	if res := f.call(t, "query_db", map[string]any{"sql": "SELECT * FROM \"x\x1b[2J\u202e\""}, nil); !res.IsError || !safeText(resultText(res)) {
		t.Errorf("query_db of a missing table: error %v, text %q", res.IsError, resultText(res))
	}
	for _, c := range calls {
		got := resultText(c.res)
		if c.res.IsError {
			t.Errorf("%s: %s", c.name, got)
			continue
		}
		if !safeText(got) {
			t.Errorf("%s: text holds a control or format character:\n%q", c.name, got)
		}
		for _, h := range c.has {
			if !strings.Contains(got, h) {
				t.Errorf("%s: text lacks %s:\n%s", c.name, h, got)
			}
		}
	}
}
