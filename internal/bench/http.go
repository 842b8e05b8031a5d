package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/auth"
)

// The HTTP bench (`sandpit bench --http`): `sandpit serve --listen` on
// loopback, driven by mcp-go's Streamable HTTP client, measured in five
// parts (issue 25):
//
//	http-latency:    warm run_code over HTTP against over stdio, interleaved
//	http-concurrent: many clients at once, every call's output checked
//	http-idle:       many initialized sessions held open: the server's RSS
//	http-flood:      run_code while unauthenticated requests flood the port
//	http-fair:       one tenant's run_code while another runs flat out
//
// Every client has its own HTTP transport (its own keep-alive connection),
// as separate agents would. Nothing here asserts a speed: it reports.

// HTTPParts are the parts of the HTTP bench, in the order they run: the
// idle sessions last, since they hold the most.
// http-cluster (cluster.go) needs a Kubernetes API server
// (ClusterKubeconfig): without one it is skipped, saying so.
var HTTPParts = []string{"http-latency", "http-concurrent", "http-fair", "http-flood", "http-idle", "http-cluster"}

// HTTPConfig is one `sandpit bench --http`.
type HTTPConfig struct {
	// Suite gives the runtime, dirs, serve binary and flags, Options (N,
	// Warmup, Gap, Budget for http-latency; Gap also between the measured
	// calls of http-flood and http-fair), Version and Command.
	Suite SuiteConfig
	// Parts to run (HTTPParts' names); empty: all.
	Parts []string
	// Clients × Calls for http-concurrent (issue: 50 × 20).
	Clients, Calls int
	// Idle sessions for http-idle (issue: 1,000).
	Idle int
	// FloodRate requests/s over FloodConns keep-alive connections for
	// LoadTime, in http-flood; LoadTime is also each phase of http-fair.
	FloodRate, FloodConns int
	LoadTime              time.Duration
	// FairClients run flat out as tenant A in http-fair (issue: 8).
	FairClients int
	// ClusterKubeconfig is the API server http-cluster runs its nodes and
	// front door against; "" skips http-cluster. ClusterClients (one a
	// tenant) run flat out in its throughput (issue: 8).
	ClusterKubeconfig string
	ClusterClients    int
}

// HTTPReport is what the HTTP bench measured.
type HTTPReport struct {
	// Server is how the HTTP server was started (its flags beyond the
	// runtime's), Protocol the MCP version the measuring clients negotiated.
	Server   string `json:"server"`
	Protocol string `json:"protocol,omitempty"`

	// Latency: the same warm run_code over stdio and over HTTP.
	Latency []Latency `json:"latency,omitempty"`
	// HTTPMinusStdio*MS: HTTP's median and p90 less stdio's.
	HTTPMinusStdioP50MS *float64 `json:"http_minus_stdio_p50_ms,omitempty"`
	HTTPMinusStdioP90MS *float64 `json:"http_minus_stdio_p90_ms,omitempty"`

	Concurrent *HTTPConcurrent `json:"concurrent,omitempty"`
	Idle       *HTTPIdle       `json:"idle,omitempty"`
	Flood      *HTTPFlood      `json:"flood,omitempty"`
	Fair       *HTTPFair       `json:"fair,omitempty"`
	Cluster    *HTTPCluster    `json:"cluster,omitempty"`
}

// HTTPConcurrent is Clients clients making Calls calls each, all at once.
type HTTPConcurrent struct {
	Clients    int     `json:"clients"`
	Calls      int     `json:"calls_per_client"`
	Tenants    int     `json:"tenants"` // the clients are spread over these
	OK         int     `json:"ok"`      // calls that printed what they should
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	P50MS      float64 `json:"p50_ms"`
	P99MS      float64 `json:"p99_ms"`
	MaxMS      float64 `json:"max_ms"`
	Seconds    float64 `json:"seconds"`
	RunsPerSec float64 `json:"runs_per_sec"`
}

// HTTPIdle is Sessions initialized sessions held open with no traffic.
type HTTPIdle struct {
	Sessions int `json:"sessions"` // asked for
	Tenants  int `json:"tenants"`
	Opened   int `json:"opened"`
	// Retried: opens refused 429 at first and tried again once, 5 s later
	// (the answer's Retry-After).
	Retried      int    `json:"retried"`
	FirstRefusal string `json:"first_refusal,omitempty"`
	Errors       int    `json:"errors"`
	FirstError   string `json:"first_error,omitempty"`
	// Alive: sessions that answered tools/list after all were open.
	Alive int `json:"alive"`
	// Server RSS (MiB): before, with one session per tenant (the tenants
	// built), with all open, and after they were closed.
	RSSBeforeMiB  float64 `json:"rss_before_mib"`
	RSSTenantsMiB float64 `json:"rss_tenants_mib"`
	RSSOpenMiB    float64 `json:"rss_open_mib"`
	RSSClosedMiB  float64 `json:"rss_closed_mib"`
	// KiBPerSession: (open − tenants) ÷ the sessions opened beyond one a
	// tenant.
	KiBPerSession float64 `json:"kib_per_session"`
	// Bound is what limits the sessions a server holds; OneMore is the
	// answer to one session beyond a full tenant's cap.
	Bound   string `json:"bound"`
	OneMore string `json:"one_more"`
}

