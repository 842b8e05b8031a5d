package querydb

import (
	"context"
	"database/sql/driver"
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
	SQL          string `json:"sql,omitempty" jsonschema:"the CREATE statement"`
	Error        string `json:"error,omitempty" jsonschema:"why part of this table could not be described"`
}

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
// Counting is bounded by Options.CountTimeout per table and
// Options.CountBudget in all; a count cut short is reported, not an error.
// It runs through the same guarded path as Query.
func (e *Engine) DescribeSchema(ctx context.Context, database string) (*Schema, error) {
	db, release, err := e.handle(database)
	if err != nil {
		return nil, err
	}
	defer release()
	name := database
	if name == "" {
		name = e.path
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, classify(err, nil)
	}
	defer conn.Close()
	out := &Schema{Database: name, Tables: []Table{}}
	err = conn.Raw(func(dc any) error {
		return e.describe(ctx, dc.(*sqlite3.SQLiteConn), out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (e *Engine) describe(ctx context.Context, c *sqlite3.SQLiteConn, out *Schema) error {
	q := func(ctx context.Context, stmt string, args ...any) (*Result, error) {
		named := make([]driver.NamedValue, len(args))
		for i, a := range args {
			named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
		}
		ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
		defer cancel()
		return e.run(ctx, c, stmt, named, e.opts.MaxRows)
	}
	objs, err := q(ctx, `SELECT type, name, coalesce(sql, '') FROM sqlite_schema
		WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY type, name`)
	if err != nil {
		return err
	}
	budget := time.Now().Add(e.opts.CountBudget)
	for _, o := range objs.Rows {
		t := Table{Type: o[0].(string), Name: o[1].(string), SQL: o[2].(string), Columns: []Column{}}
		if t.Type == "table" && strings.HasPrefix(strings.ToUpper(strings.TrimSpace(t.SQL)), "CREATE VIRTUAL") {
			t.Type = "virtual"
		}
		quoted := `"` + strings.ReplaceAll(t.Name, `"`, `""`) + `"`
		cols, err := q(ctx, "PRAGMA table_xinfo("+quoted+")")
		if err != nil {
			t.Error = err.Error()
			out.Tables = append(out.Tables, t)
			continue
		}
		// cid, name, type, notnull, dflt_value, pk, hidden
		for _, r := range cols.Rows {
			col := Column{Name: str(r[1]), Type: str(r[2]), NotNull: num(r[3]) != 0, PrimaryKey: int(num(r[5])), Hidden: num(r[6]) != 0}
			if r[4] != nil {
				d := str(r[4])
				col.Default = &d
			}
			t.Columns = append(t.Columns, col)
		}
		if t.Type == "table" {
			if err := describeKeys(ctx, q, quoted, &t); err != nil {
				t.Error = err.Error()
			}
		}
		if t.Type != "table" {
			t.RowCountNote = "not counted: counting a " + t.Type + " runs its query"
		} else if left := time.Until(budget); left <= 0 {
			t.RowCountNote = "not counted: the time budget for counting rows was spent on earlier tables"
		} else {
			cctx, cancel := context.WithTimeout(ctx, min(left, e.opts.CountTimeout))
			r, err := q(cctx, "SELECT count(*) FROM "+quoted)
			cancel()
			switch {
			case err == nil:
				n := num(r.Rows[0][0])
				t.RowCount = &n
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.Is(cctx.Err(), context.DeadlineExceeded):
				t.RowCountNote = fmt.Sprintf("not counted: counting took longer than %s", min(left, e.opts.CountTimeout))
			default:
				t.RowCountNote = "not counted: " + err.Error()
			}
		}
		out.Tables = append(out.Tables, t)
	}
	return nil
}

func describeKeys(ctx context.Context, q func(context.Context, string, ...any) (*Result, error), quoted string, t *Table) error {
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
		t.Indexes = append(t.Indexes, ix)
	}
	fks, err := q(ctx, "PRAGMA foreign_key_list("+quoted+")")
	if err != nil {
		return err
	}
	// id, seq, table, from, to, on_update, on_delete, match
	byID := map[int64]int{}
	for _, r := range fks.Rows {
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
