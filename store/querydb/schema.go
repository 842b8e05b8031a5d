package querydb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// Schema describes a database's tables and views.
type Schema struct {
	Database string  `json:"database" jsonschema:"the configured database or the workspace path queried"`
	Tables   []Table `json:"tables"`
	// MoreTables counts the tables and views not described: past the
	// object or byte budget, or after the time limit (Note says which).
	MoreTables int    `json:"more_tables,omitempty" jsonschema:"tables and views that exist but are not described here; query sqlite_schema for their names"`
	Truncated  bool   `json:"truncated,omitempty" jsonschema:"true when tables, columns or CREATE statements were left out"`
	Note       string `json:"note,omitempty" jsonschema:"why the description is incomplete"`
}

// Table is one table or view.
type Table struct {
	Name        string       `json:"name"`
	Type        string       `json:"type" jsonschema:"table, view or virtual"`
	Columns     []Column     `json:"columns"`
	Indexes     []Index      `json:"indexes,omitempty"`
	ForeignKeys []ForeignKey `json:"foreign_keys,omitempty"`
	// RowCount is nil when not counted: views, virtual tables, or a count
	// that took too long (RowCountNote says which).
	RowCount     *int64 `json:"row_count,omitempty"`
	RowCountNote string `json:"row_count_note,omitempty"`
	SQL          string `json:"sql,omitempty" jsonschema:"the CREATE statement (its start only, when long)"`
	// MoreColumns counts the columns not listed, past the byte budget.
	MoreColumns int    `json:"more_columns,omitempty" jsonschema:"columns not listed; PRAGMA table_xinfo lists them"`
	Error       string `json:"error,omitempty" jsonschema:"why part of this table could not be described"`
}

// schemaSQLBytes is how much of each CREATE statement is shown;
// schemaReadBytes, how much one statement of DescribeSchema may read.
const (
	schemaSQLBytes  = 2048
	schemaReadBytes = 4 << 20
)

// Column is one column as declared.
type Column struct {
	Name    string  `json:"name"`
	Type    string  `json:"type" jsonschema:"declared type, empty when none"`
	NotNull bool    `json:"not_null"`
	Default *string `json:"default,omitempty" jsonschema:"the default's SQL expression"`
	// PrimaryKey is the column's 1-based position in the primary key, 0 when
	// it is not part of it.
	PrimaryKey int  `json:"primary_key,omitempty"`
	Hidden     bool `json:"hidden,omitempty" jsonschema:"a hidden or generated column"`
}

// Index is one index on a table.
type Index struct {
	Name    string   `json:"name"`
	Unique  bool     `json:"unique"`
	Origin  string   `json:"origin" jsonschema:"c: CREATE INDEX, u: UNIQUE constraint, pk: PRIMARY KEY"`
	Partial bool     `json:"partial,omitempty"`
	Columns []string `json:"columns"`
}

// ForeignKey is one foreign key constraint.
type ForeignKey struct {
	Columns  []string `json:"columns"`
	Table    string   `json:"references_table"`
	To       []string `json:"references_columns"`
	OnUpdate string   `json:"on_update,omitempty"`
	OnDelete string   `json:"on_delete,omitempty"`
}

// DescribeSchema lists the tables and views of database ("" for the
// configured one) with their columns, indexes, foreign keys and row counts.
// The whole call has one deadline (Options.SchemaTimeout) and an output
// budget (Options.SchemaMaxObjects, Options.SchemaMaxBytes); what is left
// out is counted in MoreTables and MoreColumns. Counting is bounded by
// Options.CountTimeout per table and Options.CountBudget in all; a count cut
// short is reported, not an error. It runs through the same guarded path as
// Query.
func (e *Engine) DescribeSchema(ctx context.Context, database string) (*Schema, error) {
	sctx, cancel := context.WithTimeout(ctx, e.opts.SchemaTimeout)
	defer cancel()
	conn, release, err := e.handle(sctx, database)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(sctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: opening the database took longer than %s", ErrTimeout, e.opts.SchemaTimeout)
		}
		return nil, err
	}
	defer release()
	name := database
	if name == "" {
		name = e.path
	}
	out := &Schema{Database: name, Tables: []Table{}}
	err = conn.Raw(func(dc any) error {
		return e.describe(sctx, dc.(*sqlite3.SQLiteConn), out)
	})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, e.timeoutOr(ctx, sctx, err)
	}
	return out, nil
}

