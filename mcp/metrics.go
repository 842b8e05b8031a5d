package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
)

// Health reports containerd's reachability and the images' status.
// *runtime.Runtime implements it.
type Health interface {
	Health(ctx context.Context) sandpit.HealthReport
}

// latencyWindow is how many recent runs the percentiles cover.
const latencyWindow = 1000

// metrics counts what the server did since it started. All methods are safe
// for concurrent use and on a nil *metrics (they do nothing).
type metrics struct {
	started  time.Time
	inFlight atomic.Int64

	mu         sync.Mutex
	byStatus   map[sandpit.Status]int64
	byLanguage map[string]int64
	rejected   int64 // bad input: never reached a sandbox
	failed     int64 // the runtime failed (containerd down, image missing, ...)
	oom        int64
	latency    ring // end-to-end Run time, ms
	recordUS   ring // time to record a run in the history, µs
	recordErrs int64
}

func newMetrics() *metrics {
	return &metrics{
		started:    time.Now(),
		byStatus:   map[sandpit.Status]int64{},
		byLanguage: map[string]int64{},
		latency:    newRing(latencyWindow),
		recordUS:   newRing(latencyWindow),
	}
}

// reject counts a request refused before it reached the runtime.
func (m *metrics) reject() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.rejected++
	m.mu.Unlock()
}

// begin marks a run in flight; call the returned func with its outcome.
func (m *metrics) begin() func(lang string, res *sandpit.Result, err error) {
	if m == nil {
		return func(string, *sandpit.Result, error) {}
	}
	m.inFlight.Add(1)
	t := time.Now()
	return func(lang string, res *sandpit.Result, err error) {
		m.inFlight.Add(-1)
		elapsed := time.Since(t)
		m.mu.Lock()
		defer m.mu.Unlock()
		switch {
		case err != nil && (errors.Is(err, sandpit.ErrInvalidArgument)):
			m.rejected++
		case err != nil || res == nil:
			m.failed++
		default:
			if res.Language != "" {
				lang = res.Language
			}
			m.byStatus[res.Status]++
			m.byLanguage[lang]++
			if res.Status == sandpit.StatusOOM || res.Usage.OOMKilled {
				m.oom++
			}
			m.latency.add(elapsed.Milliseconds())
		}
	}
}

func (m *metrics) recorded(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recordUS.add(d.Microseconds())
	if err != nil {
		m.recordErrs++
	}
}

// ring keeps the last n values.
type ring struct {
	vals []int64
	next int
}

func newRing(n int) ring { return ring{vals: make([]int64, 0, n)} }

func (r *ring) add(v int64) {
	if len(r.vals) < cap(r.vals) {
		r.vals = append(r.vals, v)
		return
	}
	r.vals[r.next] = v
	r.next = (r.next + 1) % cap(r.vals)
}

// percentiles returns the nearest-rank percentiles ps (0-100) of the values.
func (r *ring) percentiles(ps ...float64) []int64 {
	out := make([]int64, len(ps))
	if len(r.vals) == 0 {
		return out
	}
	sorted := slices.Clone(r.vals)
	slices.Sort(sorted)
	for i, p := range ps {
		rank := int(p/100*float64(len(sorted))+0.999999) - 1
		out[i] = sorted[min(max(rank, 0), len(sorted)-1)]
	}
	return out
}

// MetricsResult is get_sandbox_metrics' structured output.
type MetricsResult struct {
	Runs       RunMetrics            `json:"runs"`
	History    *HistoryMetrics       `json:"history,omitempty" jsonschema:"the cost of recording runs; absent when history is off"`
	Server     ServerMetrics         `json:"server"`
	Host       HostMetrics           `json:"host"`
	Containerd *sandpit.HealthReport `json:"containerd,omitempty" jsonschema:"containerd reachability, version and image status"`
	Sessions   *SessionMetrics       `json:"sessions,omitempty" jsonschema:"open sessions with their memory and CPU; absent when sessions are off"`
}

// SessionMetrics summarises the open sessions.
type SessionMetrics struct {
	Open        int                   `json:"open"`
	Max         int                   `json:"max"`
	MemoryBytes uint64                `json:"memory_bytes" jsonschema:"memory the open sessions' sandboxes hold now, together"`
	Background  int                   `json:"background_runs" jsonschema:"background runs in flight"`
	List        []sandpit.SessionInfo `json:"list"`
}

