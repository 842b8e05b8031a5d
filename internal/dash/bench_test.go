package dash

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/store/history"
)

// BenchmarkHistoryPage renders /runs over a history of 1,000 runs with
// realistic code and output, as a browser gets it: its bytes per page
// (bytes/page; the target is under 300 KB) and its server-side time per
// page (ns/op; the target is under 200 ms).
//
//	go test -run '^$' -bench HistoryPage ./internal/dash/
func BenchmarkHistoryPage(b *testing.B) {
	f := newFixture(b)
	t0 := time.Now().UTC().Add(-time.Hour)
	code := strings.Repeat("import pandas as pd\ndf = pd.read_csv('data.csv')\nprint(df.describe())\n", 10)
	out := strings.Repeat("count  1000.0\nmean   42.1\n", 200)
	for i := range 1000 {
		record(b, f.hist["alice"], history.Run{ID: fmt.Sprintf("run%04d", i), Started: t0.Add(time.Duration(i) * time.Second),
			Code: fmt.Sprintf("# run %d\n%s", i, code), Stdout: out, StdoutHead: out[:history.HeadBytes], StdoutBytes: int64(len(out)),
			DurationMS: 120, CPUUserMS: 90, MemoryPeakBytes: 80 << 20})
	}
	for _, page := range []string{"/runs", "/runs?q=describe", "/runs/run0999", "/metrics", "/metrics/runs-per-minute.svg", "/metrics/latency.svg", "/metrics/cpu-memory.svg"} {
		b.Run(strings.NewReplacer("/", "_", "?", "_", ".", "_").Replace(page), func(b *testing.B) {
			var n int64
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, page, nil)
				req.Header.Set("Authorization", "Bearer tok-a")
				rec := httptest.NewRecorder()
				f.srv.Config.Handler.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d", page, rec.Code)
				}
				n, _ = io.Copy(io.Discard, rec.Body)
			}
			b.ReportMetric(float64(n), "bytes/page")
		})
	}
}
