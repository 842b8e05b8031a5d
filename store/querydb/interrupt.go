package querydb

/*
#include <stdint.h>
#include <string.h>

// go-sqlite3 links SQLite into the binary (or links libsqlite3) but does not
// export these; declaring them here resolves to the same symbols.
typedef struct sqlite3 sqlite3;
extern void sqlite3_interrupt(sqlite3*);
extern long long sqlite3_hard_heap_limit64(long long);
extern int sqlite3_config(int, ...);
extern long long sqlite3_memory_highwater(int);

#include <malloc.h>
static void sandpit_arena_max(int n) { mallopt(M_ARENA_MAX, n); }
static void sandpit_malloc_trim(void) { malloc_trim(0); }

static void sandpit_interrupt(uintptr_t db) { sqlite3_interrupt((sqlite3*)db); }
static long long sandpit_hard_heap_limit(long long n) { return sqlite3_hard_heap_limit64(n); }

// The query budget: an allocator wrapped around SQLite's own that charges
// every block allocated on a thread running a query (sandpit_charging) to
// one counter, and fails such an allocation (SQLITE_NOMEM) past the
// budget. Each block carries an 8-byte header holding what it was charged
// (0: nothing), so it is uncharged whichever thread frees it. Allocations
// of other connections (history, snapshots) are never charged: a query at
// its budget cannot starve them.

// sqlite3_mem_methods, as sqlite3.h declares it.
typedef struct {
	void *(*xMalloc)(int);
	void (*xFree)(void*);
	void *(*xRealloc)(void*, int);
	int (*xSize)(void*);
	int (*xRoundup)(int);
	int (*xInit)(void*);
	void (*xShutdown)(void*);
	void *pAppData;
} sandpit_mem_methods;

enum { SANDPIT_CONFIG_MALLOC = 4, SANDPIT_CONFIG_GETMALLOC = 5, SANDPIT_HDR = 8 };

static sandpit_mem_methods sandpit_base;
static __thread int sandpit_charging;
static long long sandpit_query_used;  // bytes charged and not yet freed
static long long sandpit_query_limit; // 0: no budget

// sandpit_charge adds n (may be negative) to the charged bytes; a growth
// that would pass the budget is refused (returns 0) and not added.
static int sandpit_charge(long long n) {
	long long used = __atomic_add_fetch(&sandpit_query_used, n, __ATOMIC_RELAXED);
	long long limit = __atomic_load_n(&sandpit_query_limit, __ATOMIC_RELAXED);
	if (n > 0 && limit > 0 && used > limit) {
		__atomic_sub_fetch(&sandpit_query_used, n, __ATOMIC_RELAXED);
		return 0;
	}
	return 1;
}

static void *sandpit_malloc(int n) {
	long long charged = sandpit_charging ? n : 0;
	if (charged && !sandpit_charge(charged)) return 0;
	char *p = sandpit_base.xMalloc(n + SANDPIT_HDR);
	if (!p) {
		if (charged) sandpit_charge(-charged);
		return 0;
	}
	memcpy(p, &charged, sizeof charged);
	return p + SANDPIT_HDR;
}

static void sandpit_free(void *q) {
	if (!q) return;
	char *p = (char*)q - SANDPIT_HDR;
	long long charged;
	memcpy(&charged, p, sizeof charged);
	if (charged) sandpit_charge(-charged);
	sandpit_base.xFree(p);
}

// A charged block stays charged (for its new size) whichever thread grows
// it; an uncharged one becomes charged when a query grows it.
static void *sandpit_realloc(void *q, int n) {
	char *p = (char*)q - SANDPIT_HDR;
	long long was, now;
	memcpy(&was, p, sizeof was);
	now = (was || sandpit_charging) ? n : 0;
	if (now > was && !sandpit_charge(now - was)) return 0;
	char *r = sandpit_base.xRealloc(p, n + SANDPIT_HDR);
	if (!r) {
		if (now > was) sandpit_charge(was - now);
		return 0;
	}
	if (now < was) sandpit_charge(now - was);
	memcpy(r, &now, sizeof now);
	return r + SANDPIT_HDR;
}

static int sandpit_size(void *q) { return sandpit_base.xSize((char*)q - SANDPIT_HDR) - SANDPIT_HDR; }
static int sandpit_roundup(int n) { return sandpit_base.xRoundup(n + SANDPIT_HDR) - SANDPIT_HDR; }
static int sandpit_init(void *x) { return sandpit_base.xInit(sandpit_base.pAppData); }
static void sandpit_shutdown(void *x) { sandpit_base.xShutdown(sandpit_base.pAppData); }

// sandpit_install wraps SQLite's allocator; it must run before SQLite
// initializes (anything else fails with SQLITE_MISUSE and leaves it be).
static int sandpit_install(void) {
	int rc = sqlite3_config(SANDPIT_CONFIG_GETMALLOC, &sandpit_base);
	if (rc != 0) return rc;
	sandpit_mem_methods m = {sandpit_malloc, sandpit_free, sandpit_realloc, sandpit_size, sandpit_roundup, sandpit_init, sandpit_shutdown, 0};
	return sqlite3_config(SANDPIT_CONFIG_MALLOC, &m);
}

static void sandpit_set_charging(int on) { sandpit_charging = on; }
static void sandpit_set_query_limit(long long n) { __atomic_store_n(&sandpit_query_limit, n, __ATOMIC_RELAXED); }
static long long sandpit_query_charged(void) { return __atomic_load_n(&sandpit_query_used, __ATOMIC_RELAXED); }
*/
import "C"