// RunMetrics counts runs since the server started.
type RunMetrics struct {
	Total      int64            `json:"total" jsonschema:"runs that reached a sandbox and produced a result"`
	ByStatus   map[string]int64 `json:"by_status"`
	ByLanguage map[string]int64 `json:"by_language"`
	InFlight   int64            `json:"in_flight"`
	Rejected   int64            `json:"rejected" jsonschema:"requests refused for bad input; not recorded as runs"`
	Failed     int64            `json:"failed" jsonschema:"requests the runtime could not serve (containerd or image unavailable)"`
	OOM        int64            `json:"oom"`
	Timeouts   int64            `json:"timeouts"`
	Latency    Latency          `json:"latency" jsonschema:"end-to-end run_code latency, sandbox setup and teardown included"`
}

// Latency summarises recent durations.
type Latency struct {
	Window int   `json:"window" jsonschema:"how many recent runs the percentiles cover"`
	P50MS  int64 `json:"p50_ms"`
	P90MS  int64 `json:"p90_ms"`
	P99MS  int64 `json:"p99_ms"`
}

// HistoryMetrics is what recording the history costs each run.
type HistoryMetrics struct {
	Window int   `json:"window"`
	P50US  int64 `json:"record_p50_us"`
	P99US  int64 `json:"record_p99_us"`
	Errors int64 `json:"record_errors"`
}

