package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit/store/querydb"
	"github.com/sandpit-dev/sandpit/store/validate"
)

// QueryDB answers read-only SQL. *querydb.Engine implements it. database
// is "" for the configured database, else a workspace path.
type QueryDB interface {
	DescribeSchema(ctx context.Context, database string) (*querydb.Schema, error)
	Query(ctx context.Context, database, sql string, params any, maxRows int) (*querydb.Result, error)
}

// Validator checks JSON against schemas and CSV against constraints, each
// call within its limits. *validate.Registry implements it.
type Validator interface {
	List() []validate.NamedSchema
	Limits() validate.Limits
	ValidateJSON(ctx context.Context, ref validate.SchemaRef, data io.Reader, jsonl bool, maxErrors int) (*validate.JSONResult, error)
	ValidateCSV(ctx context.Context, data io.Reader, opts validate.CSVOptions) (*validate.CSVResult, error)
}

// addDataTools registers the SQL and validation tools whose dependency is
// set; validate_csv_data needs none and comes with the validator.
func addDataTools(s *server.MCPServer, cfg Config) {
	if cfg.QueryDB != nil {
		s.AddTool(describeSchemaTool(cfg))
		s.AddTool(queryDBTool(cfg))
	}
	if cfg.Validator != nil {
		s.AddTool(validateJSONTool(cfg))
		s.AddTool(validateCSVTool(cfg))
		s.AddResource(mcpgo.NewResource("sandbox://schemas", "schemas",
			mcpgo.WithResourceDescription("The named JSON Schemas validate_json_data accepts, with each schema's JSON."),
			mcpgo.WithMIMEType("application/json"),
		), func(ctx context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
			return jsonContents(req.Params.URI, map[string]any{"schemas": cfg.Validator.List()})
		})
		s.AddPrompt(diagnosePrompt())
	}
}

// Opener opens workspace files for the data tools' path arguments.
// *workspace.Workspace implements it.
type Opener interface {
	// OpenFile opens the regular file at the workspace path rel for
	// reading. It must not follow a path by name after checking it (a
	// running program may swap a symlink in), must not block on a FIFO,
	// and must refuse anything but a regular file, checked on the
	// descriptor. Its errors name rel, never a host path.
	OpenFile(rel string) (*os.File, error)
}

// openWorkspaceFile opens a workspace file for reading through cfg.Opener.
func (cfg Config) openWorkspaceFile(path string) (*os.File, error) {
	if cfg.Opener == nil {
		return nil, argErrorf("path needs a workspace, and this server has none: pass the content inline")
	}
	return cfg.Opener.OpenFile(path)
}

// DescribeSchemaArgs are describe_schema's arguments.
type DescribeSchemaArgs struct {
	Database string `json:"database,omitempty" jsonschema:"a .db/.sqlite file in the workspace; omit for the configured database"`
}

func describeSchemaTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("describe_schema",
		mcpgo.WithDescription("Describe the read-only SQLite database: its tables and views with columns (name, declared type, not-null, default, primary key), indexes, foreign keys and row counts. Call this before writing SQL for query_db."),
		mcpgo.WithInputSchema[DescribeSchemaArgs](),
		mcpgo.WithOutputSchema[querydb.Schema](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a DescribeSchemaArgs) (any, string, error) {
		sch, err := cfg.QueryDB.DescribeSchema(ctx, a.Database)
		if err != nil {
			return nil, "", err
		}
		return sch, formatSchema(sch), nil
	})
}