// schemaBudget tracks DescribeSchema's output size.
type schemaBudget struct{ left int }

// take spends n bytes and reports whether they fit.
func (b *schemaBudget) take(n int) bool {
	if n > b.left {
		b.left = 0
		return false
	}
	b.left -= n
	return true
}

func (e *Engine) describe(ctx context.Context, c *sqlite3.SQLiteConn, out *Schema) error {
	budget := &schemaBudget{left: e.opts.SchemaMaxBytes}
	// Each statement reads at most what SQLite's limits let a schema hold
	// (2000 columns a table); the output budget decides what is kept.
	q := func(ctx context.Context, stmt string) (*Result, error) {
		ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
		defer cancel()
		return e.runBudget(ctx, c, stmt, nil, e.opts.MaxRows, schemaReadBytes)
	}
	const filter = `FROM sqlite_schema WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`
	total, err := q(ctx, "SELECT count(*) "+filter)
	if err != nil {
		return err
	}
	objs, err := q(ctx, fmt.Sprintf(`SELECT type, name, substr(coalesce(sql, ''), 1, %d), length(sql) %s ORDER BY type, name LIMIT %d`,
		schemaSQLBytes, filter, e.opts.SchemaMaxObjects))
	if err != nil {
		return err
	}
	out.MoreTables = int(num(total.Rows[0][0]))
	stopped := func(why string) {
		out.Truncated = true
		if out.Note == "" {
			out.Note = why
		}
	}
	if objs.Truncated {
		stopped(fmt.Sprintf("the names of the tables and views alone exceed the %d-byte budget", e.opts.SchemaMaxBytes))
	}
	countBudget := time.Now().Add(e.opts.CountBudget)
	for _, o := range objs.Rows {
		if ctx.Err() != nil {
			stopped(fmt.Sprintf("the time limit of %s for describe_schema was reached", e.opts.SchemaTimeout))
			break
		}
		t := Table{Type: str(o[0]), Name: str(o[1]), SQL: str(o[2]), Columns: []Column{}}
		if n := int(num(o[3])); n > len(t.SQL) {
			t.SQL += fmt.Sprintf("… (%d more bytes)", n-len(t.SQL))
		}
		if !budget.take(len(t.Name) + len(t.SQL) + 80) {
			stopped(fmt.Sprintf("the output budget of %d bytes was spent", e.opts.SchemaMaxBytes))
			break
		}
		out.MoreTables--
		if t.Type == "table" && strings.HasPrefix(strings.ToUpper(strings.TrimSpace(t.SQL)), "CREATE VIRTUAL") {
			t.Type = "virtual"
		}
		quoted := `"` + strings.ReplaceAll(t.Name, `"`, `""`) + `"`
		cols, err := q(ctx, "PRAGMA table_xinfo("+quoted+")")
		if err != nil {
			t.Error = e.timeoutOr(ctx, ctx, err).Error()
			out.Tables = append(out.Tables, t)
			continue
		}
		// cid, name, type, notnull, dflt_value, pk, hidden
		for i, r := range cols.Rows {
			col := Column{Name: str(r[1]), Type: str(r[2]), NotNull: num(r[3]) != 0, PrimaryKey: int(num(r[5])), Hidden: num(r[6]) != 0}
			size := len(col.Name) + len(col.Type) + 40
			if r[4] != nil {
				d := str(r[4])
				col.Default = &d
				size += len(d)
			}
			if !budget.take(size) {
				t.MoreColumns = len(cols.Rows) - i
				stopped(fmt.Sprintf("the output budget of %d bytes was spent", e.opts.SchemaMaxBytes))
				break
			}
			t.Columns = append(t.Columns, col)
		}
		if t.Type == "table" && budget.left > 0 {
			if err := describeKeys(ctx, q, quoted, &t, budget); err != nil {
				t.Error = err.Error()
			}
		}
		switch {
		case t.Type != "table":
			t.RowCountNote = "not counted: counting a " + t.Type + " runs its query"
		case budget.left == 0:
			t.RowCountNote = "not counted: the output budget was spent"
		case time.Until(countBudget) <= 0:
			t.RowCountNote = "not counted: the time budget for counting rows was spent on earlier tables"
		default:
			left := time.Until(countBudget)
			cctx, cancel := context.WithTimeout(ctx, min(left, e.opts.CountTimeout))
			r, err := q(cctx, "SELECT count(*) FROM "+quoted)
			cancel()
			switch {
			case err == nil:
				n := num(r.Rows[0][0])
				t.RowCount = &n
			case ctx.Err() != nil:
				t.RowCountNote = "not counted: the time limit for describe_schema was reached"
			case errors.Is(cctx.Err(), context.DeadlineExceeded):
				t.RowCountNote = fmt.Sprintf("not counted: counting took longer than %s", min(left, e.opts.CountTimeout))
			default:
				t.RowCountNote = "not counted: " + err.Error()
			}
		}
		out.Tables = append(out.Tables, t)
		if budget.left == 0 {
			break
		}
	}
	if out.MoreTables > 0 && out.Note == "" {
		stopped(fmt.Sprintf("only the first %d tables and views are described", e.opts.SchemaMaxObjects))
	}
	return nil
}