// ServerMetrics describes this server process.
type ServerMetrics struct {
	PID           int     `json:"pid"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	RSSBytes      int64   `json:"rss_bytes"`
	PeakRSSBytes  int64   `json:"peak_rss_bytes"`
	CPUUserMS     int64   `json:"cpu_user_ms"`
	CPUSystemMS   int64   `json:"cpu_system_ms"`
	Goroutines    int     `json:"goroutines"`
}

// HostMetrics describes the machine.
type HostMetrics struct {
	CPUs              int     `json:"cpus"`
	Load1             float64 `json:"load1"`
	Load5             float64 `json:"load5"`
	Load15            float64 `json:"load15"`
	MemTotalBytes     int64   `json:"mem_total_bytes"`
	MemAvailableBytes int64   `json:"mem_available_bytes"`
}

func (m *metrics) snapshot() RunMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := RunMetrics{
		ByStatus:   map[string]int64{},
		ByLanguage: map[string]int64{},
		InFlight:   m.inFlight.Load(),
		Rejected:   m.rejected,
		Failed:     m.failed,
		OOM:        m.oom,
		Timeouts:   m.byStatus[sandpit.StatusTimeout],
	}
	for s, n := range m.byStatus {
		out.ByStatus[string(s)] = n
		out.Total += n
	}
	for l, n := range m.byLanguage {
		out.ByLanguage[l] = n
	}
	p := m.latency.percentiles(50, 90, 99)
	out.Latency = Latency{Window: len(m.latency.vals), P50MS: p[0], P90MS: p[1], P99MS: p[2]}
	return out
}

func (m *metrics) historySnapshot() *HistoryMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.recordUS.percentiles(50, 99)
	return &HistoryMetrics{Window: len(m.recordUS.vals), P50US: p[0], P99US: p[1], Errors: m.recordErrs}
}

func metricsTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("get_sandbox_metrics",
		mcpgo.WithDescription("Report what this sandbox server has done and how it is doing: runs by status and language, run latency percentiles, runs in flight, rejected requests, OOMs and timeouts; open sessions with their memory and CPU; the server's memory and CPU; the host's load and free memory; whether containerd is reachable, its version, and whether the language images are present."),
		mcpgo.WithOutputSchema[MetricsResult](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, _ noArgs) (any, string, error) {
		out := MetricsResult{
			Runs:   cfg.metrics.snapshot(),
			Server: serverMetrics(cfg.metrics.started),
			Host:   hostMetrics(),
		}
		if cfg.History != nil {
			out.History = cfg.metrics.historySnapshot()
		}
		if cfg.Sessions != nil {
			list := cfg.Sessions.Sessions()
			sm := &SessionMetrics{Open: len(list), Max: cfg.SessionLimits.Max, List: list}
			for _, s := range list {
				sm.MemoryBytes += s.MemoryBytes
			}
			cfg.Runs.mu.Lock()
			sm.Background = cfg.Runs.background
			cfg.Runs.mu.Unlock()
			out.Sessions = sm
		}
		if cfg.Health != nil {
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			h := cfg.Health.Health(hctx)
			cancel()
			out.Containerd = &h
		}
		return out, formatMetrics(out), nil
	})
}

func formatMetrics(m MetricsResult) string {
	var b strings.Builder
	r := m.Runs
	fmt.Fprintf(&b, "runs: %d total, %d in flight, %d rejected, %d failed, %d oom, %d timeouts\n",
		r.Total, r.InFlight, r.Rejected, r.Failed, r.OOM, r.Timeouts)
	fmt.Fprintf(&b, "by status: %s\nby language: %s\n", formatCounts(r.ByStatus), formatCounts(r.ByLanguage))
	fmt.Fprintf(&b, "latency over the last %d runs: p50 %d ms, p90 %d ms, p99 %d ms\n",
		r.Latency.Window, r.Latency.P50MS, r.Latency.P90MS, r.Latency.P99MS)
	if h := m.History; h != nil {
		fmt.Fprintf(&b, "history recording: p50 %d µs, p99 %d µs, %d errors\n", h.P50US, h.P99US, h.Errors)
	}
	s := m.Server
	fmt.Fprintf(&b, "server: pid %d, up %.0f s, rss %d MiB (peak %d MiB), cpu %d ms user + %d ms system, %d goroutines\n",
		s.PID, s.UptimeSeconds, s.RSSBytes>>20, s.PeakRSSBytes>>20, s.CPUUserMS, s.CPUSystemMS, s.Goroutines)
	h := m.Host
	fmt.Fprintf(&b, "host: %d cpus, load %.2f %.2f %.2f, memory %d MiB available of %d MiB\n",
		h.CPUs, h.Load1, h.Load5, h.Load15, h.MemAvailableBytes>>20, h.MemTotalBytes>>20)
	if sm := m.Sessions; sm != nil {
		fmt.Fprintf(&b, "sessions: %d open of at most %d, %d MiB together; %d background runs\n", sm.Open, sm.Max, sm.MemoryBytes>>20, sm.Background)
		for _, s := range sm.List {
			fmt.Fprintf(&b, "session %s: %s, %d calls, memory %d MiB (peak %d MiB), cpu %d ms\n", s.Name, s.Language, s.Calls, s.MemoryBytes>>20, s.MemoryPeakBytes>>20, s.CPUUserMS+s.CPUSystemMS)
		}
	}
	if c := m.Containerd; c != nil {
		if c.Reachable {
			fmt.Fprintf(&b, "containerd: reachable at %s, version %s, runtime %s, rootless %t, user namespace %t\n",
				c.ContainerdAddress, c.ContainerdVersion, c.Runtime, c.Rootless, c.UserNamespace)
		} else {
			fmt.Fprintf(&b, "containerd: NOT reachable at %s: %s\n", c.ContainerdAddress, c.Error)
		}
		for _, im := range c.Images {
			state := "present"
			if !im.Present {
				state = "missing"
			}
			fmt.Fprintf(&b, "image %s: %s %s\n", im.Ref, state, formatVersions(im.Versions))
		}
	}
	return b.String()
}

func formatCounts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func formatVersions(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + m[k]
	}
	return strings.Join(parts, ", ")
}

func serverMetrics(started time.Time) ServerMetrics {
	s := ServerMetrics{
		PID:           os.Getpid(),
		UptimeSeconds: time.Since(started).Seconds(),
		Goroutines:    goruntime.NumGoroutine(),
	}
	s.RSSBytes, s.PeakRSSBytes, _ = host.SelfMemory()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.CPUUserMS = ru.Utime.Sec*1000 + int64(ru.Utime.Usec)/1000
		s.CPUSystemMS = ru.Stime.Sec*1000 + int64(ru.Stime.Usec)/1000
	}
	return s
}

func hostMetrics() HostMetrics {
	h := HostMetrics{CPUs: goruntime.NumCPU()}
	h.Load1, h.Load5, h.Load15, _ = host.Load()
	h.MemTotalBytes, h.MemAvailableBytes, _ = host.Memory()
	return h
}