func formatSchema(s *querydb.Schema) string {
	var b strings.Builder
	fmt.Fprintf(&b, "database %s: %d tables and views\n", textName(filepath.Base(s.Database)), len(s.Tables)+s.MoreTables)
	for _, t := range s.Tables {
		count := t.RowCountNote
		if t.RowCount != nil {
			count = fmt.Sprintf("%d rows", *t.RowCount)
		}
		fmt.Fprintf(&b, "\n%s %s (%s)\n", t.Type, textName(t.Name), count)
		for _, c := range t.Columns {
			var flags []string
			if c.PrimaryKey > 0 {
				flags = append(flags, "PRIMARY KEY")
			}
			if c.NotNull {
				flags = append(flags, "NOT NULL")
			}
			if c.Default != nil {
				flags = append(flags, "DEFAULT "+textLine(*c.Default))
			}
			fmt.Fprintf(&b, "  %s %s %s\n", textName(c.Name), textLine(c.Type), strings.Join(flags, " "))
		}
		for _, ix := range t.Indexes {
			u := ""
			if ix.Unique {
				u = "unique "
			}
			fmt.Fprintf(&b, "  %sindex %s %s\n", u, textName(ix.Name), nameTuple(ix.Columns))
		}
		if t.MoreColumns > 0 {
			fmt.Fprintf(&b, "  ... and %d more columns (PRAGMA table_xinfo lists them)\n", t.MoreColumns)
		}
		for _, fk := range t.ForeignKeys {
			fmt.Fprintf(&b, "  foreign key %s references %s %s\n", nameTuple(fk.Columns), textName(fk.Table), nameTuple(fk.To))
		}
		if t.Error != "" {
			fmt.Fprintf(&b, "  (incomplete: %s)\n", textLine(t.Error))
		}
	}
	if s.MoreTables > 0 {
		fmt.Fprintf(&b, "\n... and %d more tables and views not described (query sqlite_schema for their names)\n", s.MoreTables)
	}
	if s.Note != "" {
		fmt.Fprintf(&b, "incomplete: %s\n", textLine(s.Note))
	}
	return b.String()
}

// nameTuple prints SQL column names as (a, b), each through textName.
func nameTuple(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = textName(n)
	}
	return "(" + strings.Join(q, ", ") + ")"
}

// QueryDBArgs are query_db's arguments.
type QueryDBArgs struct {
	SQL      string `json:"sql" jsonschema:"exactly one read-only statement: SELECT, WITH, VALUES, EXPLAIN or a read-only PRAGMA"`
	Params   any    `json:"params,omitempty" jsonschema:"values for placeholders: an array for ? placeholders, or an object for :name placeholders; never put values into the SQL text"`
	MaxRows  int    `json:"max_rows,omitempty" jsonschema:"most rows to return (default 100)"`
	Database string `json:"database,omitempty" jsonschema:"a .db/.sqlite file in the workspace; omit for the configured database"`
}

// QueryDBResult is query_db's structured output.
type QueryDBResult struct {
	Columns     []string `json:"columns"`
	Rows        [][]any  `json:"rows" jsonschema:"one array per row, in column order; blobs as X'hex'"`
	RowCount    int      `json:"row_count"`
	Truncated   bool     `json:"truncated" jsonschema:"true when more rows exist than were returned"`
	TruncatedBy string   `json:"truncated_by,omitempty" jsonschema:"max_rows or max_bytes"`
	DurationMS  int64    `json:"duration_ms"`
}

func queryDBTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("query_db",
		mcpgo.WithDescription("Run one read-only SQL statement on the SQLite database and return the columns and rows. Writes (INSERT, UPDATE, DELETE, CREATE, DROP, ATTACH, VACUUM, writing PRAGMAs) are refused, and so is more than one statement. Pass values through params, not string formatting. Queries are cut off by a time limit and by row and size caps; use describe_schema first to see the tables."),
		mcpgo.WithInputSchema[QueryDBArgs](),
		nonBlank("sql"),
		mcpgo.WithOutputSchema[QueryDBResult](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a QueryDBArgs) (any, string, error) {
		res, err := cfg.QueryDB.Query(ctx, a.Database, a.SQL, a.Params, a.MaxRows)
		if err != nil {
			return nil, "", err
		}
		out := QueryDBResult{Columns: res.Columns, Rows: res.Rows, RowCount: res.RowCount,
			Truncated: res.Truncated, TruncatedBy: res.TruncatedBy, DurationMS: res.Duration.Milliseconds()}
		return out, formatRows(out, res.MaxRows), nil
	})
}

