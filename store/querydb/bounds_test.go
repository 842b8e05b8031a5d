package querydb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// Regression tests for the review of 2026-11-30 (H4, H5, M7): each input
// here is just past a bound, and the assertions are generous upper bounds
// that the unbounded code exceeded many times over. Memory bounds are 3x
// SQLite's 64 MiB heap limit: resident memory also holds what the C
// allocator keeps after SQLite frees it.

// newWorkspaceEngine serves the workspace at dir (bind fallback: no state
// dir, so a program could write it directly).
func newWorkspaceEngine(t *testing.T, dir string, opts Options) *Engine {
	t.Helper()
	e, err := New("", workspaceOpener(t, dir), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// writeDB creates a database at path with the plain driver.
func writeDB(t testing.TB, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%.80s: %v", s, err)
		}
	}
}

// nestedViews writes views v0..vDepth where v0 tests membership in a
// 3000-element IN list and each vK reads vK-1 twice: preparing vK builds a
// parse tree of 2^K copies of v0 (the review's H5(b)).
func nestedViews(t testing.TB, path string, depth int) {
	in := make([]string, 3000)
	for i := range in {
		in[i] = fmt.Sprint(i)
	}
	stmts := []string{"CREATE VIEW v0 AS SELECT 1 AS x WHERE 1 IN (" + strings.Join(in, ",") + ")"}
	for k := 1; k <= depth; k++ {
		stmts = append(stmts, fmt.Sprintf("CREATE VIEW v%d AS SELECT (SELECT x FROM v%d) + (SELECT x FROM v%d) AS x", k, k-1, k-1))
	}
	writeDB(t, path, stmts...)
}

// H5(a): one row of k 4 MiB blobs was copied into Go and hex-encoded before
// the byte cap was checked (+296 MiB of Go heap for k=16, linear in k).
func TestQueryRowBytesBoundedBeforeEncoding(t *testing.T) {
	// The byte cap is under test: the time limit is out of the way, so a
	// loaded host cannot make the query stop for time instead.
	e := newEngine(t, fixture(t, t.TempDir()), Options{Timeout: testenv.Patience})
	for _, k := range []int{16, 64} {
		t.Run(fmt.Sprintf("%d columns of 4 MiB", k), func(t *testing.T) {
			cols := make([]string, k)
			for i := range cols {
				cols[i] = fmt.Sprintf("zeroblob(%d)", 4<<20)
			}
			var res *Result
			var err error
			p := measure(t, func() { res, err = e.Query(t.Context(), "", "SELECT "+strings.Join(cols, ", "), nil, 0) })
			t.Logf("%s; err=%v", p, err)
			switch {
			case err == nil && (res.RowCount != 0 || res.TruncatedBy != "max_bytes"):
				t.Errorf("got %d rows, truncated by %q; want none, cut by max_bytes", res.RowCount, res.TruncatedBy)
			case err != nil && !errors.Is(err, ErrTooLarge):
				t.Errorf("err = %v, want ErrTooLarge or a result cut by max_bytes", err)
			}
			if limit := int64(192 << 20); p.heap > limit || p.rss > limit {
				t.Errorf("peak %s, want both under %d MiB", p, limit>>20)
			}
		})
	}
}

