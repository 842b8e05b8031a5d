package querydb

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/sandpit-dev/sandpit"
)

// Result is one query's answer.
type Result struct {
	Columns   []string `json:"columns"`
	Rows      [][]any  `json:"rows"`
	RowCount  int      `json:"row_count"`
	Truncated bool     `json:"truncated"`
	// TruncatedBy says which cap stopped the read: "max_rows" or "max_bytes".
	TruncatedBy string        `json:"truncated_by,omitempty"`
	MaxRows     int           `json:"max_rows"`
	Duration    time.Duration `json:"-"`
}

// readKeywords are the statements a query may start with. The authorizer
// and sqlite3_stmt_readonly decide what actually runs; this list exists to
// refuse obvious writes with a plain reason before SQLite parses them.
var readKeywords = map[string]bool{"SELECT": true, "WITH": true, "VALUES": true, "EXPLAIN": true, "PRAGMA": true}

// Query runs one read-only statement against database ("" for the
// configured one, else a workspace path). params binds by position (a
// []any) or by name (a map[string]any, matching :name, @name or $name);
// values are never formatted into the SQL. maxRows 0 takes the default and
// is capped at Options.MaxRows.
func (e *Engine) Query(ctx context.Context, database, query string, params any, maxRows int) (*Result, error) {
	start := time.Now()
	if len(query) > e.opts.MaxSQLBytes {
		return nil, sandpit.WithHint(fmt.Errorf("%w: the SQL is %d bytes; at most %d are accepted", ErrTooLarge, len(query), e.opts.MaxSQLBytes), "pass long lists through params, or filter with a subquery")
	}
	stmt, keyword, err := splitStatement(query)
	if err != nil {
		return nil, err
	}
	if !readKeywords[keyword] {
		if keyword == "" {
			keyword = "a non-keyword"
		}
		return nil, fmt.Errorf("%w: the statement starts with %s; only SELECT, WITH, VALUES, EXPLAIN and read-only PRAGMA statements run here", ErrRefused, keyword)
	}
	args, err := bindArgs(stmt, params)
	if err != nil {
		return nil, err
	}
	switch {
	case maxRows < 0:
		return nil, fmt.Errorf("%w: max_rows must be positive, got %d", ErrParams, maxRows)
	case maxRows == 0:
		maxRows = e.opts.DefaultRows
	case maxRows > e.opts.MaxRows:
		maxRows = e.opts.MaxRows
	}
	// One deadline for the whole call: copying a workspace database,
	// preparing the statement and reading its rows.
	qctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancel()
	conn, release, err := e.handle(qctx, database)
	if err != nil {
		return nil, e.timeoutOr(ctx, qctx, err)
	}
	defer release()
	var res *Result
	err = conn.Raw(func(dc any) error {
		var err error
		res, err = e.run(qctx, dc.(*sqlite3.SQLiteConn), stmt, args, maxRows)
		return err
	})
	if err != nil {
		return nil, e.timeoutOr(ctx, qctx, err)
	}
	res.Duration = time.Since(start)
	return res, nil
}

// timeoutOr turns an interruption caused by the query's own deadline into
// ErrTimeout; a cancelled caller gets its context's error.
func (e *Engine) timeoutOr(parent, qctx context.Context, err error) error {
	if parent.Err() != nil {
		return parent.Err()
	}
	if errors.Is(qctx.Err(), context.DeadlineExceeded) && !errors.Is(err, ErrTooLarge) {
		return sandpit.WithHint(fmt.Errorf("%w: the query ran longer than %s and was interrupted", ErrTimeout, e.opts.Timeout), "add a LIMIT, filter with WHERE on indexed columns, avoid cartesian joins, unbounded recursive CTEs and deeply nested views")
	}
	return err
}

// run prepares exactly one statement on a hardened connection, checks that
// it cannot write, and reads at most maxRows rows and MaxBytes bytes. ctx
// bounds all of it, prepare included.
func (e *Engine) run(ctx context.Context, c *sqlite3.SQLiteConn, stmt string, args []driver.NamedValue, maxRows int) (*Result, error) {
	return e.runBudget(ctx, c, stmt, args, maxRows, e.opts.MaxBytes)
}