// formatRows renders a plain-text table for clients that ignore
// structured content.
func formatRows(r QueryDBResult, maxRows int) string {
	const cellMax = 60
	cell := func(v any) string {
		s := "NULL"
		if v != nil {
			s = fmt.Sprint(v)
		}
		s = strings.ReplaceAll(textLine(s), "|", `\|`) // one line, and no column of its own
		if utf8.RuneCountInString(s) > cellMax {
			s = string([]rune(s)[:cellMax-1]) + "…"
		}
		return s
	}
	var b strings.Builder
	header := make([]string, len(r.Columns))
	for i, c := range r.Columns {
		header[i] = cell(c)
	}
	b.WriteString(strings.Join(header, " | "))
	b.WriteString("\n")
	for _, row := range r.Rows {
		cells := make([]string, len(row))
		for i, v := range row {
			cells[i] = cell(v)
		}
		b.WriteString(strings.Join(cells, " | "))
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "(%d rows in %d ms", r.RowCount, r.DurationMS)
	switch r.TruncatedBy {
	case "max_rows":
		fmt.Fprintf(&b, "; truncated at max_rows=%d: more rows exist, add a LIMIT/WHERE or raise max_rows", maxRows)
	case "max_bytes":
		b.WriteString("; truncated: the result hit the size cap, select fewer or narrower columns")
	}
	b.WriteString(")\n")
	return b.String()
}

// ValidateJSONArgs are validate_json_data's arguments.
type ValidateJSONArgs struct {
	Data             any    `json:"data,omitempty" jsonschema:"the document to validate: a JSON value, or a string holding JSON text (JSONL text when format is jsonl)"`
	Path             string `json:"path,omitempty" jsonschema:"a .json or .jsonl file in the workspace, instead of data"`
	Format           string `json:"format,omitempty" jsonschema:"json or jsonl (one document per line); default from the path's extension, else json"`
	Schema           any    `json:"schema,omitempty" jsonschema:"a registered schema name (see sandbox://schemas: config, user, dataset, ...) or an inline JSON Schema object"`
	SchemaNameOrDict any    `json:"schema_name_or_dict,omitempty" jsonschema:"alias of schema"`
	SchemaPath       string `json:"schema_path,omitempty" jsonschema:"a JSON Schema file in the workspace, instead of schema"`
	MaxErrors        int    `json:"max_errors,omitempty" jsonschema:"most errors to list (default 50); error_count still counts all"`
}

func validateJSONTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("validate_json_data",
		mcpgo.WithDescription("Validate JSON (or JSONL, every line) against a JSON Schema (draft 2020-12 by default; older drafts via $schema): a registered schema by name, an inline schema object, or a schema file. Each error gives the JSON Pointer of the failing value, the schema keyword that failed, a message and, for JSONL, the line. Remote $refs are never fetched."),
		mcpgo.WithInputSchema[ValidateJSONArgs](),
		mcpgo.WithOutputSchema[validate.JSONResult](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a ValidateJSONArgs) (any, string, error) {
		res, err := cfg.validateJSON(ctx, a)
		if err != nil {
			return nil, "", err
		}
		return res, formatJSONResult(res), nil
	})
}

