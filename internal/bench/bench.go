// Package bench measures how long sandpit and the ways it is compared with
// take to run the same program on this host, and reports medians, spread and
// ratios.
//
// The guarantees: comparators are run interleaved, in a new random order
// each round (seeded, so reruns use the same orders), so that drift on a
// shared machine (load from other work, thermal throttling, a daemon's
// caches) hits all of them alike and no comparator always runs right after
// one that leaves work in the background (a pool refilling, a sandbox being
// deleted); a sample is
// only counted when its run succeeded and printed what the program should
// print, so a failing path can never look fast; and every measurement is
// bounded in count and in time.
//
// It is a measuring tool, not part of the server: to prepare the `runc run`
// baseline it mounts an image snapshot itself (runc.go), the one place outside
// package runtime that holds a containerd client.
package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Role marks the baselines that ratios are computed against.
type Role string

const (
	RoleHost Role = "host" // the program run directly on the host
	RoleRunc Role = "runc" // `runc run` of an equivalent bundle
)

// Comparator is one way of running the benchmark program.
type Comparator struct {
	Name string
	// Group is the program's language; ratios compare within a group.
	Group string
	Role  Role
	// Run runs the program once and returns an error unless it succeeded
	// with the expected output. It must be safe for concurrent use.
	Run func(ctx context.Context) error
	// CPU, when set, reads the cumulative CPU time of what only this path
	// runs (its cgroup: a server, its shims, its sandboxes); see cpu.go.
	CPU func() (time.Duration, error)
	// Settle, when set, waits for the background work of earlier runs
	// (an in-process runtime deleting sandboxes).
	Settle func()
	// NoCPU: this path runs processes the bench cannot account (ctr's
	// shims), so no CPU per run is reported for it.
	NoCPU bool
	// Containerd: the path goes through containerd, whose CPU during its
	// rounds is charged to it.
	Containerd bool
}

// Options bound a measurement.
type Options struct {
	N      int           // measured rounds
	Warmup int           // unmeasured rounds first
	Budget time.Duration // stop starting rounds after this long (0: no limit)
	// RunTimeout bounds one run (default one minute).
	RunTimeout time.Duration
	// Gap is an untimed pause before each run, the way an agent's calls
	// arrive with the model's turn in between; 0 runs back to back.
	Gap time.Duration
	// Shared, when set, reads the CPU that paths share (containerd, this
	// process and its reaped children): throughput charges it to the
	// comparator whose round runs.
	Shared func() (daemon, self time.Duration)
}

func (o Options) runTimeout() time.Duration {
	if o.RunTimeout <= 0 {
		return time.Minute
	}
	return o.RunTimeout
}

// Latency is one comparator's latency over the measured rounds.
type Latency struct {
	Name       string   `json:"name"`
	Group      string   `json:"group"`
	N          int      `json:"n"`
	Errors     int      `json:"errors"`
	FirstError string   `json:"first_error,omitempty"`
	MedianMS   float64  `json:"median_ms"`
	P90MS      float64  `json:"p90_ms"`
	MinMS      float64  `json:"min_ms"`
	MaxMS      float64  `json:"max_ms"`
	VsHost     *float64 `json:"vs_host,omitempty"` // median ÷ the host baseline's median
	VsRunc     *float64 `json:"vs_runc,omitempty"` // median ÷ the runc baseline's median
}

// MeasureLatency runs every comparator once per round, in an order that
// is shuffled each round, for opt.Warmup unmeasured and then opt.N measured
// rounds. It stops early, with what it has, when ctx ends or the budget is
// spent.
func MeasureLatency(ctx context.Context, comps []Comparator, opt Options) []Latency {
	samples := make([][]time.Duration, len(comps))
	errs := make([]error, len(comps))
	nerr := make([]int, len(comps))
	start := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]int, len(comps))
	for i := range order {
		order[i] = i
	}
	for round := range opt.Warmup + opt.N {
		if ctx.Err() != nil || opt.Budget > 0 && time.Since(start) > opt.Budget {
			break
		}
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, i := range order {
			if opt.Gap > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(opt.Gap):
				}
			}
			d, err := timeRun(ctx, comps[i], opt.runTimeout())
			if round < opt.Warmup {
				continue
			}
			if err != nil {
				nerr[i]++
				if errs[i] == nil {
					errs[i] = err
				}
				continue
			}
			samples[i] = append(samples[i], d)
		}
	}
	return summarizeLatency(comps, samples, errs, nerr)
}