import (
	"context"
	"reflect"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// init wraps SQLite's allocator (before any connection initializes SQLite)
// so that queries are charged to a budget of their own, and keeps malloc to
// one arena so that the budget bounds resident memory too.
func init() {
	C.sandpit_arena_max(1)
	budgetInstalled = C.sandpit_install() == 0
}

// budgetInstalled: queries have a budget of their own. When SQLite was
// initialized before this package (it never is in sandpit), setHeapLimit
// falls back to a hard heap limit of the budget, shared by every SQLite
// connection in the process.
var budgetInstalled bool

// storeHeadroom is what SQLite's process-wide hard heap limit leaves above
// the queries' budget for every other SQLite database of the server
// (history, the undo index), which a query at its budget must not starve;
// the hard limit remains a backstop against a bug in that accounting.
const storeHeadroom = 64 << 20

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

// setHeapLimit sets the memory budget of all queries together to n: past
// it, an allocation made while a query runs fails with SQLITE_NOMEM, so no
// statement can take more memory than this. SQLite's process-wide hard
// heap limit goes to n plus headroom for the other stores. n <= 0 leaves
// both unchanged.
func setHeapLimit(n int64) {
	if n <= 0 {
		return
	}
	if !budgetInstalled {
		C.sandpit_hard_heap_limit(C.longlong(n))
		return
	}
	C.sandpit_set_query_limit(C.longlong(n))
	C.sandpit_hard_heap_limit(C.longlong(n + max(n, storeHeadroom)))
}

// heapLimit reports SQLite's hard heap limit, 0 for none.
func heapLimit() int64 { return int64(C.sandpit_hard_heap_limit(-1)) }

// memoryHighwater reports the most memory SQLite held at once since the
// last reset, and resets it when reset is set.
func memoryHighwater(reset bool) int64 {
	r := 0
	if reset {
		r = 1
	}
	return int64(C.sqlite3_memory_highwater(C.int(r)))
}

// queryCharged reports the bytes charged to the queries' budget now.
func queryCharged() int64 { return int64(C.sandpit_query_charged()) }

// charge makes every SQLite allocation of the calling goroutine count
// against the queries' budget until the returned end is called. It locks
// the goroutine to its thread meanwhile (the charging mark is the
// thread's), so every call into SQLite between them must be made from the
// calling goroutine: go-sqlite3 steps a statement on the caller's
// goroutine.
func charge() (end func()) {
	goruntime.LockOSThread()
	C.sandpit_set_charging(1)
	return func() {
		C.sandpit_set_charging(0)
		goruntime.UnlockOSThread()
	}
}

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
