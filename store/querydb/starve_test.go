package querydb

import (
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// L1: SQLite's hard heap limit is process-wide; a query_db at the limit made
// 16 of 2,621 concurrent writes to another SQLite database of the process
// (history, undo records) fail with "out of memory". Queries must be stopped
// at their memory bound with a clear message, and writes elsewhere must not
// notice.
func TestQueryAtMemoryLimitLeavesOtherDatabasesAlone(t *testing.T) {
	dir := t.TempDir()
	// A generous timeout: every query must end at the memory bound.
	e := newEngine(t, fixture(t, dir), Options{MaxMemoryBytes: 16 << 20, Timeout: time.Minute})

	other, err := sql.Open("sqlite3", filepath.Join(dir, "history.db")+"?_journal_mode=WAL&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Exec(`CREATE TABLE runs (id INTEGER PRIMARY KEY, stdout BLOB, stderr BLOB)`); err != nil {
		t.Fatal(err)
	}
	var inserts, failed atomic.Int64
	var firstFail atomic.Value
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		blob := make([]byte, 64<<10)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			inserts.Add(1)
			if _, err := other.Exec(`INSERT INTO runs (stdout, stderr) VALUES (?, ?)`, blob, blob); err != nil {
				if failed.Add(1) == 1 {
					firstFail.Store(err)
				}
			}
		}
	}()

	// Each row is a distinct 200-byte blob: the DISTINCT's temporary b-tree
	// would need ~400 MB for all of them.
	const hostile = `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 2000000)
		SELECT count(DISTINCT b) FROM (SELECT randomblob(200) AS b FROM c)`
	var wg sync.WaitGroup
	var tooLarge atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				_, err := e.Query(t.Context(), "", hostile, nil, 0)
				if !errors.Is(err, ErrTooLarge) {
					t.Errorf("hostile query: %v, want too large (memory)", err)
					return
				}
				tooLarge.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-stopped
	if n := tooLarge.Load(); n > 0 {
		_, err := e.Query(t.Context(), "", hostile, nil, 0)
		t.Logf("%d queries stopped at the bound, e.g.: %v", n, err)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d inserts into another database failed while queries hit their bound; first: %v", n, inserts.Load(), firstFail.Load())
	}
	// And queries within the bound still work.
	if res, err := e.Query(t.Context(), "", "SELECT count(*) FROM nums", nil, 0); err != nil || res.Rows[0][0] != int64(1000) {
		t.Errorf("a small query afterwards: %v %v", res, err)
	}
}

// The queries' budget, not the process-wide hard limit, is what stops a
// query: the hard limit stays well above it, and SQLite's memory never
// nears it while one hostile query runs.
func TestQueryBudgetBelowHardLimit(t *testing.T) {
	if !budgetInstalled {
		t.Fatal("the query budget allocator is not installed: SQLite was initialized before this package")
	}
	const budget = 16 << 20
	e := newEngine(t, fixture(t, t.TempDir()), Options{MaxMemoryBytes: budget, Timeout: time.Minute})
	if got := heapLimit(); got < budget+storeHeadroom {
		t.Fatalf("hard heap limit %d MiB, want at least the budget plus %d MiB of headroom", got>>20, storeHeadroom>>20)
	}
	memoryHighwater(true)
	_, err := e.Query(t.Context(), "", `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 2000000)
		SELECT count(DISTINCT b) FROM (SELECT randomblob(200) AS b FROM c)`, nil, 0)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("hostile query: %v, want too large", err)
	}
	// Uncharged: the connection's own buffers and whatever else the test
	// process holds in SQLite (a few MiB).
	if hw := memoryHighwater(false); hw > budget+8<<20 {
		t.Errorf("SQLite held %d MiB at the peak; the query budget is %d MiB", hw>>20, budget>>20)
	}
	if n := queryCharged(); n > budget {
		t.Errorf("%d MiB still charged after the query", n>>20)
	}
}
