package querydb

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// fixture writes a small shop database with the plain (writable) driver and
// returns its path.
func fixture(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "shop.db")
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stmts := []string{
		`CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT UNIQUE, tier TEXT DEFAULT 'free')`,
		`CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE, amount REAL, note BLOB)`,
		`CREATE INDEX orders_user ON orders(user_id)`,
		`CREATE VIEW big_spenders AS SELECT u.name, sum(o.amount) AS total FROM users u JOIN orders o ON o.user_id = u.id GROUP BY u.id HAVING total > 100`,
		`CREATE TABLE nums (n INTEGER)`,
		`WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM c WHERE n < 1000) INSERT INTO nums SELECT n FROM c`,
		`INSERT INTO users (id, name, email, tier) VALUES (1, 'ada', 'ada@example.com', 'pro'), (2, 'bob', 'bob@example.com', 'free'), (3, 'cy', NULL, 'free')`,
		`INSERT INTO orders (user_id, amount, note) VALUES (1, 99.5, x'00ff'), (1, 20, NULL), (2, 5, NULL)`,
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return path
}

func hashFile(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func newEngine(t *testing.T, path string, opts Options) *Engine {
	t.Helper()
	e, err := New(path, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestAttacks(t *testing.T) {
	dir := t.TempDir()
	path := fixture(t, dir)
	before := hashFile(t, path)
	// Only the endless query is meant to meet the time limit; the others
	// run with it out of the way, so that a loaded host cannot turn a
	// refusal or a cut into a timeout.
	opts := Options{Timeout: testenv.Patience, MaxRows: 1000, MaxBytes: 1 << 20, MaxValueBytes: 1 << 20}
	e := newEngine(t, path, opts)
	short := opts
	short.Timeout = 300 * time.Millisecond
	eShort := newEngine(t, path, short)
	other := filepath.Join(dir, "other.db")
	vacuumed := filepath.Join(dir, "copy.db")

	tests := []struct {
		name    string
		sql     string
		wantErr error  // nil: the query must be cut off instead
		wantCut string // TruncatedBy when wantErr is nil
	}{
		{"drop", `DROP TABLE users`, ErrRefused, ""},
		{"delete", `DELETE FROM users`, ErrRefused, ""},
		{"update", `UPDATE users SET name = 'x'`, ErrRefused, ""},
		{"insert", `INSERT INTO users (name) VALUES ('mallory')`, ErrRefused, ""},
		{"cte delete", `WITH x AS (SELECT 1) DELETE FROM users`, ErrRefused, ""},
		{"create", `CREATE TABLE t (x)`, ErrRefused, ""},
		{"alter", `ALTER TABLE users ADD COLUMN pwned`, ErrRefused, ""},
		{"stacked drop", `SELECT 1; DROP TABLE users`, ErrMultipleStatements, ""},
		{"stacked after comment", "SELECT 1 -- ; harmless\n; DROP TABLE users", ErrMultipleStatements, ""},
		{"stacked after block comment", "SELECT 1 /* ; */; DELETE FROM users", ErrMultipleStatements, ""},
		{"stacked after string with ;", `SELECT 'a;b'; DROP TABLE users`, ErrMultipleStatements, ""},
		{"stacked after identifier with ;", `SELECT "a;b" FROM (SELECT 1 AS "a;b"); DROP TABLE users`, ErrMultipleStatements, ""},
		{"stacked after tcl variable", `SELECT $a(');DROP TABLE users;--')`, ErrMultipleStatements, ""},
		{"stacked select", `SELECT 1; SELECT 2`, ErrMultipleStatements, ""},
		{"nul byte", "SELECT 1\x00; DROP TABLE users", ErrRefused, ""},
		{"attach", `ATTACH '` + other + `' AS x`, ErrRefused, ""},
		{"detach", `DETACH main`, ErrRefused, ""},
		{"vacuum", `VACUUM`, ErrRefused, ""},
		{"vacuum into", `VACUUM INTO '` + vacuumed + `'`, ErrRefused, ""},
		{"writable_schema", `PRAGMA writable_schema=1`, ErrRefused, ""},
		{"journal_mode", `PRAGMA journal_mode=DELETE`, ErrRefused, ""},
		{"query_only off", `PRAGMA query_only=0`, ErrRefused, ""},
		{"user_version set", `PRAGMA user_version=7`, ErrRefused, ""},
		{"load_extension", `SELECT load_extension('/tmp/evil.so')`, ErrRefused, ""},
		{"create temp table", `CREATE TEMP TABLE t AS SELECT 1`, ErrRefused, ""},
		{"create temp view", `CREATE TEMP VIEW v AS SELECT 1`, ErrRefused, ""},
		{"create temp trigger", `CREATE TEMP TRIGGER tr AFTER INSERT ON users BEGIN SELECT 1; END`, ErrMultipleStatements, ""},
		{"begin", `BEGIN`, ErrRefused, ""},
		{"savepoint", `SAVEPOINT s`, ErrRefused, ""},
		{"reindex", `REINDEX`, ErrRefused, ""},
		{"analyze", `ANALYZE`, ErrRefused, ""},
		{"endless recursive cte", `WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM c) SELECT count(*) FROM c`, ErrTimeout, ""},
		{"billion-row cartesian join", `SELECT a.n, b.n, c.n FROM nums a, nums b, nums c`, nil, "max_rows"},
		{"huge blob", `SELECT randomblob(1000000000)`, ErrTooLarge, ""},
		{"huge zeroblob", `SELECT zeroblob(1000000000)`, ErrTooLarge, ""},
		{"rows past the byte cap", `SELECT a.n, hex(randomblob(1000)) FROM nums a, nums b`, nil, "max_bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := e
			if errors.Is(tt.wantErr, ErrTimeout) {
				e = eShort
			}
			res, err := e.Query(t.Context(), "", tt.sql, nil, 1000)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Query(%q) = %v, %v; want %v", tt.sql, res, err, tt.wantErr)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("Query(%q): %v", tt.sql, err)
			}
			if !res.Truncated || res.TruncatedBy != tt.wantCut {
				t.Fatalf("Query(%q) truncated=%v by %q; want by %q", tt.sql, res.Truncated, res.TruncatedBy, tt.wantCut)
			}
		})
	}
	if after := hashFile(t, path); after != before {
		t.Fatal("the database file changed")
	}
	for _, p := range []string{other, vacuumed} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after the attacks (err %v)", p, err)
		}
	}
	// The database still answers after every attack.
	res, err := e.Query(t.Context(), "", `SELECT count(*) FROM users`, nil, 0)
	if err != nil || res.Rows[0][0] != int64(3) {
		t.Fatalf("after attacks: %v, %v", res, err)
	}
}

