package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name string
		in   []time.Duration
		want Stats
	}{
		{"empty", nil, Stats{}},
		{"one", ms(7), Stats{N: 1, Median: 7e6, P90: 7e6, Min: 7e6, Max: 7e6}},
		{"odd, unsorted", ms(5, 1, 3), Stats{N: 3, Median: 3e6, P90: 5e6, Min: 1e6, Max: 5e6}},
		{"even takes the middle mean", ms(4, 1, 3, 2), Stats{N: 4, Median: 2500e3, P90: 4e6, Min: 1e6, Max: 4e6}},
		// nearest rank: ceil(0.9×10) = 9th value
		{"ten", ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), Stats{N: 10, Median: 5500e3, P90: 9e6, Min: 1e6, Max: 10e6}},
		// ceil(0.9×11) = 10th value
		{"eleven", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100), Stats{N: 11, Median: 6e6, P90: 10e6, Min: 1e6, Max: 100e6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tt.in...)
			if got := Summarize(tt.in); got != tt.want {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
			for i := range in {
				if in[i] != tt.in[i] {
					t.Fatal("Summarize reordered its input")
				}
			}
		})
	}
}

// recorder is a comparator that records the order it was called in and
// fails on the calls listed.
type recorder struct {
	mu    sync.Mutex
	calls *[]string
}

func (r *recorder) comp(name, group string, role Role, fail func(call int) bool) Comparator {
	n := 0
	return Comparator{Name: name, Group: group, Role: role, Run: func(context.Context) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		*r.calls = append(*r.calls, name)
		n++
		if fail != nil && fail(n) {
			return errors.New(name + " failed")
		}
		return nil
	}}
}

func TestMeasureLatencyInterleaves(t *testing.T) {
	var calls []string
	r := &recorder{calls: &calls}
	comps := []Comparator{
		r.comp("a", "g", RoleHost, nil),
		r.comp("b", "g", RoleRunc, nil),
		r.comp("c", "g", "", func(n int) bool { return n%2 == 0 }),
	}
	got := MeasureLatency(t.Context(), comps, Options{N: 4, Warmup: 1})

	// Every round runs each comparator once, in an order that changes.
	orders := map[string]bool{}
	for _, round := range chunks(calls, 3) {
		b := []byte(round)
		slices.Sort(b)
		if string(b) != "abc" {
			t.Errorf("round %q does not run each comparator once", round)
		}
		orders[round] = true
	}
	if len(calls) != 15 || len(orders) < 2 {
		t.Errorf("calls %v: want 5 rounds of 3 in more than one order", calls)
	}
	// c fails on its 2nd and 4th calls; the 1st was warm-up.
	for i, w := range []struct{ n, errors int }{{4, 0}, {4, 0}, {2, 2}} {
		if got[i].N != w.n || got[i].Errors != w.errors {
			t.Errorf("%s: n=%d errors=%d, want n=%d errors=%d", got[i].Name, got[i].N, got[i].Errors, w.n, w.errors)
		}
	}
	if got[2].FirstError != "c failed" {
		t.Errorf("first error %q", got[2].FirstError)
	}
	for _, l := range got {
		if l.VsHost == nil || l.VsRunc == nil {
			t.Errorf("%s: ratios missing: %+v", l.Name, l)
		}
	}
}

func chunks(s []string, n int) []string {
	var out []string
	for i := 0; i < len(s); i += n {
		out = append(out, strings.Join(s[i:min(i+n, len(s))], ""))
	}
	return out
}

func TestMeasureLatencyStops(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	runs := 0
	comps := []Comparator{{Name: "a", Run: func(context.Context) error {
		runs++
		if runs == 3 {
			cancel()
		}
		return nil
	}}}
	got := MeasureLatency(ctx, comps, Options{N: 100})
	if got[0].N != 3 {
		t.Errorf("ran %d rounds after cancel at 3", got[0].N)
	}
}

func TestMeasureThroughput(t *testing.T) {
	var calls []string
	r := &recorder{calls: &calls}
	comps := []Comparator{
		r.comp("host", "python", RoleHost, nil),
		r.comp("runc", "python", RoleRunc, nil),
		r.comp("flaky", "python", "", func(n int) bool { return n == 1 }),
		r.comp("gcc", "c", RoleHost, nil),
	}
	got := MeasureThroughput(t.Context(), comps, 4, 10, Options{})
	counts := map[string]int{}
	for _, c := range calls {
		counts[c]++
	}
	for _, tp := range got {
		if counts[tp.Name] != 10 {
			t.Errorf("%s ran %d times, want 10", tp.Name, counts[tp.Name])
		}
		if tp.Runs+tp.Errors != 10 || tp.Concurrency != 4 {
			t.Errorf("%s: %+v", tp.Name, tp)
		}
		if tp.Runs > 0 && (tp.RunsPerSec <= 0 || tp.Seconds < 0) {
			t.Errorf("%s: rate %v over %v s", tp.Name, tp.RunsPerSec, tp.Seconds)
		}
	}
	if got[2].Errors != 1 || got[2].FirstError != "flaky failed" {
		t.Errorf("flaky: %+v", got[2])
	}
	if got[3].VsRunc != nil {
		t.Error("the c group has no runc baseline, yet a ratio against it")
	}
}

