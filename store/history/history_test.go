package history

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

func open(t testing.TB) *DB {
	t.Helper()
	h, err := Open(context.Background(), filepath.Join(t.TempDir(), "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func run(id string, at time.Duration, lang, status, code string) Run {
	return Run{
		ID: id, Started: t0.Add(at), Language: lang, Status: status, Code: code,
		ExitCode: 0, DurationMS: 42, CPUUserMS: 30, CPUSystemMS: 5, MemoryPeakBytes: 8 << 20, Pids: 1,
		StdoutBytes: 3, StdoutHead: "hi\n",
		Limits: json.RawMessage(`{"memory_bytes":268435456}`),
	}
}

func ids(runs []Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.ID
	}
	return out
}

func TestMigrationsIdempotent(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "h.db")
	for i := range 3 {
		h, err := Open(ctx, path)
		if err != nil {
			t.Fatalf("open #%d: %v", i, err)
		}
		if i == 0 {
			if err := h.Record(ctx, run("a", 0, "python", "success", "print(1)")); err != nil {
				t.Fatal(err)
			}
		}
		v, err := h.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v != SchemaVersion() {
			t.Errorf("open #%d: version %d, want %d", i, v, SchemaVersion())
		}
		var rows int
		if err := h.db.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != SchemaVersion() {
			t.Errorf("open #%d: %d schema_migrations rows, want %d", i, rows, SchemaVersion())
		}
		if n, _ := h.Count(ctx); n != 1 {
			t.Errorf("open #%d: %d runs, want 1 (reopening must keep data)", i, n)
		}
		var mode string
		if err := h.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
			t.Errorf("journal_mode = %q (%v), want wal", mode, err)
		}
		h.Close()
	}
}