// TestLayers runs writes straight at a hardened connection, skipping the
// statement guard, to show that each lower layer refuses on its own.
func TestLayers(t *testing.T) {
	path := fixture(t, t.TempDir())
	before := hashFile(t, path)
	e := newEngine(t, path, Options{})
	writes := []string{
		`DROP TABLE users`,
		`DELETE FROM users`,
		`INSERT INTO users (name) VALUES ('x')`,
		`CREATE TABLE t (x)`,
		`VACUUM INTO '` + filepath.Join(t.TempDir(), "x.db") + `'`,
		`PRAGMA journal_mode=WAL`,
		`PRAGMA writable_schema=1`,
		`ATTACH '` + filepath.Join(t.TempDir(), "a.db") + `' AS a`,
		`CREATE TEMP TABLE t AS SELECT 1`,
		`BEGIN IMMEDIATE`,
		`SELECT load_extension('/nonexistent.so')`,
	}
	// Not writes to the file, so only the authorizer is expected to stop them.
	authorizerOnly := map[string]bool{`PRAGMA writable_schema=1`: true, `CREATE TEMP TABLE t AS SELECT 1`: true, `BEGIN IMMEDIATE`: true}
	layers := []struct {
		name  string
		setup func(c *sqlite3.SQLiteConn)
	}{
		{"authorizer and readonly check", func(*sqlite3.SQLiteConn) {}},
		// With the authorizer gone, query_only and mode=ro still hold.
		{"no authorizer", func(c *sqlite3.SQLiteConn) { c.RegisterAuthorizer(nil) }},
	}
	for _, l := range layers {
		for _, w := range writes {
			t.Run(l.name+"/"+w, func(t *testing.T) {
				conn, err := e.db.Conn(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				err = conn.Raw(func(dc any) error {
					c := dc.(*sqlite3.SQLiteConn)
					if l.name == "no authorizer" {
						if authorizerOnly[w] {
							return errors.New("skipped: not a write to the database file")
						}
						// run installs its own authorizer, so go below it.
						l.setup(c)
						_, err := c.Exec(w, nil)
						return err
					}
					_, err := e.run(t.Context(), c, w, nil, 10)
					return err
				})
				if err == nil {
					t.Fatalf("%s: write accepted", w)
				}
				t.Logf("%v", err)
			})
		}
	}
	if hashFile(t, path) != before {
		t.Fatal("the database file changed")
	}
}

func TestQuery(t *testing.T) {
	path := fixture(t, t.TempDir())
	e := newEngine(t, path, Options{})
	tests := []struct {
		name     string
		sql      string
		params   any
		wantCols []string
		wantRows [][]any
	}{
		{"select", `SELECT id, name FROM users ORDER BY id`, nil,
			[]string{"id", "name"}, [][]any{{int64(1), "ada"}, {int64(2), "bob"}, {int64(3), "cy"}}},
		{"trailing semicolon and comment", "SELECT 1 AS one; -- done\n", nil,
			[]string{"one"}, [][]any{{int64(1)}}},
		{"with", `WITH t AS (SELECT name FROM users WHERE tier = 'pro') SELECT * FROM t`, nil,
			[]string{"name"}, [][]any{{"ada"}}},
		{"join and aggregate", `SELECT u.name, count(o.id) AS n, sum(o.amount) AS total FROM users u LEFT JOIN orders o ON o.user_id = u.id GROUP BY u.id ORDER BY u.id`, nil,
			[]string{"name", "n", "total"}, [][]any{{"ada", int64(2), 119.5}, {"bob", int64(1), 5.0}, {"cy", int64(0), nil}}},
		{"view", `SELECT * FROM big_spenders`, nil,
			[]string{"name", "total"}, [][]any{{"ada", 119.5}}},
		{"positional params", `SELECT name FROM users WHERE id > ? AND tier = ? ORDER BY id LIMIT ?`, []any{1.0, "free", 1.0},
			[]string{"name"}, [][]any{{"bob"}}},
		{"named params", `SELECT name FROM users WHERE tier = :tier AND id >= @min ORDER BY id`, map[string]any{"tier": "free", ":min": 3.0},
			[]string{"name"}, [][]any{{"cy"}}},
		{"injection stays data", `SELECT count(*) AS n FROM users WHERE name = ?`, []any{"x'; DROP TABLE users; --"},
			[]string{"n"}, [][]any{{int64(0)}}},
		{"blob", `SELECT note FROM orders WHERE note IS NOT NULL`, nil,
			[]string{"note"}, [][]any{{"X'00FF'"}}},
		{"read pragma", `PRAGMA table_info(nums)`, nil,
			[]string{"cid", "name", "type", "notnull", "dflt_value", "pk"}, [][]any{{int64(0), "n", "INTEGER", int64(0), nil, int64(0)}}},
		{"values", `VALUES (1, 'a')`, nil, []string{"column1", "column2"}, [][]any{{int64(1), "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := e.Query(t.Context(), "", tt.sql, tt.params, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := strings.Join(res.Columns, ","), strings.Join(tt.wantCols, ","); got != want {
				t.Errorf("columns = %s, want %s", got, want)
			}
			if len(res.Rows) != len(tt.wantRows) || res.RowCount != len(tt.wantRows) {
				t.Fatalf("rows = %v (count %d), want %v", res.Rows, res.RowCount, tt.wantRows)
			}
			for i := range res.Rows {
				for j := range res.Rows[i] {
					if got, want := res.Rows[i][j], tt.wantRows[i][j]; got != want {
						t.Errorf("row %d col %d = %#v, want %#v", i, j, got, want)
					}
				}
			}
			if res.Truncated {
				t.Error("truncated")
			}
		})
	}
}

func TestQueryErrors(t *testing.T) {
	path := fixture(t, t.TempDir())
	e := newEngine(t, path, Options{MaxRows: 50})
	tests := []struct {
		name    string
		sql     string
		params  any
		wantErr error
	}{
		{"syntax", `SELEC 1`, nil, ErrRefused},
		{"unknown table", `SELECT * FROM nope`, nil, ErrSQL},
		{"empty", "  -- nothing\n", nil, ErrEmpty},
		{"missing params", `SELECT ?`, nil, ErrParams},
		{"too many params", `SELECT ?`, []any{1.0, 2.0}, ErrParams},
		{"unknown name", `SELECT :a`, map[string]any{"b": 1.0}, ErrParams},
		{"unbound name", `SELECT :a, :b`, map[string]any{"a": 1.0}, ErrParams},
		{"object for ?", `SELECT ?`, map[string]any{"a": 1.0}, ErrParams},
		{"nested value", `SELECT ?`, []any{map[string]any{}}, ErrParams},
		{"params of wrong type", `SELECT 1`, "x", ErrParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Query(t.Context(), "", tt.sql, tt.params, 0)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
	t.Run("max_rows is capped", func(t *testing.T) {
		res, err := e.Query(t.Context(), "", `SELECT n FROM nums`, nil, 1_000_000)
		if err != nil {
			t.Fatal(err)
		}
		if res.RowCount != 50 || !res.Truncated || res.MaxRows != 50 {
			t.Fatalf("got %d rows, truncated %v, max %d", res.RowCount, res.Truncated, res.MaxRows)
		}
	})
	t.Run("exact fit is not truncated", func(t *testing.T) {
		res, err := e.Query(t.Context(), "", `SELECT n FROM nums LIMIT 7`, nil, 7)
		if err != nil || res.Truncated || res.RowCount != 7 {
			t.Fatalf("%+v, %v", res, err)
		}
	})
	t.Run("cancelled caller", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := e.Query(ctx, "", `SELECT 1`, nil, 0)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestNoDatabase(t *testing.T) {
	e := newEngine(t, "", Options{})
	_, err := e.Query(t.Context(), "", `SELECT 1`, nil, 0)
	if !errors.Is(err, ErrNoDatabase) || !strings.Contains(sandpit.HintOf(err), "--db") {
		t.Fatalf("Query: %v", err)
	}
	if _, err := e.DescribeSchema(t.Context(), ""); !errors.Is(err, ErrNoDatabase) {
		t.Fatalf("DescribeSchema: %v", err)
	}
	if _, err := e.Query(t.Context(), "data.db", `SELECT 1`, nil, 0); !errors.Is(err, ErrDatabasePath) {
		t.Fatalf("workspace db without resolver: %v", err)
	}
	if _, err := New(filepath.Join(t.TempDir(), "missing.db"), nil, Options{}); !errors.Is(err, ErrDatabasePath) {
		t.Fatalf("New(missing): %v", err)
	}
	notDB := filepath.Join(t.TempDir(), "x.db")
	os.WriteFile(notDB, []byte("this is not a database, just text that is long enough to have a header"), 0o644)
	if _, err := New(notDB, nil, Options{}); err == nil {
		t.Fatal("New(not a database) succeeded")
	}
}

func TestWorkspaceDatabase(t *testing.T) {
	ws := t.TempDir()
	path := fixture(t, ws)
	os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("x"), 0o644)
	before := hashFile(t, path)
	e, err := New("", workspaceOpener(t, ws), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	res, err := e.Query(t.Context(), "shop.db", `SELECT count(*) FROM orders`, nil, 0)
	if err != nil || res.Rows[0][0] != int64(3) {
		t.Fatalf("%v, %v", res, err)
	}
	if _, err := e.Query(t.Context(), "shop.db", `DELETE FROM orders`, nil, 0); !errors.Is(err, ErrRefused) {
		t.Fatalf("delete: %v", err)
	}
	for _, bad := range []string{"notes.txt", "missing.db", "../x.db"} {
		if _, err := e.Query(t.Context(), bad, `SELECT 1`, nil, 0); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	if _, err := e.Query(t.Context(), "", `SELECT 1`, nil, 0); !errors.Is(err, ErrNoDatabase) || !strings.Contains(sandpit.HintOf(err), "workspace") {
		t.Errorf("no configured db: %v", err)
	}
	if hashFile(t, path) != before {
		t.Fatal("the database file changed")
	}
}

func TestDescribeSchema(t *testing.T) {
	path := fixture(t, t.TempDir())
	// The counts are under test, not their 250 ms limit, which a loaded
	// host can outlast (TestDescribeSchemaCountTimeout tests the limit).
	e := newEngine(t, path, Options{CountTimeout: testenv.Patience})
	s, err := e.DescribeSchema(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]Table{}
	for _, tb := range s.Tables {
		tables[tb.Name] = tb
	}
	users, orders, view := tables["users"], tables["orders"], tables["big_spenders"]
	if users.RowCount == nil || *users.RowCount != 3 {
		t.Errorf("users row count = %v", users.RowCount)
	}
	if n := tables["nums"].RowCount; n == nil || *n != 1000 {
		t.Errorf("nums row count = %v", n)
	}
	if view.Type != "view" || view.RowCount != nil || view.RowCountNote == "" || len(view.Columns) != 2 {
		t.Errorf("view = %+v", view)
	}
	wantCols := []Column{
		{Name: "id", Type: "INTEGER", PrimaryKey: 1},
		{Name: "name", Type: "TEXT", NotNull: true},
		{Name: "email", Type: "TEXT"},
		{Name: "tier", Type: "TEXT", Default: ptr("'free'")},
	}
	if len(users.Columns) != len(wantCols) {
		t.Fatalf("users columns = %+v", users.Columns)
	}
	for i, want := range wantCols {
		got := users.Columns[i]
		if got.Name != want.Name || got.Type != want.Type || got.NotNull != want.NotNull || got.PrimaryKey != want.PrimaryKey ||
			(got.Default == nil) != (want.Default == nil) || (got.Default != nil && *got.Default != *want.Default) {
			t.Errorf("column %d = %+v, want %+v", i, got, want)
		}
	}
	if len(users.Indexes) != 1 || !users.Indexes[0].Unique || users.Indexes[0].Origin != "u" || users.Indexes[0].Columns[0] != "email" {
		t.Errorf("users indexes = %+v", users.Indexes)
	}
	if len(orders.Indexes) != 1 || orders.Indexes[0].Name != "orders_user" || orders.Indexes[0].Unique {
		t.Errorf("orders indexes = %+v", orders.Indexes)
	}
	if len(orders.ForeignKeys) != 1 {
		t.Fatalf("orders foreign keys = %+v", orders.ForeignKeys)
	}
	fk := orders.ForeignKeys[0]
	if fk.Table != "users" || fk.Columns[0] != "user_id" || fk.To[0] != "id" || fk.OnDelete != "CASCADE" {
		t.Errorf("foreign key = %+v", fk)
	}
}

func TestDescribeSchemaCountTimeout(t *testing.T) {
	dir := t.TempDir()
	path := fixture(t, dir)
	db, _ := sql.Open("sqlite3", path)
	// A table big enough that counting it outlasts a 1ns budget.
	if _, err := db.Exec(`CREATE TABLE big AS SELECT a.n AS x FROM nums a, nums b LIMIT 200000`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	e := newEngine(t, path, Options{CountTimeout: time.Nanosecond})
	s, err := e.DescribeSchema(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range s.Tables {
		if tb.Name == "big" && (tb.RowCount != nil || !strings.Contains(tb.RowCountNote, "longer than")) {
			t.Errorf("big = count %v, note %q", tb.RowCount, tb.RowCountNote)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// workspaceOpener opens files of the workspace at dir the way serve does.
func workspaceOpener(t testing.TB, dir string) OpenFunc {
	t.Helper()
	ws, err := workspace.Open(dir, workspace.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return ws.OpenFile
}
