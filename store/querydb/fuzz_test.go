package querydb

import (
	"database/sql"
	"reflect"
	"strings"
	"testing"
	"unicode"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// sqliteStatements prepares text statement by statement with SQLite's own
// parser and counts the non-empty statements it finds. It stops at the
// first error, which it returns with the count so far.
//
// go-sqlite3 does not export a statement's tail, so this test-only helper
// reads the unexported field; a rename in go-sqlite3 makes it fail loudly.
func sqliteStatements(t *testing.T, c *sqlite3.SQLiteConn, text string) (int, error) {
	n := 0
	for text != "" {
		ds, err := c.Prepare(text)
		if err != nil {
			return n, err
		}
		v := reflect.ValueOf(ds).Elem()
		tail, handle := v.FieldByName("t"), v.FieldByName("s")
		if !tail.IsValid() || !handle.IsValid() {
			t.Fatal("go-sqlite3's SQLiteStmt no longer has fields s and t: update this test")
		}
		if !handle.IsNil() {
			n++
		}
		// go-sqlite3 trims the tail with strings.TrimSpace; put back the
		// trailing whitespace, which can matter ("/* " is a comment, "/*"
		// a slash). Leading whitespace never changes how SQLite tokenizes.
		next := tail.String()
		if next != "" {
			end := len(strings.TrimRightFunc(text, unicode.IsSpace))
			next = text[end-len(next):]
		}
		ds.Close()
		if next == text {
			t.Fatalf("SQLite made no progress on %q", text)
		}
		text = next
	}
	return n, nil
}

// FuzzSingleStatement checks splitStatement against SQLite: the guard never
// panics, what it accepts holds exactly one statement as SQLite parses it
// (or SQLite rejects the first statement, so nothing runs), and the
// statement it returns is a prefix of the input.
func FuzzSingleStatement(f *testing.F) {
	for _, s := range []string{
		"SELECT 1",
		"SELECT 1;",
		"SELECT 1; -- done",
		"SELECT 1; DROP TABLE t",
		"SELECT 'a;b' FROM t",
		`SELECT "a;b" FROM t`,
		"SELECT [a;b] FROM t",
		"SELECT `a;b` FROM t",
		"SELECT 1 -- ;\n; SELECT 2",
		"SELECT 1 /* ; */",
		"SELECT $a(;)",
		"SELECT $a(');DROP TABLE t;--')",
		"SELECT :a::b(;x)",
		"SELECT x'00';",
		"SELECT 1e-5, .5, 0x1f, 1_000",
		"WITH c AS (SELECT 1) SELECT * FROM c",
		"SELECT 1; /*",
		"SELECT 1 /",
		"SELECT '';''",
		"CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END",
		"SELECT 1\v; SELECT 2",
	} {
		f.Add(s)
	}
	db, err := sql.Open("sqlite3", ":memory:")
	if err != nil {
		f.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("CREATE TABLE t (a, b, c)"); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		stmt, _, err := splitStatement(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(s, stmt) || stmt == "" {
			t.Fatalf("splitStatement(%q) = %q: not a non-empty prefix", s, stmt)
		}
		conn, err := db.Conn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Raw(func(dc any) error {
			c := dc.(*sqlite3.SQLiteConn)
			// Only prepare, never step: nothing here runs.
			if n, err := sqliteStatements(t, c, s); n > 1 || (n == 1 && err != nil) {
				t.Errorf("accepted %q, but SQLite sees %d statements (then err %v)", s, n, err)
			}
			if n, err := sqliteStatements(t, c, stmt); n > 1 || (n == 1 && err != nil) {
				t.Errorf("statement %q of %q: SQLite sees %d statements (then err %v)", stmt, s, n, err)
			}
			return nil
		})
	})
}