// HTTPFlood is run_code quiet against under a flood of unauthenticated
// requests.
type HTTPFlood struct {
	TargetRate int     `json:"target_rate"`
	Conns      int     `json:"connections"`
	Seconds    float64 `json:"seconds"`
	Sent       int64   `json:"sent"`
	Rate       float64 `json:"rate"`         // requests/s achieved
	Refused    int64   `json:"unauthorized"` // answered 401
	// Other: any other status (the first in OtherStatus); Failed: no
	// answer (the first error in FirstError).
	Other       int64  `json:"other"`
	OtherStatus string `json:"other_status,omitempty"`
	Failed      int64  `json:"failed"`
	FirstError  string `json:"first_error,omitempty"`
	// CPU during the flood: the server's (all of it: the refusals and
	// the measured calls), that ÷ Sent, and this process's (the
	// generator and the measuring client).
	ServerCPUSeconds      float64  `json:"server_cpu_seconds"`
	ServerCPUPerRequestUS float64  `json:"server_cpu_per_request_us"`
	BenchCPUSeconds       float64  `json:"bench_cpu_seconds"`
	Quiet                 Latency  `json:"quiet"`
	Flooded               Latency  `json:"flooded"`
	Ratio                 *float64 `json:"ratio,omitempty"` // flooded p50 ÷ quiet p50
}

// HTTPFair is tenant B's run_code alone against while tenant A runs
// Clients clients flat out.
type HTTPFair struct {
	Clients   int     `json:"a_clients"`
	ARuns     int     `json:"a_runs"`
	AErrors   int     `json:"a_errors"`
	ARunsPerS float64 `json:"a_runs_per_sec"`
	// AP50MS is tenant A's own call latency meanwhile (its slot waits in).
	AP50MS     float64  `json:"a_p50_ms"`
	FirstError string   `json:"a_first_error,omitempty"`
	Alone      Latency  `json:"b_alone"`
	Loaded     Latency  `json:"b_loaded"`
	Ratio      *float64 `json:"ratio,omitempty"` // loaded p50 ÷ alone p50
}

// sessionsPerTenant is the front's default cap on one tenant's live
// sessions (front.Limits.MaxSessionsPerTenant; serve has no flag for it).
const sessionsPerTenant = 32

// clientsPerTenant spreads http-concurrent's clients over tenants, so the
// per-tenant bounds (runs in flight, runs waiting, streams) are not what
// is measured.
const clientsPerTenant = 10

// RunHTTP runs the HTTP bench and returns its report. Everything it
// started is stopped and removed before it returns, as Run's.
func RunHTTP(ctx context.Context, hc HTTPConfig) (*Report, error) {
	for _, p := range hc.Parts {
		if !slices.Contains(HTTPParts, p) {
			return nil, fmt.Errorf("--only %q: the HTTP bench's parts are %s", p, strings.Join(HTTPParts, ", "))
		}
	}
	want := func(p string) bool { return len(hc.Parts) == 0 || slices.Contains(hc.Parts, p) }
	hc.Clients, hc.Calls, hc.Idle = max(hc.Clients, 1), max(hc.Calls, 1), max(hc.Idle, 1)
	hc.FloodRate, hc.FloodConns, hc.FairClients = max(hc.FloodRate, 1), max(hc.FloodConns, 1), max(hc.FairClients, 1)
	hc.ClusterClients = max(hc.ClusterClients, 1)
	if hc.LoadTime <= 0 {
		hc.LoadTime = 10 * time.Second
	}
	cfg := hc.Suite
	cfg.Runtime.Defaults()
	b := &suite{cfg: cfg, addr: cfg.Runtime.Address, dir: cfg.Dir, prefix: cfg.Prefix}
	if b.prefix == "" {
		b.prefix = "bench"
	}
	b.report = Report{
		Command: cfg.Command,
		Program: `python: print(N), N different for every call, over MCP run_code`,
		Machine: Describe(),
		Warmup:  cfg.Options.Warmup,
		GapMS:   cfg.Options.Gap.Milliseconds(),
		HTTP:    &HTTPReport{},
	}
	defer b.close()
	if err := b.runHTTP(ctx, hc, want); err != nil {
		return &b.report, err
	}
	b.close()
	b.report.Machine.LoadAfter = LoadAverage()
	if len(b.report.Leftovers) > 0 {
		return &b.report, fmt.Errorf("the bench left %d things behind", len(b.report.Leftovers))
	}
	return &b.report, nil
}

// tenant names of the HTTP bench.
func idleTenant(i int) string { return fmt.Sprintf("idle-%03d", i) }
func concTenant(i int) string { return fmt.Sprintf("conc-%02d", i) }

