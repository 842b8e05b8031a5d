package bench

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100..1, unsorted
	}
	tests := []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7e6},
		{"p50 of three", ms(5, 1, 3), 50, 3e6},
		{"p99 of a hundred is the 99th", ms(hundred...), 99, 99e6},
		{"p100 is the max", ms(hundred...), 100, 100e6},
		{"p50 of a hundred is the 50th", ms(hundred...), 50, 50e6},
		{"tiny p is the min", ms(4, 2, 9), 0.1, 2e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.in, tt.p); got != tt.want {
				t.Errorf("Percentile(%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestForEach(t *testing.T) {
	for _, tc := range []struct{ n, par int }{{0, 4}, {1, 4}, {10, 3}, {100, 32}} {
		seen := make([]atomic.Int32, tc.n)
		var in, peak atomic.Int32
		forEach(tc.n, tc.par, func(i int) {
			now := in.Add(1)
			for {
				p := peak.Load()
				if now <= p || peak.CompareAndSwap(p, now) {
					break
				}
			}
			seen[i].Add(1)
			in.Add(-1)
		})
		for i := range seen {
			if seen[i].Load() != 1 {
				t.Errorf("n=%d: index %d called %d times", tc.n, i, seen[i].Load())
			}
		}
		if peak.Load() > int32(tc.par) {
			t.Errorf("n=%d: %d at once, more than %d", tc.n, peak.Load(), tc.par)
		}
	}
}

// The flood's generator: every request it counts was answered or failed,
// none carries a token the server gave, and an answer other than 401 is
// counted apart with its status. (A server of the test's: what is tested
// is the generator's counting, not authentication.)
func TestFloodCounts(t *testing.T) {
	var mu sync.Mutex
	auths := map[string]int{}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		a := r.Header.Get("Authorization")
		if a != "" {
			a = "bearer"
			if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer sp_flood") {
				a = "unexpected: " + r.Header.Get("Authorization")
			}
		}
		auths[a]++
		mu.Unlock()
		if n.Add(1)%10 == 0 {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	f := startFlood(context.Background(), srv.URL+"/mcp", 2000, 4)
	deadline := time.Now().Add(time.Minute)
	for f.sent.Load() < 50 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	f.stop()
	sent, refused, other, failed := f.sent.Load(), f.unauthorized.Load(), f.other.Load(), f.failed.Load()
	if sent < 50 || refused+other+failed != sent || failed != 0 {
		t.Errorf("sent %d = %d refused + %d other + %d failed?", sent, refused, other, failed)
	}
	if other == 0 || !strings.Contains(f.otherStatus.String(), "418") {
		t.Errorf("other %d, first other status %q", other, f.otherStatus.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if auths[""] == 0 || auths["bearer"] == 0 || len(auths) != 2 {
		t.Errorf("authorization headers seen: %v, want none and wrong bearer tokens only", auths)
	}
}

func TestHTTPReportTable(t *testing.T) {
	d50, d90 := 1.5, 3.25
	r := Report{
		Command: "sandpit bench --http",
		Machine: Machine{CPUs: 2, LoadBefore: "1 2 3", LoadAfter: "2 3 4", Versions: map[string]string{}},
		HTTP: &HTTPReport{
			Server:   "sandpit serve --listen 127.0.0.1:0",
			Protocol: "2026-07-28",
			Latency: []Latency{
				{Name: "run_code over stdio", N: 3, MedianMS: 10, P90MS: 12, MinMS: 9, MaxMS: 12},
				{Name: "run_code over HTTP", N: 3, MedianMS: 11.5, P90MS: 15.25, MinMS: 9, MaxMS: 16},
			},
			HTTPMinusStdioP50MS: &d50, HTTPMinusStdioP90MS: &d90,
			Concurrent: &HTTPConcurrent{Clients: 50, Calls: 20, Tenants: 5, OK: 999, Errors: 1, FirstError: "boom", P50MS: 100, P99MS: 300, MaxMS: 400},
			Fair:       &HTTPFair{Clients: 8, ARuns: 40, Alone: Latency{Name: "tenant B quiet", N: 5}, Loaded: Latency{Name: "tenant B loaded", N: 4}, Ratio: ptr(1.7)},
			Flood:      &HTTPFlood{TargetRate: 10000, Conns: 64, Sent: 90000, Refused: 90000, Rate: 9000, Quiet: Latency{Name: "run_code quiet"}, Flooded: Latency{Name: "run_code loaded"}},
			Idle:       &HTTPIdle{Sessions: 1000, Tenants: 32, Opened: 1000, Alive: 1000, RSSOpenMiB: 100, KiBPerSession: 30, Bound: "32 a tenant", OneMore: "refused: 429"},
		},
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"run_code over HTTP", "HTTP − stdio: p50 +1.5 ms, p90 +3.2 ms", "50 clients × 20 calls", "999 ok, 1 errors", "first error: boom",
		"loaded ÷ alone p50: 1.70", "target 10000/s over 64", "90000 answered 401", "1000 answered tools/list", "30.0 KiB a session", "bound: 32 a tenant", "refused: 429", "nothing left behind"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if strings.Contains(table.String(), "× runc") {
		t.Errorf("the HTTP table has the other bench's columns:\n%s", table.String())
	}
}