func TestRatio(t *testing.T) {
	tests := []struct {
		a, b float64
		want *float64
	}{
		{3, 2, ptr(1.5)},
		{1, 3, ptr(0.33)},
		{0, 2, nil}, // no samples
		{2, 0, nil},
	}
	for _, tt := range tests {
		got := ratio(tt.a, tt.b)
		if (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want {
			t.Errorf("ratio(%v, %v) = %v, want %v", tt.a, tt.b, deref(got), deref(tt.want))
		}
	}
}

func ptr(f float64) *float64 { return &f }

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

func TestCheckOutput(t *testing.T) {
	if err := CheckOutput("1\n", "1\n"); err != nil {
		t.Error(err)
	}
	if err := CheckOutput("2\n", "1\n"); !errors.Is(err, ErrOutput) {
		t.Errorf("mismatch gave %v", err)
	}
}

func TestReport(t *testing.T) {
	r := Report{
		Command: "sandpit bench --n 2",
		Machine: Machine{CPUs: 2, Model: "cpu", Kernel: "6.1", LoadBefore: "1 2 3", LoadAfter: "2 3 4", Versions: map[string]string{"runc": "1.1.5"}},
		Latency: []Latency{
			{Name: "host-python", Group: "python", N: 2, MedianMS: 10, P90MS: 12, MinMS: 9, MaxMS: 12, VsHost: ptr(1)},
			{Name: "broken", Group: "python", Errors: 2, FirstError: "boom"},
		},
		Throughput:  []Throughput{{Name: "host-python", Group: "python", Concurrency: 8, Runs: 16, Seconds: 2, RunsPerSec: 8}},
		Unavailable: []Unavailable{{Name: "docker-run", Reason: "engine down"}},
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"$ sandpit bench --n 2", "1 2 3 before, 2 3 4 after", "runc:", "host-python", "10.0", "8.00", "broken: boom", "docker-run: engine down", "nothing left behind"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Latency[0].MedianMS != 10 || back.Throughput[0].RunsPerSec != 8 || len(back.Leftovers) != 0 {
		t.Errorf("round trip: %+v", back)
	}
}

// CPU per run is split by where it went, the sandbox column is what a
// path costs beyond the host's own run of the same program, and CPU × runc
// compares runs of the same program only.
func TestCPUReport(t *testing.T) {
	comps := []Comparator{
		{Name: "host", Group: "python", Role: RoleHost},
		{Name: "runc", Group: "python", Role: RoleRunc},
		{Name: "sandpit", Group: "python"},
		{Name: "gcc", Group: "c", Role: RoleHost},
		{Name: "sandpit-c", Group: "c"},
		{Name: "lonely", Group: "go"},
	}
	tally := newCPUTally(comps, func() (time.Duration, time.Duration) { return 0, 0 })
	ms := time.Millisecond
	for i, own := range []time.Duration{200 * ms, 600 * ms, 400 * ms, 300 * ms, 500 * ms, 100 * ms} {
		tally.ownOK[i] = true
		tally.own1[i] = own
	}
	tally.daemon[2], tally.self[2] = 200*ms, 100*ms // sandpit: 700 ms in all
	out := make([]Throughput, len(comps))
	for i, c := range comps {
		out[i] = Throughput{Name: c.Name, Group: c.Group, Runs: 10}
	}
	tally.report(out)
	want := []struct {
		cpu, sandbox float64 // -1: absent
		vsRunc       float64 // -1: absent (no runc run of its program)
	}{
		{20, -1, 0.33}, {60, 40, 1}, {70, 50, 1.17}, {30, -1, -1}, {50, 20, -1}, {10, -1, -1},
	}
	for i, w := range want {
		o := out[i]
		if o.CPUMS == nil || *o.CPUMS != w.cpu {
			t.Errorf("%s: CPU per run %v, want %v", o.Name, o.CPUMS, w.cpu)
		}
		switch {
		case w.sandbox < 0 && o.CPUSandboxMS != nil:
			t.Errorf("%s: sandbox CPU %v, want none (no host run of its program, or it is the host)", o.Name, *o.CPUSandboxMS)
		case w.sandbox >= 0 && (o.CPUSandboxMS == nil || *o.CPUSandboxMS != w.sandbox):
			t.Errorf("%s: sandbox CPU %v, want %v", o.Name, o.CPUSandboxMS, w.sandbox)
		}
		switch {
		case w.vsRunc < 0 && o.CPUVsRunc != nil:
			t.Errorf("%s: CPU × runc %v, want none (its group has no runc run)", o.Name, *o.CPUVsRunc)
		case w.vsRunc >= 0 && (o.CPUVsRunc == nil || *o.CPUVsRunc != w.vsRunc):
			t.Errorf("%s: CPU × runc %v, want %v", o.Name, o.CPUVsRunc, w.vsRunc)
		}
	}
}