func (b *suite) runHTTP(ctx context.Context, hc HTTPConfig, want func(string) bool) error {
	hr := b.report.HTTP
	cl, err := b.dial()
	if err != nil {
		return err
	}
	b.closers = append(b.closers, func(context.Context) error { return cl.Close() })
	v := b.report.Machine.Versions
	if ver, err := cl.Version(ctx); err == nil {
		v["containerd"] = ver.Version
	}
	v["runc"] = CommandVersion(ctx, b.cfg.Runtime.RuncBinary, "--version")
	v["sandpit"] = b.cfg.Version

	if slices.ContainsFunc(HTTPParts, func(p string) bool { return p != "http-cluster" && want(p) }) {
		if err := b.runSingle(ctx, hc, want); err != nil {
			return err
		}
	}
	if want("http-cluster") && ctx.Err() == nil {
		if hc.ClusterKubeconfig == "" {
			b.report.Unavailable = append(b.report.Unavailable, Unavailable{Name: "http-cluster",
				Reason: "skipped: no --cluster-kubeconfig (a running Kubernetes API server, e.g. from scripts/k8s.sh up DIR)"})
		} else {
			var err error
			if hr.Cluster, err = b.httpCluster(ctx, hc); err != nil {
				b.report.Unavailable = append(b.report.Unavailable, Unavailable{Name: "http-cluster", Reason: err.Error()})
			}
		}
	}
	return nil
}

// runSingle runs the parts against one `sandpit serve --listen`.
func (b *suite) runSingle(ctx context.Context, hc HTTPConfig, want func(string) bool) error {
	hr := b.report.HTTP
	// Tokens first: the server re-reads its token file at most once a
	// second, and a token it has not seen yet would be refused.
	data := filepath.Join(b.dir, "http-data")
	store, err := auth.OpenTokens(data)
	if err != nil {
		return err
	}
	tokens := map[string]string{}
	names := []string{"lat", "flood", "fair-a", "fair-b"}
	nConc := (hc.Clients + clientsPerTenant - 1) / clientsPerTenant
	for i := range nConc {
		names = append(names, concTenant(i))
	}
	nIdle := (hc.Idle + sessionsPerTenant - 1) / sessionsPerTenant
	if want("http-idle") {
		for i := range nIdle {
			names = append(names, idleTenant(i))
		}
	}
	for _, n := range names {
		if tokens[n], err = store.Create(n); err != nil {
			return err
		}
	}

	// Room for every idle client's connection, the flood's and the rest.
	conns := hc.Clients + hc.FloodConns + hc.FairClients + 64
	if want("http-idle") {
		conns += hc.Idle + 1
	}
	extra := []string{"--pool=2", fmt.Sprintf("--max-connections=%d", conns), fmt.Sprintf("--max-tenants=%d", len(names)+8)}
	hr.Server = "sandpit serve --listen 127.0.0.1:0 " + strings.Join(extra, " ") + " (other limits at their defaults: --concurrency 16, --tenant-max-concurrent half the CPUs, at least 2)"
	srv, err := b.startHTTP(ctx, "sandpit-http", data, extra)
	if err != nil {
		return err
	}
	connect := func(ctx context.Context, tenant, version string) (*httpConn, error) {
		c, res, err := srv.connect(ctx, tokens[tenant], version, b.cfg.Version)
		if err == nil && hr.Protocol == "" && version == "" {
			hr.Protocol = res.ProtocolVersion
		}
		return c, err
	}
	code := b.codeSeq()
	opt := b.cfg.Options

	if want("http-latency") && ctx.Err() == nil {
		if err := b.httpLatency(ctx, connect, code, opt); err != nil {
			b.report.Unavailable = append(b.report.Unavailable, Unavailable{Name: "http-latency", Reason: err.Error()})
		}
	}
	if want("http-concurrent") && ctx.Err() == nil {
		hr.Concurrent = b.httpConcurrent(ctx, connect, code, hc.Clients, hc.Calls, nConc)
	}
	if want("http-fair") && ctx.Err() == nil {
		if hr.Fair, err = b.httpFair(ctx, connect, code, hc.FairClients, hc.LoadTime, opt.Gap); err != nil {
			b.report.Unavailable = append(b.report.Unavailable, Unavailable{Name: "http-fair", Reason: err.Error()})
		}
	}
	if want("http-flood") && ctx.Err() == nil {
		if hr.Flood, err = b.httpFlood(ctx, srv, connect, code, hc, opt.Gap); err != nil {
			b.report.Unavailable = append(b.report.Unavailable, Unavailable{Name: "http-flood", Reason: err.Error()})
		}
	}
	if want("http-idle") && ctx.Err() == nil {
		hr.Idle = b.httpIdle(ctx, srv, connect, hc.Idle, nIdle, conns)
	}
	return nil
}

// codeSeq hands out programs that print a number no other call prints,
// so an answer that went to the wrong call (or tenant) fails the check.
func (b *suite) codeSeq() func() (code, want string) {
	return func() (string, string) {
		n := b.seq.Add(1)
		return fmt.Sprintf("print(%d)", n), fmt.Sprintf("%d\n", n)
	}
}

// runCheck is one run_code of a fresh program through c, checked.
func runCheck(c *client.Client, code func() (string, string)) func(context.Context) error {
	return func(ctx context.Context) error {
		src, want := code()
		return mcpRun(c, "python", src, want)(ctx)
	}
}