// H5(b): the time limit did not cover sqlite3_prepare, and a 16 KiB
// database of nested views took 6 s and 1.9 GB at v11, doubling per level.
// SQLite never checks for an interrupt while it expands views, so SQLite's
// heap limit is what stops the expansion, in memory and so in time.
func TestPrepareInterrupted(t *testing.T) {
	dir := t.TempDir()
	nestedViews(t, filepath.Join(dir, "nest.db"), 15)
	const timeout = 500 * time.Millisecond
	for _, view := range []string{"v11", "v15"} {
		t.Run(view, func(t *testing.T) {
			e := newWorkspaceEngine(t, dir, Options{Timeout: timeout})
			start, cpu0 := time.Now(), testenv.CPUTime(t)
			var err error
			p := measure(t, func() { _, err = e.Query(t.Context(), "nest.db", "SELECT x FROM "+view, nil, 0) })
			elapsed, cpu := time.Since(start), testenv.CPUTime(t)-cpu0
			t.Logf("%s in %s, CPU %s (timeout %s), %s: %v", view, elapsed.Round(time.Millisecond), cpu.Round(time.Millisecond), timeout, p, err)
			if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrTooLarge) {
				t.Errorf("err = %v, want ErrTimeout or ErrTooLarge", err)
			}
			// The work it did, not the wall clock a loaded host stretches:
			// the unbounded expansion took 6 s of CPU at v11.
			if cpu > timeout+3*time.Second {
				t.Errorf("took %s of CPU with a %s timeout", cpu, timeout)
			}
			if limit := int64(192 << 20); p.rss > limit {
				t.Errorf("RSS grew by %d MiB, want under %d", p.rss>>20, limit>>20)
			}
		})
	}
}

// The watchdog interrupts a connection from the deadline on, whatever it is
// doing (go-sqlite3 interrupts only a running step of a query it was given
// the context for): here a statement run without any context.
func TestWatchInterrupts(t *testing.T) {
	e := newEngine(t, fixture(t, t.TempDir()), Options{})
	conn, release, err := e.handle(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = conn.Raw(func(dc any) error {
		c := dc.(*sqlite3.SQLiteConn)
		if connHandle(c) == 0 {
			t.Fatal("no sqlite3* behind the connection: go-sqlite3 renamed its field")
		}
		defer watch(ctx, c)()
		_, err := c.Exec("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n) SELECT count(*) FROM n", nil)
		return err
	})
	t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if se := new(sqlite3.Error); !errors.As(err, se) || se.Code != sqlite3.ErrInterrupt {
		t.Fatalf("err = %v, want SQLITE_INTERRUPT", err)
	}
	// The connection is usable afterwards: no interrupt is left pending.
	if err := conn.Raw(func(dc any) error { _, err := dc.(*sqlite3.SQLiteConn).Exec("SELECT 1", nil); return err }); err != nil {
		t.Fatalf("after the interrupt: %v", err)
	}
}

// H5(c): describe_schema had no deadline or output budget: 3000 views of a
// 1000-column table took 12 s and +528 MiB, describing 3,001,000 columns.
func TestDescribeSchemaBounded(t *testing.T) {
	dir := t.TempDir()
	cols := make([]string, 1000)
	for i := range cols {
		cols[i] = fmt.Sprintf("c%04d_%s", i, strings.Repeat("x", 40))
	}
	stmts := []string{"CREATE TABLE w(" + strings.Join(cols, ",") + ")", "BEGIN"}
	for i := range 3000 {
		stmts = append(stmts, fmt.Sprintf("CREATE VIEW v%04d AS SELECT * FROM w", i))
	}
	writeDB(t, filepath.Join(dir, "wide.db"), append(stmts, "COMMIT")...)
	nestedViews(t, filepath.Join(dir, "nest.db"), 14)

	tests := []struct {
		name, db      string
		opts          Options
		wantTruncated bool
		maxCPU        time.Duration
	}{
		// The output budget cuts it short (the time limit is out of the
		// way: a loaded host must not make it stop for time instead).
		{"3000 wide views", "wide.db", Options{Timeout: testenv.Patience}, true, 8 * time.Second},
		// Each deep view fails on its own (memory or time); the others are
		// still described.
		{"nested views v0-v14", "nest.db", Options{Timeout: 500 * time.Millisecond, SchemaTimeout: time.Second}, false, 4 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newWorkspaceEngine(t, dir, tt.opts)
			o := e.Options()
			start, cpu0 := time.Now(), testenv.CPUTime(t)
			var s *Schema
			var err error
			p := measure(t, func() { s, err = e.DescribeSchema(t.Context(), tt.db) })
			elapsed, cpu := time.Since(start), testenv.CPUTime(t)-cpu0
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(s)
			n := 0
			for _, tb := range s.Tables {
				n += len(tb.Columns)
			}
			t.Logf("%s (CPU %s), %d objects and %d columns described, %d more, %d bytes of JSON, %s; note: %s",
				elapsed.Round(time.Millisecond), cpu.Round(time.Millisecond), len(s.Tables), n, s.MoreTables, len(b), p, s.Note)
			// The work it did (the unbounded call took 12 s), not the wall
			// clock a loaded host stretches.
			if cpu > tt.maxCPU {
				t.Errorf("took %s of CPU, want under %s (time limit %s)", cpu, tt.maxCPU, o.SchemaTimeout)
			}
			if len(b) > 2*o.SchemaMaxBytes {
				t.Errorf("%d bytes of JSON, budget %d", len(b), o.SchemaMaxBytes)
			}
			if tt.wantTruncated && (!s.Truncated || s.MoreTables == 0 || s.Note == "") {
				t.Errorf("truncated %v, %d more, note %q: want the rest counted and a note", s.Truncated, s.MoreTables, s.Note)
			}
			for _, tb := range s.Tables {
				if tb.Error != "" {
					t.Logf("%s: %s", tb.Name, tb.Error)
				}
			}
			if limit := int64(192 << 20); p.heap > limit || p.rss > limit {
				t.Errorf("peak %s, want both under %d MiB", p, limit>>20)
			}
		})
	}
}

