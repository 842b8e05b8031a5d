package querydb

/*
#include <stdint.h>

// go-sqlite3 links SQLite into the binary (or links libsqlite3) but does not
// export these two; declaring them here resolves to the same symbols.
typedef struct sqlite3 sqlite3;
extern void sqlite3_interrupt(sqlite3*);
extern long long sqlite3_hard_heap_limit64(long long);

#include <malloc.h>
static void sandpit_arena_max(int n) { mallopt(M_ARENA_MAX, n); }
static void sandpit_malloc_trim(void) { malloc_trim(0); }

static void sandpit_interrupt(uintptr_t db) { sqlite3_interrupt((sqlite3*)db); }
static long long sandpit_hard_heap_limit(long long n) { return sqlite3_hard_heap_limit64(n); }
*/
import "C"

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// setHeapLimit sets SQLite's hard heap limit: past it every allocation
// fails with SQLITE_NOMEM, so no statement can take more memory than this.
// The limit is process-wide (SQLite has one heap), shared by every SQLite
// connection in the server. n <= 0 leaves it unchanged.
func init() { C.sandpit_arena_max(1) }

// trimPending is set when a statement failed: one that ran out of SQLite's
// heap or was interrupted has freed up to the heap limit back to malloc,
// which keeps the pages (an arena's free chunks are not returned to the
// kernel), so the next such statement would add its own on top — RSS grew
// to +227 MiB against a 64 MiB limit in TestDescribeSchemaBounded under
// load. The next statement first gives them back (malloc_trim).
var trimPending atomic.Bool

func trimIfPending() {
	if trimPending.Swap(false) {
		C.sandpit_malloc_trim()
	}
}

func setHeapLimit(n int64) {
	if n > 0 {
		C.sandpit_hard_heap_limit(C.longlong(n))
	}
}

// heapLimit reports SQLite's hard heap limit, 0 for none.
func heapLimit() int64 { return int64(C.sandpit_hard_heap_limit(-1)) }

// connHandle returns the sqlite3* behind c. go-sqlite3 keeps it unexported
// and offers no sqlite3_interrupt outside a running step, so this reads the
// field; TestPrepareInterrupted fails if a go-sqlite3 upgrade renames it.
func connHandle(c *sqlite3.SQLiteConn) uintptr {
	v := reflect.ValueOf(c).Elem().FieldByName("db")
	if !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() {
		return 0
	}
	return v.Pointer()
}

// interruptPoll is how often the watchdog repeats sqlite3_interrupt after
// the deadline: SQLite clears the flag when a parse or a first step starts,
// so one call could land just before that and be lost.
const interruptPoll = 10 * time.Millisecond

// watch interrupts c whenever ctx is done until the returned stop is called;
// stop waits for the watchdog to finish, so that no interrupt can reach the
// connection after it is handed back. It covers what go-sqlite3's own
// cancellation (a running step of a query given a context) does not:
// sqlite3_prepare, where SQLite checks for an interrupt while it plans and
// generates code (not while it expands views: the heap limit bounds that),
// and statements run without a context.
func watch(ctx context.Context, c *sqlite3.SQLiteConn) (stop func()) {
	db := connHandle(c)
	if db == 0 || ctx.Done() == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		t := time.NewTicker(interruptPoll)
		defer t.Stop()
		for {
			C.sandpit_interrupt(C.uintptr_t(db))
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