// httpLatency measures warm run_code over stdio and over HTTP, the
// servers alike (a pool of 2), in interleaved shuffled rounds.
func (b *suite) httpLatency(ctx context.Context, connect connectFunc, code func() (string, string), opt Options) error {
	hr := b.report.HTTP
	stdio, err := b.startServer(ctx, "sandpit-mcp-stdio", []string{"--pool=2"}, nil)
	if err != nil {
		return err
	}
	b.closers = append(b.closers, func(context.Context) error { return stdio.Close() })
	hc, err := connect(ctx, "lat", "")
	if err != nil {
		return err
	}
	b.closers = append(b.closers, func(context.Context) error { return hc.Close() })
	comps := []Comparator{
		{Name: "run_code over stdio", Group: "latency", Run: runCheck(stdio, code)},
		{Name: "run_code over HTTP", Group: "latency", Run: hc.run(code)},
	}
	hr.Latency = MeasureLatency(ctx, comps, opt)
	if s, h := hr.Latency[0], hr.Latency[1]; s.N > 0 && h.N > 0 {
		d50, d90 := round3(h.MedianMS-s.MedianMS), round3(h.P90MS-s.P90MS)
		hr.HTTPMinusStdioP50MS, hr.HTTPMinusStdioP90MS = &d50, &d90
	}
	return nil
}

type connectFunc func(ctx context.Context, tenant, version string) (*httpConn, error)

// httpConn is a client with its own HTTP transport: closing it ends the
// session (DELETE) and then the connection.
type httpConn struct {
	*client.Client
	tr  *http.Transport
	rec *lastRefusal
}

// run is runCheck through c, a refusal's reason added to its error.
func (c *httpConn) run(code func() (string, string)) func(context.Context) error {
	run := runCheck(c.Client, code)
	return func(ctx context.Context) error {
		c.rec.reset()
		if err := run(ctx); err != nil {
			return c.rec.explain(err)
		}
		return nil
	}
}

// lastRefusal keeps the last answer of 400 or more a transport got since
// its reset, for errors: mcp-go's say "4xx" without the status or the
// server's reason.
type lastRefusal struct {
	base http.RoundTripper
	mu   sync.Mutex
	last *refusal
}

// refusal is an HTTP answer of 400 or more.
type refusal struct {
	Method string
	Status int
	Text   string // status line and the start of the body
}

func (r *refusal) Error() string { return r.Method + " " + r.Text }

func (l *lastRefusal) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := l.base.RoundTrip(r)
	if err == nil && res.StatusCode >= 400 {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		res.Body.Close()
		res.Body = io.NopCloser(strings.NewReader(string(body)))
		l.mu.Lock()
		l.last = &refusal{Method: r.Method, Status: res.StatusCode, Text: res.Status + ": " + strings.TrimSpace(string(body))}
		l.mu.Unlock()
	}
	return res, err
}

func (l *lastRefusal) reset() {
	l.mu.Lock()
	l.last = nil
	l.mu.Unlock()
}

// explain adds the last refusal to err.
func (l *lastRefusal) explain(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last != nil {
		return fmt.Errorf("%w (last refusal: %w)", err, l.last)
	}
	return err
}

func (c *httpConn) Close() error {
	err := c.Client.Close()
	c.tr.CloseIdleConnections()
	return err
}