// summarizeLatency turns samples into the Latency rows, with ratios to the
// baselines of each group.
func summarizeLatency(comps []Comparator, samples [][]time.Duration, errs []error, nerr []int) []Latency {
	out := make([]Latency, len(comps))
	medians := make([]float64, len(comps)) // unrounded, for the ratios
	for i, c := range comps {
		s := Summarize(samples[i])
		medians[i] = float64(s.Median)
		out[i] = Latency{
			Name: c.Name, Group: c.Group, N: s.N, Errors: nerr[i],
			MedianMS: ms(s.Median), P90MS: ms(s.P90), MinMS: ms(s.Min), MaxMS: ms(s.Max),
		}
		if errs[i] != nil {
			out[i].FirstError = errs[i].Error()
		}
	}
	for i := range out {
		if h := baseline(comps, medians, out[i].Group, RoleHost); h != nil {
			out[i].VsHost = ratio(medians[i], *h)
		}
		if r := baseline(comps, medians, out[i].Group, RoleRunc); r != nil {
			out[i].VsRunc = ratio(medians[i], *r)
		}
	}
	return out
}

// baseline is the value of the comparator with role in group, if any.
func baseline[T any](comps []Comparator, values []T, group string, role Role) *T {
	for i, c := range comps {
		if c.Group == group && c.Role == role {
			return &values[i]
		}
	}
	return nil
}

func timeRun(ctx context.Context, c Comparator, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	err := c.Run(ctx)
	return time.Since(t0), err
}

// Throughput is how many runs per second one comparator sustains with a
// number of concurrent clients.
type Throughput struct {
	Name        string   `json:"name"`
	Group       string   `json:"group"`
	Concurrency int      `json:"concurrency"`
	Runs        int      `json:"runs"` // successful runs
	Errors      int      `json:"errors"`
	FirstError  string   `json:"first_error,omitempty"`
	Seconds     float64  `json:"seconds"`
	RunsPerSec  float64  `json:"runs_per_sec"`
	VsHost      *float64 `json:"vs_host,omitempty"` // runs/s ÷ the host baseline's runs/s
	VsRunc      *float64 `json:"vs_runc,omitempty"`
	// CPU per successful run, milliseconds: everything (CPUMS), of which
	// the path's own cgroup, containerd, and this process with its reaped
	// children (see cpu.go). Absent when it cannot be accounted.
	CPUMS           *float64 `json:"cpu_ms_per_run,omitempty"`
	CPUCgroupMS     *float64 `json:"cpu_cgroup_ms_per_run,omitempty"`
	CPUContainerdMS *float64 `json:"cpu_containerd_ms_per_run,omitempty"`
	CPUCallerMS     *float64 `json:"cpu_caller_ms_per_run,omitempty"`
	CPUVsRunc       *float64 `json:"cpu_vs_runc,omitempty"` // CPU per run ÷ runc run's
	// CPUSandboxMS is CPUMS less the host's own run of the program: what
	// the isolation costs per run, the program's own work aside.
	CPUSandboxMS *float64 `json:"cpu_sandbox_ms_per_run,omitempty"`
}

// rounds splits a throughput measurement so that comparators alternate.
const rounds = 3

