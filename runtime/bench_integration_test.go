package runtime_test

// Latency and throughput benchmarks of Run against the test containerd:
//
//	SANDPIT_TEST_CONTAINERD=/run/sandpit/containerd/containerd.sock \
//	  go test -run '^$' -bench . -benchtime 20x ./runtime/
//
// Each reports the median beside Go's mean (ns/op), because on a shared
// machine a few slow runs move the mean a long way. `sandpit bench` compares
// the same runs against bare python and `runc run`.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/bench"
	"github.com/sandpit-dev/sandpit/internal/testruntime"
	"github.com/sandpit-dev/sandpit/runtime"
)

// benchRuntime is a runtime with its own instance label; at the end nothing
// may be left with that label.
func benchRuntime(b *testing.B) *runtime.Runtime {
	b.Helper()
	cfg := testruntime.Config(b)
	r, err := runtime.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		// Close first: it waits for cleanup still running in the background.
		r.Close()
		check, err := runtime.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer check.Close()
		// b.Context is done by now.
		if n, err := check.Sweep(context.Background()); err != nil || n > 0 {
			b.Errorf("%d sandboxes left behind (sweep: %v)", n, err)
		}
	})
	return r
}

// timings collects per-run durations from any goroutine.
type timings struct {
	mu sync.Mutex
	d  []time.Duration
}

func (t *timings) add(d time.Duration) {
	t.mu.Lock()
	t.d = append(t.d, d)
	t.mu.Unlock()
}

func (t *timings) report(b *testing.B) {
	s := bench.Summarize(t.d)
	b.ReportMetric(float64(s.Median)/1e6, "ms-median")
	b.ReportMetric(float64(s.P90)/1e6, "ms-p90")
}

func runOnce(b *testing.B, r *runtime.Runtime, t *timings, req sandpit.Request, want string) {
	t0 := time.Now()
	res, err := r.Run(b.Context(), req)
	t.add(time.Since(t0))
	if err != nil {
		b.Fatal(err)
	}
	if res.Status != sandpit.StatusSuccess || res.Stdout != want {
		b.Fatalf("status %s, stdout %q, stderr %q; want success, %q", res.Status, res.Stdout, res.Stderr, want)
	}
}

// BenchmarkRunPython is one cold run of print(1): create, start, wait and
// delete a sandbox.
func BenchmarkRunPython(b *testing.B) {
	r := benchRuntime(b)
	req := sandpit.Request{Language: "python", Code: "print(1)"}
	runOnce(b, r, &timings{}, req, "1\n") // connect, sweep and cache the image outside the timing
	var t timings
	for b.Loop() {
		runOnce(b, r, &t, req, "1\n")
	}
	t.report(b)
}

// BenchmarkRunParallel is print(1) from GOMAXPROCS×-cpu concurrent callers
// (use -cpu 8 for the eight clients): ns/op is the inverse of
// throughput.
func BenchmarkRunParallel(b *testing.B) {
	r := benchRuntime(b)
	req := sandpit.Request{Language: "python", Code: "print(1)"}
	runOnce(b, r, &timings{}, req, "1\n")
	var t timings
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			runOnce(b, r, &t, req, "1\n")
		}
	})
	t.report(b)
}

// BenchmarkRunC compiles and runs a C hello world: two sandboxes per run.
func BenchmarkRunC(b *testing.B) {
	r := benchRuntime(b)
	req := sandpit.Request{Language: "c", Code: "#include <stdio.h>\nint main(void) { puts(\"1\"); return 0; }\n"}
	runOnce(b, r, &timings{}, req, "1\n")
	var t timings
	for b.Loop() {
		runOnce(b, r, &t, req, "1\n")
	}
	t.report(b)
}