// httpConcurrent connects clients clients (over tenants tenants), then
// starts them at once, each making calls calls back to back.
func (b *suite) httpConcurrent(ctx context.Context, connect connectFunc, code func() (string, string), clients, calls, tenants int) *HTTPConcurrent {
	out := &HTTPConcurrent{Clients: clients, Calls: calls, Tenants: tenants}
	var first errOnce
	cs := make([]*httpConn, clients)
	forEach(clients, 16, func(i int) {
		c, err := connect(ctx, concTenant(i%tenants), "")
		if err != nil {
			first.set(fmt.Errorf("connect: %w", err))
			return
		}
		cs[i] = c
	})
	defer forEach(clients, 16, func(i int) {
		if cs[i] != nil {
			cs[i].Close()
		}
	})
	var (
		mu      sync.Mutex
		samples []time.Duration
		nerr    int
		wg      sync.WaitGroup
	)
	start := make(chan struct{})
	for _, c := range cs {
		if c == nil {
			nerr += calls
			continue
		}
		run := c.run(code)
		wg.Go(func() {
			<-start
			for range calls {
				d, err := timeRun(ctx, Comparator{Run: run}, runTimeout)
				mu.Lock()
				if err != nil {
					nerr++
					first.set(err)
				} else {
					samples = append(samples, d)
				}
				mu.Unlock()
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	wall := time.Since(t0)
	out.OK, out.Errors, out.FirstError = len(samples), nerr, first.String()
	out.P50MS, out.P99MS = ms(Percentile(samples, 50)), ms(Percentile(samples, 99))
	out.MaxMS = ms(Percentile(samples, 100))
	out.Seconds = round3(wall.Seconds())
	if wall > 0 {
		out.RunsPerSec = round3(float64(len(samples)) / wall.Seconds())
	}
	return out
}

// phases measures run (with gap before each call) for d alone, for d
// while load runs, and for d alone again; quiet is both alone phases.
// load starts the load and returns its stop; the load is given ramp to
// get going before the measured calls start.
func phases(ctx context.Context, name string, run func(context.Context) error, d, gap, ramp time.Duration, load func() (stop func())) (quiet, loaded Latency) {
	var q, l sample
	q.measure(ctx, run, d, gap)
	stop := load()
	sleep(ctx, ramp)
	l.measure(ctx, run, d, gap)
	stop()
	q.measure(ctx, run, d, gap)
	return q.latency(name + " quiet"), l.latency(name + " loaded")
}

type sample struct {
	d     []time.Duration
	nerr  int
	first error
}

// measure calls run, gap apart, until d has passed (at least once).
func (s *sample) measure(ctx context.Context, run func(context.Context) error, d, gap time.Duration) {
	end := time.Now().Add(d)
	for first := true; first || time.Now().Before(end); first = false {
		if ctx.Err() != nil {
			return
		}
		sleep(ctx, gap)
		t, err := timeRun(ctx, Comparator{Run: run}, runTimeout)
		if err != nil {
			s.nerr++
			if s.first == nil {
				s.first = err
			}
			continue
		}
		s.d = append(s.d, t)
	}
}

func (s *sample) latency(name string) Latency {
	st := Summarize(s.d)
	l := Latency{Name: name, N: st.N, Errors: s.nerr, MedianMS: ms(st.Median), P90MS: ms(st.P90), MinMS: ms(st.Min), MaxMS: ms(st.Max)}
	if s.first != nil {
		l.FirstError = s.first.Error()
	}
	return l
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// httpFair measures tenant B alone and while tenant A's clients run flat
// out.
func (b *suite) httpFair(ctx context.Context, connect connectFunc, code func() (string, string), clients int, d, gap time.Duration) (*HTTPFair, error) {
	out := &HTTPFair{Clients: clients}
	bc, err := connect(ctx, "fair-b", "")
	if err != nil {
		return nil, err
	}
	defer bc.Close()
	as := make([]*httpConn, clients)
	for i := range as {
		if as[i], err = connect(ctx, "fair-a", ""); err != nil {
			return nil, err
		}
		defer as[i].Close()
	}
	var (
		ok, nerr atomic.Int64
		first    errOnce
		elapsed  time.Duration
		amu      sync.Mutex
		adur     []time.Duration
	)
	load := func() func() {
		lctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		t0 := time.Now()
		for _, c := range as {
			run := c.run(code)
			wg.Go(func() {
				for lctx.Err() == nil {
					t0 := time.Now()
					err := run(lctx)
					switch {
					case lctx.Err() != nil: // cut by the stop: not counted
					case err != nil:
						nerr.Add(1)
						first.set(err)
					default:
						ok.Add(1)
						amu.Lock()
						adur = append(adur, time.Since(t0))
						amu.Unlock()
					}
				}
			})
		}
		return func() { cancel(); wg.Wait(); elapsed = time.Since(t0) }
	}
	out.Alone, out.Loaded = phases(ctx, "tenant B", bc.run(code), d, gap, time.Second, load)
	out.ARuns, out.AErrors, out.FirstError = int(ok.Load()), int(nerr.Load()), first.String()
	out.AP50MS = ms(Percentile(adur, 50))
	if elapsed > 0 {
		out.ARunsPerS = round3(float64(out.ARuns) / elapsed.Seconds())
	}
	if out.Alone.N > 0 && out.Loaded.N > 0 {
		out.Ratio = ratio(out.Loaded.MedianMS, out.Alone.MedianMS)
	}
	return out, nil
}

// httpFlood measures an authenticated client's run_code quiet and while
// unauthenticated requests (no token, or a wrong one) flood the server.
func (b *suite) httpFlood(ctx context.Context, srv *httpServer, connect connectFunc, code func() (string, string), hc HTTPConfig, gap time.Duration) (*HTTPFlood, error) {
	out := &HTTPFlood{TargetRate: hc.FloodRate, Conns: hc.FloodConns}
	c, err := connect(ctx, "flood", "")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var f *flooder
	var srvCPU, selfCPU time.Duration
	load := func() func() {
		s0, _ := procCPU(srv.pid())
		b0 := selfCPUTime()
		f = startFlood(ctx, srv.url, hc.FloodRate, hc.FloodConns)
		return func() {
			f.stop()
			s1, _ := procCPU(srv.pid())
			srvCPU, selfCPU = s1-s0, selfCPUTime()-b0
		}
	}
	out.Quiet, out.Flooded = phases(ctx, "run_code", c.run(code), hc.LoadTime, gap, 500*time.Millisecond, load)
	out.Seconds = round3(f.elapsed.Seconds())
	out.Sent, out.Refused, out.Other, out.Failed = f.sent.Load(), f.unauthorized.Load(), f.other.Load(), f.failed.Load()
	out.OtherStatus, out.FirstError = f.otherStatus.String(), f.firstErr.String()
	if f.elapsed > 0 {
		out.Rate = round3(float64(out.Sent) / f.elapsed.Seconds())
	}
	out.ServerCPUSeconds, out.BenchCPUSeconds = round3(srvCPU.Seconds()), round3(selfCPU.Seconds())
	if out.Sent > 0 {
		out.ServerCPUPerRequestUS = round3(float64(srvCPU.Microseconds()) / float64(out.Sent))
	}
	if out.Quiet.N > 0 && out.Flooded.N > 0 {
		out.Ratio = ratio(out.Flooded.MedianMS, out.Quiet.MedianMS)
	}
	return out, nil
}

// flooder sends unauthenticated MCP requests at a fixed rate over a fixed
// number of keep-alive connections.
type flooder struct {
	// sent counts requests answered or failed; one the stop cut is not
	// counted.
	sent, unauthorized, other, failed atomic.Int64
	otherStatus, firstErr             errOnce
	elapsed                           time.Duration
	stop                              func()
}

// floodBody is what a client's first request would be.
const floodBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`

// startFlood floods url with rate requests/s over conns connections until
// its stop is called. Requests are paced to a schedule: a sender that
// falls behind sends at once but never more than the schedule allows, so
// the rate reported is what the host could generate.
func startFlood(ctx context.Context, url string, rate, conns int) *flooder {
	f := &flooder{}
	ctx, cancel := context.WithCancel(ctx)
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var next atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	interval := time.Second / time.Duration(rate)
	for range conns {
		wg.Go(func() {
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				sleep(ctx, time.Until(t0.Add(time.Duration(k)*interval)))
				if ctx.Err() != nil {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(floodBody))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				if k%2 == 1 { // half with no token, half with a wrong one
					req.Header.Set("Authorization", fmt.Sprintf("Bearer sp_flood%016x", k))
				}
				res, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil { // not one the stop cut
						f.sent.Add(1)
						f.failed.Add(1)
						f.firstErr.set(err)
					}
					continue
				}
				f.sent.Add(1)
				io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
				res.Body.Close()
				if res.StatusCode == http.StatusUnauthorized {
					f.unauthorized.Add(1)
				} else {
					f.other.Add(1)
					f.otherStatus.set(errors.New(res.Status))
				}
			}
		})
	}
	f.stop = func() {
		cancel()
		wg.Wait()
		f.elapsed = time.Since(t0)
		tr.CloseIdleConnections()
	}
	return f
}

// httpIdle opens sessions initialized Streamable HTTP sessions (the
// session era of the protocol), each on its own connection, up to the
// per-tenant cap per tenant, and reports the server's RSS.
func (b *suite) httpIdle(ctx context.Context, srv *httpServer, connect connectFunc, sessions, tenants, conns int) *HTTPIdle {
	out := &HTTPIdle{Sessions: sessions, Tenants: tenants,
		Bound: fmt.Sprintf("%d sessions a tenant (the front's default; a session past it is refused) × --max-tenants; connections: --max-connections (here %d); a session idle past --http-session-idle (30m) is forgotten",
			sessionsPerTenant, conns)}
	var first errOnce
	var nerr atomic.Int64
	cs := make([]*httpConn, sessions)
	var retried atomic.Int64
	var firstRefusal errOnce
	open := func(i int) {
		c, err := connect(ctx, idleTenant(i/sessionsPerTenant), mcpgo.ProtocolVersion20251125)
		var r *refusal
		if errors.As(err, &r) && r.Status == http.StatusTooManyRequests {
			// As a client told to retry would (the front says
			// Retry-After: 5): a refusal at the cap can be a moment's.
			retried.Add(1)
			firstRefusal.set(err)
			sleep(ctx, 5*time.Second)
			c, err = connect(ctx, idleTenant(i/sessionsPerTenant), mcpgo.ProtocolVersion20251125)
		}
		if err == nil && c.GetSessionId() == "" {
			c.Close()
			err = errors.New("no session id: the server did not keep a session")
		}
		if err != nil {
			nerr.Add(1)
			first.set(err)
			return
		}
		cs[i] = c
	}
	settle := func() float64 { sleep(ctx, time.Second); return float64(procKB(srv.pid(), "VmRSS")) / 1024 }
	out.RSSBeforeMiB = round3(settle())
	// One per tenant first: what building the tenants costs apart.
	var firsts []int
	for t := range tenants {
		firsts = append(firsts, t*sessionsPerTenant)
	}
	forEach(len(firsts), 8, func(k int) { open(firsts[k]) })
	out.RSSTenantsMiB = round3(settle())
	// The rest, in an order that takes turns over the tenants: a client
	// opening its session holds one of its tenant's request streams
	// (front.Limits.MaxStreamsPerTenant, 32) for the time it takes.
	forEach(tenants*sessionsPerTenant, 32, func(k int) {
		if i := (k%tenants)*sessionsPerTenant + k/tenants; i < sessions && i%sessionsPerTenant != 0 {
			open(i)
		}
	})
	out.RSSOpenMiB = round3(settle())
	var alive atomic.Int64
	forEach(sessions, 32, func(i int) {
		if cs[i] == nil {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		// tools/list, not ping: mcp-go's Ping sends nothing on a modern
		// connection, and this one asks the session for something real.
		if _, err := cs[i].ListTools(pctx, mcpgo.ListToolsRequest{}); err != nil {
			first.set(fmt.Errorf("tools/list: %w", cs[i].rec.explain(err)))
			return
		}
		alive.Add(1)
	})
	for _, c := range cs {
		if c != nil {
			out.Opened++
		}
	}
	out.Alive, out.Errors, out.FirstError = int(alive.Load()), int(nerr.Load()), first.String()
	out.Retried, out.FirstRefusal = int(retried.Load()), firstRefusal.String()
	if beyond := out.Opened - tenants; beyond > 0 {
		out.KiBPerSession = round3((out.RSSOpenMiB - out.RSSTenantsMiB) * 1024 / float64(beyond))
	}
	if sessions >= sessionsPerTenant {
		c, err := connect(ctx, idleTenant(0), mcpgo.ProtocolVersion20251125)
		if err == nil {
			out.OneMore = "accepted (session " + c.GetSessionId() + ")"
			c.Close()
		} else {
			out.OneMore = "refused: " + err.Error()
		}
	}
	forEach(sessions, 32, func(i int) {
		if cs[i] != nil {
			cs[i].Close()
		}
	})
	out.RSSClosedMiB = round3(settle())
	return out
}

// selfCPUTime is this process's CPU time so far.
func selfCPUTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// forEach calls f(0..n-1) with at most par at once.
func forEach(n, par int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, par) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}

// errOnce keeps the first error set.
type errOnce struct {
	mu  sync.Mutex
	err error
}

func (e *errOnce) set(err error) {
	e.mu.Lock()
	if e.err == nil {
		e.err = err
	}
	e.mu.Unlock()
}

func (e *errOnce) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

// httpServer is a `sandpit serve --listen` the bench started.
type httpServer struct {
	url    string // the MCP endpoint
	cmd    *exec.Cmd
	exited chan struct{}
}

func (s *httpServer) pid() int { return s.cmd.Process.Pid }

var urlRE = regexp.MustCompile(`url=(https?://[^ ]+/mcp)`)

// startHTTP starts `sandpit serve --listen 127.0.0.1:0` with data as its
// --data-dir and waits for the URL it logs. Its info lines are read for
// that and dropped; warnings and errors go to the bench's stderr.
func (b *suite) startHTTP(ctx context.Context, name, data string, extra []string) (*httpServer, error) {
	if b.cfg.ServeBinary == "" {
		return nil, errors.New("no sandpit binary to serve from")
	}
	dir := filepath.Join(b.dir, name)
	args := []string{"--log-level", "info", "serve", "--listen", "127.0.0.1:0",
		"--address", b.addr, "--no-start", "--build-images=false",
		"--instance", b.instance(strings.TrimPrefix(name, "sandpit-")), "--state-dir", dir, "--data-dir", data,
	}
	args = append(append(args, b.cfg.ServeArgs...), extra...)
	cmd := exec.Command(b.cfg.ServeBinary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &httpServer{cmd: cmd, exited: make(chan struct{})}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if m := urlRE.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
			if !strings.Contains(line, "level=INFO") && !strings.Contains(line, "level=DEBUG") {
				fmt.Fprintln(os.Stderr, line)
			}
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
		close(s.exited)
	}()
	b.closers = append(b.closers, func(context.Context) error {
		defer os.RemoveAll(dir)
		return s.stop()
	})
	select {
	case s.url = <-found:
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("%s exited before serving: %v", name, cmd.ProcessState)
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("%s logged no URL in a minute", name)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// stop ends the server with SIGTERM (it cancels its runs and removes its
// sandboxes), then SIGKILL after a minute.
func (s *httpServer) stop() error {
	select {
	case <-s.exited:
		return nil
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return nil
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		<-s.exited
		return errors.New("the HTTP server did not exit within a minute of SIGTERM")
	}
}

// connect initializes a Streamable HTTP client with token, on its own
// connection; version "" negotiates the newest.
func (s *httpServer) connect(ctx context.Context, token, version, self string) (*httpConn, *mcpgo.InitializeResult, error) {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     5 * time.Minute,
	}
	rec := &lastRefusal{base: tr}
	t, err := transport.NewStreamableHTTP(s.url,
		transport.WithHTTPBasicClient(&http.Client{Transport: rec}),
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		return nil, nil, err
	}
	var opts []client.ClientOption
	if version != "" {
		opts = append(opts, client.WithProtocolVersion(version))
	}
	c := client.NewClient(t, opts...)
	ictx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Start(ictx); err != nil {
		tr.CloseIdleConnections()
		return nil, nil, rec.explain(err)
	}
	var init mcpgo.InitializeRequest
	init.Params.ProtocolVersion = version
	if version == "" {
		init.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	}
	init.Params.ClientInfo = mcpgo.Implementation{Name: "sandpit-bench", Version: self}
	res, err := c.Initialize(ictx, init)
	if err != nil {
		c.Close()
		tr.CloseIdleConnections()
		return nil, nil, rec.explain(err)
	}
	return &httpConn{Client: c, tr: tr, rec: rec}, res, nil
}

// writeTable writes the HTTP bench's figures.
func (h *HTTPReport) writeTable(bw *bufio.Writer, warmup int, gapMS int64) {
	if h.Server != "" {
		fmt.Fprintf(bw, "\nserver:  %s\n", h.Server)
	}
	if h.Server != "" || h.Cluster != nil {
		fmt.Fprintf(bw, "clients: mcp-go Streamable HTTP, each on its own connection; protocol %s", or(h.Protocol, "-"))
		if h.Idle != nil {
			fmt.Fprintf(bw, " (idle sessions: %s, which has sessions)", mcpgo.ProtocolVersion20251125)
		}
		fmt.Fprintln(bw)
	}
	latencyRows := func(rows ...Latency) {
		tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
		w0 := len("name")
		for _, l := range rows {
			w0 = max(w0, len(l.Name))
		}
		fmt.Fprintf(tw, "%-*s\tn\terrors\tp50 ms\tp90 ms\tmin ms\tmax ms\t\n", w0, "name")
		for _, l := range rows {
			fmt.Fprintf(tw, "%-*s\t%d\t%d\t%s\t%s\t%s\t%s\t\n", w0, l.Name, l.N, l.Errors,
				num(l.MedianMS, l.N), num(l.P90MS, l.N), num(l.MinMS, l.N), num(l.MaxMS, l.N))
		}
		tw.Flush()
		for _, l := range rows {
			if l.FirstError != "" {
				fmt.Fprintf(bw, "  first error (%s): %s\n", l.Name, l.FirstError)
			}
		}
	}
	if len(h.Latency) > 0 {
		fmt.Fprintf(bw, "\nhttp-latency: warm run_code over stdio and over HTTP (interleaved rounds in shuffled order, %d warm-up rounds discarded, %d ms untimed gap before each run)\n", warmup, gapMS)
		latencyRows(h.Latency...)
		if h.HTTPMinusStdioP50MS != nil {
			fmt.Fprintf(bw, "HTTP − stdio: p50 %+.1f ms, p90 %+.1f ms\n", *h.HTTPMinusStdioP50MS, *h.HTTPMinusStdioP90MS)
		}
	}
	if c := h.Concurrent; c != nil {
		fmt.Fprintf(bw, "\nhttp-concurrent: %d clients × %d calls at once over %d tenants, every output checked\n", c.Clients, c.Calls, c.Tenants)
		fmt.Fprintf(bw, "%d ok, %d errors; p50 %.1f ms, p99 %.1f ms, max %.1f ms; %.1f s, %.2f runs/s\n", c.OK, c.Errors, c.P50MS, c.P99MS, c.MaxMS, c.Seconds, c.RunsPerSec)
		if c.FirstError != "" {
			fmt.Fprintf(bw, "  first error: %s\n", c.FirstError)
		}
	}
	if f := h.Fair; f != nil {
		fmt.Fprintf(bw, "\nhttp-fair: tenant B's run_code alone, then while tenant A runs %d clients flat out, then alone again (%d ms gap before each B call)\n", f.Clients, gapMS)
		latencyRows(f.Alone, f.Loaded)
		fmt.Fprintf(bw, "loaded ÷ alone p50: %s; tenant A meanwhile: %d runs, %d errors, %.2f runs/s, p50 %.1f ms a call\n", rat(f.Ratio), f.ARuns, f.AErrors, f.ARunsPerS, f.AP50MS)
		if f.FirstError != "" {
			fmt.Fprintf(bw, "  tenant A's first error: %s\n", f.FirstError)
		}
	}
	if f := h.Flood; f != nil {
		fmt.Fprintf(bw, "\nhttp-flood: run_code quiet, then while unauthenticated requests (no token or a wrong one) flood the server, then quiet again (%d ms gap before each call)\n", gapMS)
		fmt.Fprintf(bw, "flood: target %d/s over %d keep-alive connections; sent %d in %.1f s (%.0f/s): %d answered 401, %d otherwise, %d unanswered\n",
			f.TargetRate, f.Conns, f.Sent, f.Seconds, f.Rate, f.Refused, f.Other, f.Failed)
		fmt.Fprintf(bw, "CPU during the flood: server %.1f s (%.0f µs a request), the bench (generator and client) %.1f s\n", f.ServerCPUSeconds, f.ServerCPUPerRequestUS, f.BenchCPUSeconds)
		if f.OtherStatus != "" {
			fmt.Fprintf(bw, "  first other answer: %s\n", f.OtherStatus)
		}
		if f.FirstError != "" {
			fmt.Fprintf(bw, "  first unanswered: %s\n", f.FirstError)
		}
		latencyRows(f.Quiet, f.Flooded)
		fmt.Fprintf(bw, "flooded ÷ quiet p50: %s\n", rat(f.Ratio))
	}
	if i := h.Idle; i != nil {
		fmt.Fprintf(bw, "\nhttp-idle: %d initialized sessions held open over %d tenants\n", i.Sessions, i.Tenants)
		fmt.Fprintf(bw, "%d opened, %d errors (%d refused 429 at first and tried again 5 s later), %d answered tools/list with all open\n", i.Opened, i.Errors, i.Retried, i.Alive)
		if i.FirstRefusal != "" {
			fmt.Fprintf(bw, "  first 429: %s\n", i.FirstRefusal)
		}
		fmt.Fprintf(bw, "server RSS: %.1f MiB before, %.1f MiB with one session a tenant, %.1f MiB with all open (%.1f KiB a session), %.1f MiB after closing them\n",
			i.RSSBeforeMiB, i.RSSTenantsMiB, i.RSSOpenMiB, i.KiBPerSession, i.RSSClosedMiB)
		fmt.Fprintf(bw, "bound: %s\n", i.Bound)
		if i.OneMore != "" {
			fmt.Fprintf(bw, "one more session on a full tenant: %s\n", i.OneMore)
		}
		if i.FirstError != "" {
			fmt.Fprintf(bw, "  first error: %s\n", i.FirstError)
		}
	}
	if h.Cluster != nil {
		h.Cluster.writeTable(bw, warmup, gapMS, latencyRows)
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