func TestCodeStoredOnce(t *testing.T) {
	ctx := t.Context()
	h := open(t)
	code := "print('same')\n"
	for i, c := range []string{code, code, "print('other')", code} {
		if err := h.Record(ctx, run(fmt.Sprint("r", i), time.Duration(i)*time.Second, "python", "success", c)); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := h.db.QueryRowContext(ctx, `SELECT count(*) FROM code`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("code rows = %d, want 2 (one per distinct text)", n)
	}
	for _, id := range []string{"r0", "r1", "r3"} {
		got, err := h.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Code != code || got.CodeBytes != int64(len(code)) {
			t.Errorf("%s: code %q (%d bytes), want %q", id, got.Code, got.CodeBytes, code)
		}
	}
}

func TestRecordGetRoundTrip(t *testing.T) {
	ctx := t.Context()
	h := open(t)
	long := strings.Repeat("é", HeadBytes) // 2 bytes a rune: the cut must not split one
	want := Run{
		ID: "run-1", Started: time.Date(2025, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600)),
		Language: "c", Code: "int main(){return 3;}", StdinBytes: 12,
		Status: "error", ExitCode: 3, DurationMS: 150,
		CPUUserMS: 100, CPUSystemMS: 20, MemoryPeakBytes: 1 << 30, Pids: 4, OOMKilled: true,
		StdoutBytes: 5000, StderrBytes: 7, StdoutTruncated: true,
		StdoutHead: long, StderrHead: "boom\n",
		Files:  json.RawMessage(`{"created":["a.txt"],"modified":[],"deleted":[]}`),
		Limits: json.RawMessage(`{"memory_bytes":1073741824}`),
	}
	if err := h.Record(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := h.Get(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Started.Equal(want.Started) || got.Started.Location() != time.UTC {
		t.Errorf("started = %v, want %v in UTC", got.Started, want.Started)
	}
	if len(got.StdoutHead) > HeadBytes || !strings.HasPrefix(long, got.StdoutHead) || len(got.StdoutHead) < HeadBytes-1 {
		t.Errorf("stdout head is %d bytes, want the first whole runes within %d", len(got.StdoutHead), HeadBytes)
	}
	if got.CodeSHA256 == "" {
		t.Error("code sha256 empty")
	}
	// Compare the rest field by field through JSON.
	want.Started, got.Started = time.Time{}, time.Time{}
	want.StdoutHead, got.StdoutHead = "", ""
	got.CodeSHA256, got.CodeBytes = "", 0
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Errorf("round trip:\n got %s\nwant %s", gj, wj)
	}

	if err := h.Record(ctx, want); err == nil {
		t.Error("recording the same id twice succeeded")
	}
	if _, err := h.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
}

func TestConcurrentRecordsAndReads(t *testing.T) {
	ctx := t.Context()
	h := open(t)
	const writers, each = 6, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*each+writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				// Half the writers share code, so code inserts race too.
				code := fmt.Sprint("print(", i, ")")
				if w%2 == 1 {
					code = fmt.Sprint("w", w, "-", i)
				}
				if err := h.Record(ctx, run(fmt.Sprint("c", w, "-", i), time.Duration(i)*time.Second, "python", "success", code)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := h.List(ctx, Filter{Limit: 50}); err != nil {
				errs <- err
			}
			if _, err := h.Prune(ctx, 0, writers*each); err != nil {
				errs <- err
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n, _ := h.Count(ctx); n != writers*each {
		t.Errorf("%d runs, want %d", n, writers*each)
	}
}

func TestListFilters(t *testing.T) {
	ctx := t.Context()
	h := open(t)
	// r0 oldest ... r5 newest; r4 and r5 share a start time (order by insertion).
	for i, r := range []Run{
		run("r0", 0, "python", "success", "a"),
		run("r1", 1*time.Second, "bash", "error", "b"),
		run("r2", 2*time.Second, "python", "timeout", "c"),
		run("r3", 3*time.Second, "python", "error", "d"),
		run("r4", 4*time.Second, "c", "success", ""),
		run("r5", 4*time.Second, "python", "success", strings.Repeat("x", 500)),
	} {
		if i == 4 {
			r.Path = "main.c"
		}
		if err := h.Record(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		f    Filter
		want []string
	}{
		{"all newest first", Filter{}, []string{"r5", "r4", "r3", "r2", "r1", "r0"}},
		{"limit", Filter{Limit: 2}, []string{"r5", "r4"}},
		{"offset", Filter{Limit: 2, Offset: 2}, []string{"r3", "r2"}},
		{"offset past end", Filter{Offset: 10}, []string{}},
		{"status", Filter{Status: "error"}, []string{"r3", "r1"}},
		{"language", Filter{Language: "python"}, []string{"r5", "r3", "r2", "r0"}},
		{"status and language", Filter{Status: "success", Language: "python"}, []string{"r5", "r0"}},
		{"before time", Filter{Before: t0.Add(2 * time.Second)}, []string{"r1", "r0"}},
		{"before id", Filter{BeforeID: "r5"}, []string{"r4", "r3", "r2", "r1", "r0"}},
		{"before id tie", Filter{BeforeID: "r4", Limit: 1}, []string{"r3"}},
		{"before id and language", Filter{BeforeID: "r3", Language: "python"}, []string{"r2", "r0"}},
		{"no match", Filter{Language: "cpp"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := h.List(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if g := strings.Join(ids(got), ","); g != strings.Join(tt.want, ",") {
				t.Errorf("got %s, want %s", g, strings.Join(tt.want, ","))
			}
			for _, r := range got {
				if r.Code != "" {
					t.Errorf("%s: List returned full code", r.ID)
				}
			}
		})
	}

	// Paging with the keyset cursor visits every run once.
	var seen []string
	f := Filter{Limit: 4}
	for {
		page, err := h.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		seen = append(seen, ids(page)...)
		f.BeforeID = page[len(page)-1].ID
	}
	if got := strings.Join(seen, ","); got != "r5,r4,r3,r2,r1,r0" {
		t.Errorf("paging = %s", got)
	}

	all, _ := h.List(ctx, Filter{})
	if p := all[0].CodePreview; len(p) != PreviewChars {
		t.Errorf("preview is %d chars, want %d", len(p), PreviewChars)
	}
	if r4 := all[1]; r4.Path != "main.c" || r4.CodePreview != "" || r4.CodeSHA256 != "" {
		t.Errorf("path run: %+v", r4)
	}
	if _, err := h.List(ctx, Filter{BeforeID: "gone"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("BeforeID of a missing run: %v, want ErrNotFound", err)
	}
}

func TestPrune(t *testing.T) {
	now := t0.Add(10 * 24 * time.Hour)
	tests := []struct {
		name        string
		r           Retention
		wantDeleted int64
		wantKept    []string
	}{
		{"nothing", Retention{}, 0, []string{"d0", "d1", "d2", "d3", "d4"}},
		{"by age", Retention{MaxAge: 5 * 24 * time.Hour}, 2, []string{"d0", "d1", "d2"}},
		{"by count", Retention{MaxCount: 2}, 3, []string{"d0", "d1"}},
		{"count above size", Retention{MaxCount: 50}, 0, []string{"d0", "d1", "d2", "d3", "d4"}},
		{"both", Retention{MaxAge: 9*24*time.Hour + time.Hour, MaxCount: 3}, 2, []string{"d0", "d1", "d2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			h := open(t)
			// d0 started "now"; dN started N*2 days earlier.
			for i := range 5 {
				code := "shared"
				if i == 4 {
					code = "only-d4"
				}
				if err := h.Record(ctx, run(fmt.Sprint("d", i), 10*24*time.Hour-time.Duration(i)*2*24*time.Hour, "python", "success", code)); err != nil {
					t.Fatal(err)
				}
			}
			n, err := h.prune(ctx, now, tt.r)
			if err != nil {
				t.Fatal(err)
			}
			if n != tt.wantDeleted {
				t.Errorf("deleted %d, want %d", n, tt.wantDeleted)
			}
			got, _ := h.List(ctx, Filter{})
			var kept []string
			for _, r := range got {
				kept = append(kept, r.ID)
			}
			if strings.Join(kept, ",") != strings.Join(tt.wantKept, ",") {
				t.Errorf("kept %v, want %v", kept, tt.wantKept)
			}
			var orphans int
			h.db.QueryRowContext(ctx, `SELECT count(*) FROM code c WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.code_sha256 = c.sha256)`).Scan(&orphans)
			if orphans != 0 {
				t.Errorf("%d code rows left with no run", orphans)
			}
		})
	}
}

func TestPruneManyBatches(t *testing.T) {
	ctx := t.Context()
	h := open(t)
	total := pruneBatch*2 + 17
	for i := range total {
		if err := h.Record(ctx, run(fmt.Sprint("m", i), time.Duration(i)*time.Millisecond, "bash", "success", fmt.Sprint("echo ", i%10))); err != nil {
			t.Fatal(err)
		}
	}
	n, err := h.Prune(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(total-10) {
		t.Errorf("pruned %d, want %d", n, total-10)
	}
	got, _ := h.List(ctx, Filter{Limit: 100})
	if len(got) != 10 || got[0].ID != fmt.Sprint("m", total-1) || got[9].ID != fmt.Sprint("m", total-10) {
		t.Errorf("kept %v, want the newest 10", ids(got))
	}
}

func TestPrunerStopsWithContext(t *testing.T) {
	h := open(t)
	if err := h.Record(t.Context(), run("old", 0, "bash", "success", "true")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { h.Pruner(ctx, Retention{MaxAge: time.Hour}, time.Hour, nil); close(done) }()
	// The first pass runs immediately: wait for it to remove the old run.
	testenv.Eventually(t, "the first pass to remove the old run", func() bool {
		n, _ := h.Count(t.Context())
		return n == 0
	})
	cancel()
	<-done
}

const childEnv = "SANDPIT_HISTORY_CRASH_CHILD"

// TestCrashChild is the writer TestSurvivesKill runs in a child process.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(childEnv)
	if path == "" {
		t.Skip("helper process for TestSurvivesKill")
	}
	h, err := Open(context.Background(), path)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for i := 0; ; i++ {
		r := run(fmt.Sprint("k", i), time.Duration(i)*time.Millisecond, "python", "success", strings.Repeat(fmt.Sprint(i), 700))
		if err := h.Record(context.Background(), r); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(i) // acknowledged: committed
	}
}

func TestSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a writer process")
	}
	dir := t.TempDir()
	for round := range 3 {
		path := filepath.Join(dir, fmt.Sprint("crash", round, ".db"))
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v=false")
		cmd.Env = append(os.Environ(), childEnv+"="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill at a point that differs per round, mid-stream of commits
		// (and of WAL checkpoints: each run adds a ~2 KiB code row).
		killAt := 300 + 211*round
		last := -1
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			n, err := strconv.Atoi(sc.Text())
			if err != nil {
				t.Fatalf("child: %s", sc.Text())
			}
			last = n
			if n >= killAt {
				cmd.Process.Signal(syscall.SIGKILL)
				break
			}
		}
		cmd.Wait()
		if last < killAt {
			t.Fatalf("round %d: child stopped at %d before the kill", round, last)
		}

		h, err := Open(t.Context(), path)
		if err != nil {
			t.Fatalf("round %d: reopen after kill: %v", round, err)
		}
		var check string
		if err := h.db.QueryRowContext(t.Context(), `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
			t.Errorf("round %d: integrity_check = %q, %v", round, check, err)
		}
		for i := 0; i <= last; i += 37 {
			if _, err := h.Get(t.Context(), fmt.Sprint("k", i)); err != nil {
				t.Errorf("round %d: acknowledged run k%d lost: %v", round, i, err)
			}
		}
		if _, err := h.Get(t.Context(), fmt.Sprint("k", last)); err != nil {
			t.Errorf("round %d: last acknowledged run k%d lost: %v", round, last, err)
		}
		h.Close()
	}
}

// BenchmarkRecord is the per-run cost of recording. Besides the mean it
// reports the median, which the operator-facing note quotes.
func BenchmarkRecord(b *testing.B) {
	ctx := context.Background()
	h := open(b)
	codes := []string{"print('hello')\n", strings.Repeat("x = 1\n", 200)}
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := run(fmt.Sprint("b", i), time.Duration(i), "python", "success", codes[i%2])
		r.StdoutHead = strings.Repeat("o", 2000)
		t := time.Now()
		if err := h.Record(ctx, r); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(t))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
}