func describeKeys(ctx context.Context, q func(context.Context, string) (*Result, error), quoted string, t *Table, budget *schemaBudget) error {
	idx, err := q(ctx, "PRAGMA index_list("+quoted+")")
	if err != nil {
		return err
	}
	// seq, name, unique, origin, partial
	for _, r := range idx.Rows {
		ix := Index{Name: str(r[1]), Unique: num(r[2]) != 0, Origin: str(r[3]), Partial: num(r[4]) != 0, Columns: []string{}}
		info, err := q(ctx, `PRAGMA index_info("`+strings.ReplaceAll(ix.Name, `"`, `""`)+`")`)
		if err != nil {
			return err
		}
		for _, c := range info.Rows { // seqno, cid, name (NULL for expressions)
			name := str(c[2])
			if c[2] == nil {
				name = "<expression>"
			}
			ix.Columns = append(ix.Columns, name)
		}
		size := len(ix.Name) + 60
		for _, c := range ix.Columns {
			size += len(c) + 3
		}
		if !budget.take(size) {
			return fmt.Errorf("indexes and foreign keys left out: the output budget was spent")
		}
		t.Indexes = append(t.Indexes, ix)
	}
	fks, err := q(ctx, "PRAGMA foreign_key_list("+quoted+")")
	if err != nil {
		return err
	}
	// id, seq, table, from, to, on_update, on_delete, match
	byID := map[int64]int{}
	for _, r := range fks.Rows {
		if !budget.take(len(str(r[2])) + len(str(r[3])) + len(str(r[4])) + 40) {
			return fmt.Errorf("foreign keys left out: the output budget was spent")
		}
		id := num(r[0])
		i, ok := byID[id]
		if !ok {
			i = len(t.ForeignKeys)
			byID[id] = i
			t.ForeignKeys = append(t.ForeignKeys, ForeignKey{Table: str(r[2]), OnUpdate: str(r[5]), OnDelete: str(r[6])})
		}
		fk := &t.ForeignKeys[i]
		fk.Columns = append(fk.Columns, str(r[3]))
		fk.To = append(fk.To, str(r[4])) // empty: the parent's primary key
	}
	return nil
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func num(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case float64:
		return int64(v)
	}
	return 0
}