func (cfg Config) validateJSON(ctx context.Context, a ValidateJSONArgs) (*validate.JSONResult, error) {
	var ref validate.SchemaRef
	schema := a.Schema
	if schema == nil {
		schema = a.SchemaNameOrDict
	} else if a.SchemaNameOrDict != nil {
		return nil, argErrorf("give schema or schema_name_or_dict, not both")
	}
	switch s := schema.(type) {
	case nil:
		if a.SchemaPath == "" {
			return nil, argErrorf("schema is required: a registered name (see sandbox://schemas), an inline schema object, or schema_path")
		}
	case string:
		ref.Name = s
	case map[string]any, bool:
		ref.Inline = s
	default:
		return nil, argErrorf("schema must be a name or a JSON Schema object, got %T", s)
	}
	if a.SchemaPath != "" {
		if schema != nil {
			return nil, argErrorf("give schema or schema_path, not both")
		}
		if cfg.Opener == nil {
			return nil, argErrorf("schema_path needs a workspace, and this server has none: pass the schema inline")
		}
		ref.Path, ref.Open = a.SchemaPath, cfg.Opener.OpenFile
	}
	format := strings.ToLower(a.Format)
	switch {
	case format == "" && (strings.HasSuffix(a.Path, ".jsonl") || strings.HasSuffix(a.Path, ".ndjson")):
		format = "jsonl"
	case format == "":
		format = "json"
	case format == "ndjson":
		format = "jsonl"
	case format != "json" && format != "jsonl":
		return nil, argErrorf("format must be json or jsonl, got %q", a.Format)
	}
	var data io.Reader
	switch {
	case a.Path != "" && a.Data != nil:
		return nil, argErrorf("give data or path, not both")
	case a.Path != "":
		f, err := cfg.openWorkspaceFile(a.Path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		data = f
	case a.Data == nil:
		return nil, argErrorf("data is required: the JSON to validate (or path, a workspace file)")
	default:
		max := cfg.Validator.Limits().MaxDocumentBytes
		if s, ok := a.Data.(string); ok {
			if format == "json" && len(s) > max {
				return nil, fmt.Errorf("%w: data is %d bytes; a document may be at most %d (hint: write it to the workspace as JSONL and pass path)", validate.ErrTooLarge, len(s), max)
			}
			data = strings.NewReader(s)
		} else {
			if format == "jsonl" {
				return nil, argErrorf("format jsonl needs data as a string with one JSON document per line")
			}
			b, err := json.Marshal(a.Data)
			if err != nil {
				return nil, argErrorf("data: %v", err)
			}
			if len(b) > max {
				return nil, fmt.Errorf("%w: data is %d bytes as JSON; a document may be at most %d", validate.ErrTooLarge, len(b), max)
			}
			data = bytes.NewReader(b)
		}
	}
	return cfg.Validator.ValidateJSON(ctx, ref, data, format == "jsonl", a.MaxErrors)
}

func formatJSONResult(r *validate.JSONResult) string {
	var b strings.Builder
	if r.Valid {
		fmt.Fprintf(&b, "valid: %d document(s) match the schema\n", r.Records)
		return b.String()
	}
	fmt.Fprintf(&b, "invalid: %d of %d document(s) fail, %d error(s)\n", r.Invalid, r.Records, r.ErrorCount)
	for _, e := range r.Errors {
		if e.Line > 0 {
			fmt.Fprintf(&b, "line %d: ", e.Line)
		}
		fmt.Fprintf(&b, "%s [schema %s]\n", textLine(e.Message), textLine(e.SchemaLocation))
	}
	if r.Truncated {
		fmt.Fprintf(&b, "... %d more error(s) not listed\n", r.ErrorCount-len(r.Errors))
	}
	if r.Stopped != "" {
		fmt.Fprintf(&b, "incomplete: %s\n", textLine(r.Stopped))
	}
	return b.String()
}

// ValidateCSVArgs are validate_csv_data's arguments.
type ValidateCSVArgs struct {
	CSVContent      string         `json:"csv_content,omitempty" jsonschema:"the CSV text; give this or path"`
	Path            string         `json:"path,omitempty" jsonschema:"a CSV file in the workspace, streamed (any size)"`
	RequiredHeaders []string       `json:"required_headers,omitempty" jsonschema:"headers that must be present"`
	TypeConstraints map[string]any `json:"type_constraints,omitempty" jsonschema:"column name to a type name (integer, number, boolean, date, datetime, string, enum) or an object: {type, format (e.g. %Y-%m-%d), pattern (regex), enum (list), not_null, unique, min, max}"`
	Delimiter       string         `json:"delimiter,omitempty" jsonschema:"field separator, one character (default ,); use \\t for tabs"`
	Quote           string         `json:"quote,omitempty" jsonschema:"quote character; only \" is supported"`
	HasHeader       *bool          `json:"has_header,omitempty" jsonschema:"whether the first row is a header (default true); without one, columns are column1, column2, ..."`
	LazyQuotes      bool           `json:"lazy_quotes,omitempty" jsonschema:"accept stray quotes inside fields"`
	AllowUnexpected *bool          `json:"allow_unexpected_headers,omitempty" jsonschema:"whether headers that are neither required nor constrained are fine (default true)"`
	NullValues      []string       `json:"null_values,omitempty" jsonschema:"values that count as null (default: only the empty string)"`
	MaxRows         int            `json:"max_rows,omitempty" jsonschema:"the most data rows the file may have"`
	MaxErrors       int            `json:"max_errors,omitempty" jsonschema:"most errors to list (default 50); error_count still counts all"`
}

func validateCSVTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("validate_csv_data",
		mcpgo.WithDescription("Validate CSV text or a workspace CSV file (streamed, any size): required headers, per-column types (integer, number, boolean, date with format, datetime, string with pattern, enum), not_null, unique, min/max, max rows; bad quoting and invalid UTF-8 are reported. Returns valid, the row count, a per-column summary (inferred type, nulls, distinct values) and errors with row, column and message."),
		mcpgo.WithInputSchema[ValidateCSVArgs](),
		mcpgo.WithOutputSchema[validate.CSVResult](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a ValidateCSVArgs) (any, string, error) {
		res, err := cfg.validateCSV(ctx, a)
		if err != nil {
			return nil, "", err
		}
		return res, formatCSVResult(res), nil
	})
}