func (e *Engine) runBudget(ctx context.Context, c *sqlite3.SQLiteConn, stmt string, args []driver.NamedValue, maxRows, maxBytes int) (_ *Result, retErr error) {
	defer charge()() // first in, last out: everything below is charged
	trimIfPending()
	defer func() {
		if retErr != nil {
			trimPending.Store(true)
		}
	}()
	auth := newAuthorizer()
	c.RegisterAuthorizer(auth.check)
	c.SetLimit(sqlite3.SQLITE_LIMIT_LENGTH, e.opts.MaxValueBytes)
	c.SetLimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, e.opts.MaxSQLBytes)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stop := watch(ctx, c)
	defer stop()
	ds, err := c.Prepare(stmt)
	if err != nil {
		return nil, e.classify(err, auth)
	}
	defer ds.Close()
	st := ds.(*sqlite3.SQLiteStmt)
	if !st.Readonly() {
		return nil, fmt.Errorf("%w: SQLite reports that this statement would write (VACUUM, VACUUM INTO, PRAGMA journal_mode and the like are not reads)", ErrRefused)
	}
	if len(args) > 0 && args[0].Name == "" && len(args) != st.NumInput() {
		return nil, fmt.Errorf("%w: the statement has %d placeholder(s) but %d positional param(s) were given", ErrParams, st.NumInput(), len(args))
	}
	if len(args) == 0 && st.NumInput() > 0 {
		return nil, fmt.Errorf("%w: the statement has %d placeholder(s) but no params were given: pass params as an array (for ?) or an object (for :name)", ErrParams, st.NumInput())
	}
	rows, err := st.QueryContext(ctx, args)
	if err != nil {
		return nil, e.classify(err, auth)
	}
	defer rows.Close()

	res := &Result{Columns: rows.Columns(), Rows: [][]any{}, MaxRows: maxRows}
	size := 2
	for _, c := range res.Columns {
		size += len(c) + 3
	}
	dest := make([]driver.Value, len(res.Columns))
	for {
		err := rows.Next(dest)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, e.classify(err, auth)
		}
		if len(res.Rows) == maxRows {
			res.Truncated, res.TruncatedBy = true, "max_rows"
			break
		}
		// Size the row from the values' lengths before encoding any of
		// them: a blob's hex text is twice its size, and nothing past the
		// budget is ever encoded.
		rowSize, fits := 2+len(dest), true
		for _, v := range dest {
			rowSize += valueSize(v)
			if size+rowSize > maxBytes {
				fits = false
				break
			}
		}
		if !fits {
			res.Truncated, res.TruncatedBy = true, "max_bytes"
			break
		}
		size += rowSize
		row := make([]any, len(dest))
		for i, v := range dest {
			row[i] = jsonValue(v)
		}
		res.Rows = append(res.Rows, row)
	}
	res.RowCount = len(res.Rows)
	return res, nil
}

// jsonValue makes a SQLite value JSON-friendly: blobs become SQL hex
// literals (X'0A1B'), times their RFC 3339 text.
func jsonValue(v driver.Value) any {
	switch v := v.(type) {
	case []byte:
		const digits = "0123456789ABCDEF"
		b := make([]byte, 0, 2*len(v)+3)
		b = append(b, 'X', '\'')
		for _, c := range v {
			b = append(b, digits[c>>4], digits[c&15])
		}
		return string(append(b, '\''))
	case time.Time:
		return v.Format(time.RFC3339Nano)
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return fmt.Sprint(v) // JSON has no Inf or NaN
		}
	}
	return v
}

// valueSize approximates a value's size in the JSON result.
func valueSize(v driver.Value) int {
	switch v := v.(type) {
	case string:
		return len(v) + 3
	case []byte:
		return 2*len(v) + 5
	case nil:
		return 5
	}
	return 24
}