// MeasureThroughput runs count programs per comparator with concurrency
// clients each, in rounds that alternate between comparators, and reports
// successful runs per second of wall time.
func MeasureThroughput(ctx context.Context, comps []Comparator, concurrency, count int, opt Options) []Throughput {
	out := make([]Throughput, len(comps))
	elapsed := make([]time.Duration, len(comps))
	for i, c := range comps {
		out[i] = Throughput{Name: c.Name, Group: c.Group, Concurrency: concurrency}
	}
	cpu := newCPUTally(comps, opt.Shared)
	cpu.quiesce(ctx, -1)
	cpu.begin()
	start := time.Now()
	for round := range rounds {
		per := count / rounds
		if round < count%rounds {
			per++
		}
		for k := range comps {
			if ctx.Err() != nil || opt.Budget > 0 && time.Since(start) > opt.Budget {
				break
			}
			i := (round + k) % len(comps)
			s0 := cpu.shared()
			d, ok, nerr, err := parallel(ctx, comps[i], concurrency, per, opt.runTimeout())
			elapsed[i] += d
			out[i].Runs += ok
			out[i].Errors += nerr
			if err != nil && out[i].FirstError == "" {
				out[i].FirstError = err.Error()
			}
			// The round's background work (deletions, refills) is its own.
			if comps[i].Settle != nil {
				comps[i].Settle()
			}
			cpu.quiesce(ctx, i)
			cpu.charge(i, s0)
		}
	}
	cpu.end()
	cpu.report(out)
	rates := make([]float64, len(comps))
	for i := range out {
		out[i].Seconds = round3(elapsed[i].Seconds())
		if elapsed[i] > 0 {
			rates[i] = float64(out[i].Runs) / elapsed[i].Seconds()
			out[i].RunsPerSec = round3(rates[i])
		}
	}
	for i := range out {
		if h := baseline(comps, rates, out[i].Group, RoleHost); h != nil {
			out[i].VsHost = ratio(rates[i], *h)
		}
		if r := baseline(comps, rates, out[i].Group, RoleRunc); r != nil {
			out[i].VsRunc = ratio(rates[i], *r)
		}
	}
	return out
}

// parallel runs c count times with n workers and returns the wall time, the
// successes, the failures and the first failure.
func parallel(ctx context.Context, c Comparator, n, count int, timeout time.Duration) (time.Duration, int, int, error) {
	var (
		next, ok, failed atomic.Int64
		mu               sync.Mutex
		first            error
		wg               sync.WaitGroup
	)
	t0 := time.Now()
	for range min(n, count) {
		wg.Go(func() {
			for next.Add(1) <= int64(count) && ctx.Err() == nil {
				if _, err := timeRun(ctx, c, timeout); err != nil {
					failed.Add(1)
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return time.Since(t0), int(ok.Load()), int(failed.Load()), first
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// ErrOutput means a run succeeded but printed something else than expected.
var ErrOutput = errors.New("unexpected output")

// CheckOutput returns nil when got is want, else an ErrOutput naming both.
func CheckOutput(got, want string) error {
	if got == want {
		return nil
	}
	if len(got) > 200 {
		got = got[:200] + "…"
	}
	return fmt.Errorf("%w: got %q, want %q", ErrOutput, got, want)
}

// MeasureBurst runs each comparator n times back to back with no gap, as an
// agent's burst of calls arrives, after an untimed pause that lets pools
// refill; rounds times each, in shuffled order. Every call's latency counts.
func MeasureBurst(ctx context.Context, comps []Comparator, n, rounds int, pause time.Duration, opt Options) []Latency {
	samples := make([][]time.Duration, len(comps))
	errs := make([]error, len(comps))
	nerr := make([]int, len(comps))
	rng := rand.New(rand.NewPCG(3, 4))
	order := make([]int, len(comps))
	for i := range order {
		order[i] = i
	}
	start := time.Now()
	for range rounds {
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, i := range order {
			if ctx.Err() != nil || opt.Budget > 0 && time.Since(start) > opt.Budget {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
			for range n {
				d, err := timeRun(ctx, comps[i], opt.runTimeout())
				if err != nil {
					nerr[i]++
					if errs[i] == nil {
						errs[i] = err
					}
					continue
				}
				samples[i] = append(samples[i], d)
			}
		}
	}
	return summarizeLatency(comps, samples, errs, nerr)
}