// M7: mode=ro still let SQLite create wal.db-shm and wal.db-wal beside a WAL
// database in the workspace.
func TestQueryLeavesNoSideFiles(t *testing.T) {
	dir := t.TempDir()
	writeDB(t, filepath.Join(dir, "wal.db"), "PRAGMA journal_mode=WAL", "CREATE TABLE t(x)", "INSERT INTO t VALUES(1)")
	names := func() []string {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, e := range es {
			n = append(n, e.Name())
		}
		return n
	}
	before := names()
	tmp := t.TempDir()
	e := newWorkspaceEngine(t, dir, Options{TempDir: tmp})
	res, err := e.Query(t.Context(), "wal.db", "SELECT x FROM t", nil, 0)
	if err != nil || res.RowCount != 1 {
		t.Fatalf("query: %v, %v", res, err)
	}
	if _, err := e.DescribeSchema(t.Context(), "wal.db"); err != nil {
		t.Fatal(err)
	}
	if after := names(); !slices.Equal(before, after) {
		t.Errorf("workspace before %v, after %v", before, after)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("private copies left behind: %v", left)
	}
}

// M7: an ORDER BY over an endless CTE spilled sorter runs to unlinked temp
// files (119 MiB in 5 s) under /var/tmp.
func TestQueryWritesNoTempFiles(t *testing.T) {
	e := newEngine(t, fixture(t, t.TempDir()), Options{Timeout: time.Second})
	var worst atomic.Int64
	var seen atomic.Value
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			fds, _ := os.ReadDir("/proc/self/fd")
			var sum int64
			for _, fd := range fds {
				target, _ := os.Readlink("/proc/self/fd/" + fd.Name())
				if strings.HasSuffix(target, "(deleted)") {
					if fi, err := os.Stat("/proc/self/fd/" + fd.Name()); err == nil && fi.Mode().IsRegular() {
						sum += fi.Size()
						seen.Store(target)
					}
				}
			}
			worst.Store(max(worst.Load(), sum))
		}
	}()
	_, err := e.Query(t.Context(), "", "WITH RECURSIVE c(x) AS (VALUES(1) UNION ALL SELECT x+1 FROM c) SELECT x, randomblob(64) AS b FROM c ORDER BY b", nil, 0)
	close(stop)
	<-done
	t.Logf("err=%v; largest total of unlinked files held open: %d KiB (%v)", err, worst.Load()>>10, seen.Load())
	if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrTooLarge) {
		t.Errorf("err = %v, want ErrTimeout or ErrTooLarge", err)
	}
	if worst.Load() > 0 {
		t.Errorf("SQLite held %d KiB of temporary files (%v)", worst.Load()>>10, seen.Load())
	}
}