func (cfg Config) validateCSV(ctx context.Context, a ValidateCSVArgs) (*validate.CSVResult, error) {
	opts := validate.CSVOptions{
		RequiredHeaders:  a.RequiredHeaders,
		NoHeader:         a.HasHeader != nil && !*a.HasHeader,
		LazyQuotes:       a.LazyQuotes,
		RejectUnexpected: a.AllowUnexpected != nil && !*a.AllowUnexpected,
		NullValues:       a.NullValues,
		MaxRows:          a.MaxRows,
		MaxErrors:        a.MaxErrors,
	}
	for _, o := range []struct {
		name, v string
		dst     *rune
	}{{"delimiter", a.Delimiter, &opts.Delimiter}, {"quote", a.Quote, &opts.Quote}} {
		v := o.v
		if v == `\t` {
			v = "\t"
		}
		if v == "" {
			continue
		}
		if utf8.RuneCountInString(v) != 1 {
			return nil, argErrorf("%s must be one character, got %q", o.name, o.v)
		}
		*o.dst, _ = utf8.DecodeRuneInString(v)
	}
	if len(a.TypeConstraints) > 0 {
		// Round-trip through JSON so a bare type name and an object both
		// decode (validate.Constraint accepts either).
		b, _ := json.Marshal(a.TypeConstraints)
		if err := json.Unmarshal(b, &opts.Columns); err != nil {
			return nil, argErrorf("type_constraints: each value must be a type name or an object like {\"type\": \"integer\", \"min\": 0}: %v", err)
		}
	}
	var data io.Reader
	switch {
	case a.Path != "" && a.CSVContent != "":
		return nil, argErrorf("give csv_content or path, not both")
	case a.Path != "":
		f, err := cfg.openWorkspaceFile(a.Path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		data = f
	case a.CSVContent == "":
		return nil, argErrorf("csv_content is required: the CSV text (or path, a workspace file)")
	default:
		data = strings.NewReader(a.CSVContent)
	}
	return cfg.Validator.ValidateCSV(ctx, data, opts)
}

func formatCSVResult(r *validate.CSVResult) string {
	var b strings.Builder
	state := "valid"
	if !r.Valid {
		state = fmt.Sprintf("invalid (%d errors)", r.ErrorCount)
	}
	fmt.Fprintf(&b, "%s: %d data rows, %d columns\n", state, r.Rows, len(r.Headers))
	for i, c := range r.Columns {
		if i == maxColumnsShown {
			fmt.Fprintf(&b, "  ... and %d more columns (in the structured result)\n", len(r.Columns)-i)
			break
		}
		approx := ""
		if !c.DistinctExact {
			approx = "~"
		}
		fmt.Fprintf(&b, "  %s: %s, %d null, %s%d distinct\n", textName(c.Name), c.InferredType, c.Nulls, approx, c.Distinct)
	}
	for _, e := range r.Errors {
		switch {
		case e.Row > 0 && e.Column != "":
			fmt.Fprintf(&b, "row %d, column %s: ", e.Row, textName(e.Column))
		case e.Row > 0:
			fmt.Fprintf(&b, "row %d: ", e.Row)
		case e.Column != "":
			fmt.Fprintf(&b, "column %s: ", textName(e.Column))
		}
		b.WriteString(textLine(e.Message))
		if e.Value != "" {
			fmt.Fprintf(&b, " (value %q)", e.Value)
		}
		b.WriteString("\n")
	}
	if r.Truncated {
		fmt.Fprintf(&b, "... %d more error(s) not listed\n", r.ErrorCount-len(r.Errors))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", textLine(n))
	}
	if r.Stopped != "" {
		fmt.Fprintf(&b, "incomplete: %s\n", textLine(r.Stopped))
	}
	return b.String()
}

// maxColumnsShown bounds the column summaries in validate_csv_data's text.
const maxColumnsShown = 100

func diagnosePrompt() (mcpgo.Prompt, server.PromptHandlerFunc) {
	p := mcpgo.NewPrompt("diagnose_validation_error",
		mcpgo.WithPromptDescription("Explain each error of a validate_json_data or validate_csv_data result and produce corrected data."),
		mcpgo.WithArgument("validation_result", mcpgo.RequiredArgument(), mcpgo.ArgumentDescription("the result returned by validate_json_data or validate_csv_data (JSON or text)")),
		mcpgo.WithArgument("data", mcpgo.ArgumentDescription("the data that was validated, or the workspace path it came from")),
		mcpgo.WithArgument("schema", mcpgo.ArgumentDescription("the schema name, schema JSON or CSV constraints used")),
	)
	return p, func(ctx context.Context, req mcpgo.GetPromptRequest) (*mcpgo.GetPromptResult, error) {
		res := strings.TrimSpace(req.Params.Arguments["validation_result"])
		if res == "" {
			return nil, fmt.Errorf("validation_result is required: paste the result of validate_json_data or validate_csv_data")
		}
		var b strings.Builder
		b.WriteString("A data validation failed. Diagnose it and fix the data.\n\n")
		b.WriteString("Validation result:\n```\n" + res + "\n```\n\n")
		if d := req.Params.Arguments["data"]; d != "" {
			b.WriteString("The data that was validated:\n```\n" + d + "\n```\n\n")
		}
		if s := req.Params.Arguments["schema"]; s != "" {
			b.WriteString("The schema or constraints:\n```\n" + s + "\n```\n\n")
		}
		b.WriteString(`For each error, in order:
1. Say where it is (the JSON Pointer in instance_location, or the CSV row and column, or the JSONL line).
2. Say which rule failed (schema_location names the keyword, e.g. /properties/age/minimum) and why the value breaks it, in one sentence.
3. Give the corrected value. If the right value cannot be known from the data (a missing required field, an ambiguous date), say so and propose a clearly marked placeholder rather than inventing one.

Then output the complete corrected data in its original format (JSON, JSONL or CSV), changing nothing that was not in error. If error_count is larger than the errors listed (truncated), say that more errors exist, fix the pattern they share, and re-run the validator on the corrected data to confirm it is valid.`)
		return mcpgo.NewGetPromptResult("Diagnose validation errors",
			[]mcpgo.PromptMessage{mcpgo.NewPromptMessage(mcpgo.RoleUser, mcpgo.NewTextContent(b.String()))}), nil
	}
}
