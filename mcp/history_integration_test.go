package mcp

import (
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testruntime"
	"github.com/sandpit-dev/sandpit/runtime"
)

// realRuntime is a runtime on the test containerd (skips without one).
func realRuntime(t *testing.T, mod func(*runtime.Config)) *runtime.Runtime {
	t.Helper()
	cfg := testruntime.Config(t)
	if mod != nil {
		mod(&cfg)
	}
	r, err := runtime.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestHistoryRecordsMeasuredUsage runs real sandboxes through MCP and checks
// that the history holds what the cgroup measured, not estimates.
func TestHistoryRecordsMeasuredUsage(t *testing.T) {
	const memLimit = 128 << 20
	const cpus = 0.5
	rt := realRuntime(t, func(c *runtime.Config) {
		c.Limits.MemoryBytes = memLimit
		c.Limits.TmpfsBytes = 16 << 20
		c.Limits.CPUs = cpus
	})
	f := newFixture(t, func(c *Config) { c.Runner = rt; c.Status = nil; c.Health = nil })

	tests := []struct {
		name    string
		args    map[string]any
		status  sandpit.Status
		check   func(t *testing.T, r RunRecord)
		timeout float64
	}{
		{name: "success", status: sandpit.StatusSuccess,
			args: map[string]any{"language": "python", "code": "print('hello from the sandbox')"},
			check: func(t *testing.T, r RunRecord) {
				if r.StdoutHead != "hello from the sandbox\n" || r.MemoryPeakBytes <= 0 {
					t.Errorf("stdout %q, peak memory %d", r.StdoutHead, r.MemoryPeakBytes)
				}
			}},
		{name: "error", status: sandpit.StatusError,
			args: map[string]any{"language": "python", "code": "import sys\nprint('bad', file=sys.stderr)\nsys.exit(3)"},
			check: func(t *testing.T, r RunRecord) {
				if r.ExitCode != 3 || !strings.Contains(r.StderrHead, "bad") {
					t.Errorf("exit %d stderr %q", r.ExitCode, r.StderrHead)
				}
			}},
		{name: "compile error", status: sandpit.StatusCompileError,
			args: map[string]any{"language": "c", "code": "int main( {"},
			check: func(t *testing.T, r RunRecord) {
				if r.StderrHead == "" {
					t.Error("no compiler message recorded")
				}
			}},
		{name: "timeout", status: sandpit.StatusTimeout,
			args: map[string]any{"language": "bash", "code": "sleep 30", "timeout_seconds": 1},
			check: func(t *testing.T, r RunRecord) {
				if r.Limits == nil || r.Limits.TimeoutSeconds != 1 {
					t.Errorf("limits = %+v, want a 1 s timeout", r.Limits)
				}
			}},
		{name: "oom peak near the limit", status: sandpit.StatusOOM,
			args: map[string]any{"language": "python", "code": "b = []\nwhile True:\n    b.append(bytearray(8 << 20))\n"},
			check: func(t *testing.T, r RunRecord) {
				if !r.OOMKilled {
					t.Error("oom_killed is false")
				}
				if lo, hi := int64(memLimit)*3/4, int64(memLimit)*11/10; r.MemoryPeakBytes < lo || r.MemoryPeakBytes > hi {
					t.Errorf("peak memory %d MiB, want near the %d MiB limit", r.MemoryPeakBytes>>20, memLimit>>20)
				}
			}},
		{name: "cpu loop uses its quota", status: sandpit.StatusSuccess,
			args: map[string]any{"language": "python", "code": "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 2:\n    pass\n"},
			check: func(t *testing.T, r RunRecord) {
				cpu := float64(r.CPUUserMS + r.CPUSystemMS)
				budget := float64(r.DurationMS) * cpus
				// The quota caps CPU time at wall × CPUs, and the loop's time is
				// measured. How much of the budget it gets depends on how busy
				// the host is (a loaded CI machine starves it), so the lower
				// bound is loose; the figure goes to the log for the notes.
				if cpu > budget*1.1+100 || cpu < budget*0.1 {
					t.Errorf("cpu %.0f ms over %d ms wall: want measured and within %.0f ms (%.1f CPUs)", cpu, r.DurationMS, budget, cpus)
				}
				t.Logf("cpu loop: %.0f ms CPU over %d ms wall = %.0f%% of the %.1f-CPU budget", cpu, r.DurationMS, 100*cpu/budget, cpus)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ran RunCodeResult
			if res := f.call(t, "run_code", tt.args, &ran); res.IsError {
				t.Fatalf("run_code: %s", text(res))
			}
			var got RunRecord
			if res := f.call(t, "get_run", map[string]any{"id": ran.ID}, &got); res.IsError {
				t.Fatalf("get_run: %s", text(res))
			}
			if got.Status != string(tt.status) || got.Status != string(ran.Status) {
				t.Fatalf("recorded status %s, run_code said %s, want %s (stderr %q)", got.Status, ran.Status, tt.status, got.StderrHead)
			}
			if got.Code != tt.args["code"] || got.DurationMS != ran.DurationMS || got.CPUUserMS != ran.Usage.CPUUserMS ||
				got.MemoryPeakBytes != int64(ran.Usage.MemoryPeakBytes) {
				t.Errorf("record %+v differs from the run %+v", got, ran)
			}
			if got.Limits == nil || got.Limits.MemoryBytes != memLimit {
				t.Errorf("limits = %+v", got.Limits)
			}
			tt.check(t, got)
		})
	}

	var m MetricsResult
	f.call(t, "get_sandbox_metrics", nil, &m)
	if m.Runs.Total != int64(len(tests)) || m.Runs.OOM != 1 || m.Runs.Timeouts != 1 {
		t.Errorf("metrics = %+v", m.Runs)
	}
	t.Logf("history recording: p50 %d µs, p99 %d µs over %d runs; run latency p50 %d ms",
		m.History.P50US, m.History.P99US, m.History.Window, m.Runs.Latency.P50MS)
}