// bindArgs turns JSON-decoded params into driver values: a []any binds by
// position, a map by name. Whole numbers become integers so that LIMIT ?
// and integer comparisons behave.
func bindArgs(stmt string, params any) ([]driver.NamedValue, error) {
	switch p := params.(type) {
	case nil:
		return nil, nil
	case []any:
		args := make([]driver.NamedValue, len(p))
		for i, v := range p {
			dv, err := driverValue(v)
			if err != nil {
				return nil, fmt.Errorf("%w: params[%d]: %v", ErrParams, i, err)
			}
			args[i] = driver.NamedValue{Ordinal: i + 1, Value: dv}
		}
		return args, nil
	case map[string]any:
		vars := statementVariables(stmt)
		if vars["?"] {
			return nil, fmt.Errorf("%w: params is an object, but the statement uses ? placeholders: use :name placeholders, or pass params as an array", ErrParams)
		}
		args := make([]driver.NamedValue, 0, len(p))
		seen := map[string]bool{}
		for name, v := range p {
			bare := strings.TrimLeft(name, ":@$")
			if !vars[bare] {
				return nil, fmt.Errorf("%w: params has %q but the statement has no :%s placeholder", ErrParams, name, bare)
			}
			dv, err := driverValue(v)
			if err != nil {
				return nil, fmt.Errorf("%w: params[%q]: %v", ErrParams, name, err)
			}
			seen[bare] = true
			args = append(args, driver.NamedValue{Name: bare, Ordinal: len(args) + 1, Value: dv})
		}
		for v := range vars {
			if !seen[v] {
				return nil, fmt.Errorf("%w: the statement has :%s but params has no %q", ErrParams, v, v)
			}
		}
		return args, nil
	}
	return nil, fmt.Errorf("%w: params must be an array (for ? placeholders) or an object (for :name placeholders), got %T", ErrParams, params)
}

func driverValue(v any) (driver.Value, error) {
	switch v := v.(type) {
	case nil, string, bool, int64:
		return v, nil
	case int:
		return int64(v), nil
	case float64:
		if v == math.Trunc(v) && math.Abs(v) <= 1<<53 {
			return int64(v), nil
		}
		return v, nil
	}
	return nil, fmt.Errorf("a parameter must be a string, number, boolean or null, got %T", v)
}

// statementVariables lists the names of :name, @name and $name variables,
// and "?" when the statement has positional placeholders.
func statementVariables(stmt string) map[string]bool {
	vars := map[string]bool{}
	for i := 0; i < len(stmt); {
		n, _ := nextToken(stmt[i:])
		switch stmt[i] {
		case '?':
			vars["?"] = true
		case ':', '@', '$':
			if n > 1 {
				vars[stmt[i+1:i+n]] = true
			}
		}
		i += n
	}
	return vars
}

// classify maps a SQLite error to this package's classes, saying what the
// memory limit is when SQLite ran out of it.
func (e *Engine) classify(err error, auth *authorizer) error {
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrNomem {
		return sandpit.WithHint(fmt.Errorf("%w: the query needed more memory than the %d MiB queries may use in this server", ErrTooLarge, e.opts.MaxMemoryBytes>>20), "add a LIMIT, select fewer or narrower columns, sort and group on indexed columns, avoid deeply nested views")
	}
	return classify(err, auth)
}

// classify maps a SQLite error to this package's classes. auth, when set,
// supplies the authorizer's reason for an SQLITE_AUTH failure.
func classify(err error, auth *authorizer) error {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return err
	}
	// A denied function fails with SQLITE_ERROR, not SQLITE_AUTH: trust the
	// authorizer's record over the code.
	if auth != nil {
		if reason := auth.denied(); reason != "" {
			return fmt.Errorf("%w: %s", ErrRefused, reason)
		}
	}
	switch se.Code {
	case sqlite3.ErrAuth:
		return fmt.Errorf("%w: %s", ErrRefused, se.Error())
	case sqlite3.ErrReadonly:
		return fmt.Errorf("%w: %s", ErrRefused, se.Error())
	case sqlite3.ErrTooBig:
		return sandpit.WithHint(fmt.Errorf("%w: a string or blob grew past the per-value size limit or length() of large values instead of the values)", ErrTooLarge), "select substr(")
	case sqlite3.ErrInterrupt:
		return fmt.Errorf("%w: the query was interrupted", ErrTimeout)
	case sqlite3.ErrNotADB, sqlite3.ErrCorrupt, sqlite3.ErrCantOpen:
		return fmt.Errorf("%w: %s", ErrDatabasePath, se.Error())
	}
	return fmt.Errorf("%w: %s", ErrSQL, se.Error())
}