// H4: in the bind fallback a program swaps a workspace directory with a
// symlink to a host directory while query_db opens a database under it. The
// query must never read the host database, and no error may carry a host
// path.
func TestWorkspaceDatabaseSymlinkSwap(t *testing.T) {
	base := t.TempDir()
	host := filepath.Join(base, "host")
	ws := filepath.Join(base, "ws")
	for _, d := range []string{host, filepath.Join(ws, "d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeDB(t, filepath.Join(host, "x.db"), "CREATE TABLE t(v)", "INSERT INTO t VALUES('HOST-SECRET')")
	writeDB(t, filepath.Join(ws, "d", "x.db"), "CREATE TABLE t(v)", "INSERT INTO t VALUES('workspace')")
	link := filepath.Join(ws, ".l")
	if err := os.Symlink(host, link); err != nil {
		t.Fatal(err)
	}
	e := newWorkspaceEngine(t, ws, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	swapped := make(chan struct{})
	go func() { // the program: swap d and the symlink, atomically, in a loop
		defer close(swapped)
		for ctx.Err() == nil {
			unix.Renameat2(unix.AT_FDCWD, link, unix.AT_FDCWD, filepath.Join(ws, "d"), unix.RENAME_EXCHANGE)
		}
	}()
	defer func() { cancel(); <-swapped }()
	const attempts = 20000
	var read, refused int
	for i := range attempts {
		res, err := e.Query(t.Context(), "d/x.db", "SELECT v FROM t", nil, 0)
		if err != nil {
			refused++
			if strings.Contains(err.Error(), base) {
				t.Fatalf("attempt %d: the error names a host path: %v", i, err)
			}
			continue
		}
		read++
		if v := res.Rows[0][0]; v != "workspace" {
			t.Fatalf("attempt %d: read %q from outside the workspace", i, v)
		}
	}
	t.Logf("%d attempts: %d read the workspace database, %d refused", attempts, read, refused)
}

// The SQL text is bounded before it is tokenized or handed to SQLite.
func TestQuerySQLTooLong(t *testing.T) {
	e := newEngine(t, fixture(t, t.TempDir()), Options{})
	sqlText := "SELECT 1 WHERE 1 IN (" + strings.Repeat("1,", 4<<20) + "1)"
	start := time.Now()
	_, err := e.Query(t.Context(), "", sqlText, nil, 0)
	t.Logf("%d bytes refused in %s: %v", len(sqlText), time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

// A workspace database is copied before it is opened, so its size is
// bounded; and files that are not regular are refused without blocking.
func TestWorkspaceDatabaseRefused(t *testing.T) {
	dir := t.TempDir()
	writeDB(t, filepath.Join(dir, "big.db"), "CREATE TABLE t(b)", "INSERT INTO t VALUES(randomblob(200000))")
	if err := unix.Mkfifo(filepath.Join(dir, "fifo.db"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir.db"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A refusal that blocked would end at the time limit, and fail.
	e := newWorkspaceEngine(t, dir, Options{MaxDBBytes: 64 << 10, Timeout: testenv.Patience})
	tests := []struct {
		db   string
		want error
	}{
		{"big.db", ErrTooLarge},
		{"fifo.db", nil},
		{"dir.db", nil},
		{"missing.db", nil},
		{"../escape.db", nil},
	}
	for _, tt := range tests {
		t.Run(tt.db, func(t *testing.T) {
			_, err := e.Query(t.Context(), tt.db, "SELECT 1", nil, 0)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if errors.Is(err, ErrTimeout) || strings.Contains(err.Error(), dir) {
				t.Fatalf("err = %v: timed out or names a host path", err)
			}
			t.Log(err)
		})
	}
}
