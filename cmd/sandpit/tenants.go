package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/dash"
	"github.com/sandpit-dev/sandpit/internal/quota"
	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/runtime"
	"github.com/sandpit-dev/sandpit/store/history"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// tenantFlags are serve's per-tenant bounds, for an HTTP server.
func tenantFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "tenant-max-concurrent", Value: max(2, goruntime.NumCPU()/2), Usage: "runs one tenant may have in flight at once (more wait their turn; --concurrency bounds all tenants together); default half the CPUs, at least 2: more from one tenant only queues them in the CPU, where every other tenant's runs wait too"},
		&cli.IntFlag{Name: "tenant-max-sessions", Value: 2, Usage: "sessions one tenant may hold open (--max-sessions bounds all tenants together)"},
		&cli.StringFlag{Name: "tenant-workspace-max-size", Value: "1GiB", Usage: "largest one tenant's workspace may grow (apparent bytes)"},
		&cli.DurationFlag{Name: "tenant-cpu-per-hour", Value: time.Hour, Usage: "CPU time one tenant's runs may use in any hour (0: no limit); past it runs are refused until part of it frees"},
		&cli.IntFlag{Name: "max-tenants", Value: 256, Usage: "tenants served at once; each holds its workspace, history and sessions open"},
	}
}

// tenants serves each tenant its own MCP server: its own workspace,
// snapshots and undo records, history, background runs, sessions and
// metrics, under <data-dir>/tenants/NAME. Built on the tenant's first
// request and kept until the server stops. Nothing of one tenant's is
// reachable from another's server: each is built only from its own stores,
// so a run id, session or snapshot of another tenant is not found exactly
// as one that never existed.
type tenants struct {
	c        *cli.Context
	rt       *runtime.Runtime
	base     mcp.Config // what tenants share: limits, status, validator, ...
	dataDir  string
	views    string // the instance's dir for tenants' run views
	max      int
	slots    *quota.Slots
	cpu      *quota.CPU
	wsMax    int64
	samples  *sampler // nil: no charts over time
	packages *packageSources

	mu     sync.Mutex
	open   map[string]*tenant
	closed bool
}

type tenant struct {
	ready chan struct{}
	srv   *server.MCPServer
	view  *dash.Tenant // what the dashboard reads and does
	err   error
	close func()
}

func newTenants(c *cli.Context, rt *runtime.Runtime, base mcp.Config, dataDir, viewsDir string) (*tenants, error) {
	wsMax, err := parseSize(c.String("tenant-workspace-max-size"))
	if err != nil {
		return nil, fmt.Errorf("--tenant-workspace-max-size: %w", err)
	}
	if n := c.Int("tenant-max-concurrent"); n < 1 || n > c.Int("concurrency") {
		return nil, fmt.Errorf("--tenant-max-concurrent %d: give 1 to --concurrency (%d)", n, c.Int("concurrency"))
	}
	if n := c.Int("max-tenants"); n < 1 || n > 10000 {
		return nil, fmt.Errorf("--max-tenants %d: give 1 to 10000", n)
	}
	// The base is a stdio server's: what a single client may see of the
	// host (the server's log) is no tenant's to see.
	base.Logs, base.HostPaths = nil, nil
	if st := base.Status; st != nil {
		// Nor the host's paths: the socket containerd listens on.
		base.Status = func(ctx context.Context) mcp.StatusReport {
			r := st(ctx)
			r.ContainerdAddress = ""
			return r
		}
	}
	ps, err := newPackageSources(c)
	if err != nil {
		return nil, err
	}
	return &tenants{
		c: c, rt: rt, base: base, dataDir: dataDir, views: viewsDir, max: c.Int("max-tenants"), packages: ps,
		slots: quota.NewSlots(c.Int("concurrency"), c.Int("tenant-max-concurrent"), 0),
		cpu:   quota.NewCPU(c.Duration("tenant-cpu-per-hour")),
		wsMax: wsMax,
		open:  map[string]*tenant{},
	}, nil
}

// tenantEvents is how many refused or failed calls a tenant's security
// view keeps.
const tenantEvents = 500

// refusals gives the open tenants' counts of refused or failed calls.
func (ts *tenants) refusals() map[string]map[string]int64 {
	ts.mu.Lock()
	open := make(map[string]*tenant, len(ts.open))
	for n, t := range ts.open {
		open[n] = t
	}
	ts.mu.Unlock()
	out := map[string]map[string]int64{}
	for n, t := range open {
		select {
		case <-t.ready:
			if t.err == nil {
				out[n] = t.view.Events.Counts()
			}
		default:
		}
	}
	return out
}

// ErrTooManyTenants: the server holds --max-tenants tenants open.
var ErrTooManyTenants = sandpit.Define(sandpit.ErrResourceExhausted, "too many tenants")

// Server returns tenant name's MCP server, building it on first use.
func (ts *tenants) Server(ctx context.Context, name string) (*server.MCPServer, error) {
	t, err := ts.get(ctx, name)
	if err != nil {
		return nil, err
	}
	return t.srv, nil
}

// Dash returns what the dashboard sees of tenant name, building the
// tenant on first use.
func (ts *tenants) Dash(ctx context.Context, name string) (*dash.Tenant, error) {
	t, err := ts.get(ctx, name)
	if err != nil {
		return nil, err
	}
	return t.view, nil
}

func (ts *tenants) get(ctx context.Context, name string) (*tenant, error) {
	if !auth.ValidTenant(name) {
		return nil, fmt.Errorf("%w: tenant name %q", sandpit.ErrInvalidArgument, name)
	}
	ts.mu.Lock()
	if ts.closed {
		ts.mu.Unlock()
		return nil, fmt.Errorf("%w: the server is shutting down", sandpit.ErrUnavailable)
	}
	t := ts.open[name]
	if t == nil {
		if len(ts.open) >= ts.max {
			ts.mu.Unlock()
			return nil, sandpit.Hintf(fmt.Errorf("%w: %d are open", ErrTooManyTenants, ts.max), "the operator can raise --max-tenants")
		}
		t = &tenant{ready: make(chan struct{})}
		ts.open[name] = t
		ts.mu.Unlock()
		t.srv, t.view, t.close, t.err = ts.build(name)
		if t.err != nil {
			ts.mu.Lock()
			delete(ts.open, name) // the next request tries again
			ts.mu.Unlock()
		}
		close(t.ready)
	} else {
		ts.mu.Unlock()
	}
	select {
	case <-t.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if t.err != nil {
		return nil, t.err
	}
	return t, nil
}

// tenantDir is where tenant name's state persists.
func (ts *tenants) tenantDir(name string) string { return filepath.Join(ts.dataDir, "tenants", name) }

func (ts *tenants) build(name string) (*server.MCPServer, *dash.Tenant, func(), error) {
	dir := ts.tenantDir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("tenant %s: %w", name, err)
	}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	cfg := ts.base
	uid, gid := ts.rt.SandboxOwner()
	closeWS, err := openWorkspace(ts.c, &cfg, workspace.Owner{UID: uid, GID: gid},
		filepath.Join(dir, "workspace"), filepath.Join(dir, "snapshots"), filepath.Join(ts.views, name), ts.wsMax)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tenant %s: %w", name, err)
	}
	closers = append(closers, closeWS)
	// query_db opens workspace databases through this tenant's workspace.
	if err := dataConfig(ts.c, &cfg); err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	closeHistory, err := openHistory(ts.c, &cfg, filepath.Join(dir, "history.db"))
	if err != nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("tenant %s: %w", name, err)
	}
	closers = append(closers, closeHistory)
	tr := ts.rt.ForTenant(name)
	cfg.Runner = &tenantRunner{Tenant: tr, name: name, slots: ts.slots, cpu: ts.cpu}
	if cfg.Sessions != nil {
		cfg.Sessions = tr
		cfg.SessionLimits.Max = ts.rt.SessionConfig().PerTenantLimit()
	}
	if err := ts.packages.manager(&cfg, filepath.Join(dir, "packages"), uid, gid); err != nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("tenant %s: %w", name, err)
	}
	cfg.Events = mcp.NewEvents(tenantEvents)
	nbg := ts.c.Int("max-background")
	if nbg == 0 {
		nbg = -1
	}
	runs := mcp.NewRuns(nbg)
	closers = append(closers, runs.Close) // closed first: background runs are recorded while the rest is open
	cfg.Runs = runs
	slog.Info("tenant ready", "tenant", name)
	view := &dash.Tenant{Runs: runs, Events: cfg.Events}
	if ts.samples != nil && cfg.Sessions != nil {
		view.SessionMemory = func() []dash.MemorySample { return ts.samples.SessionMemory(name) }
	}
	if cfg.History != nil {
		view.History = cfg.History
	}
	if cfg.Files != nil {
		view.Files = cfg.Files
	}
	if cfg.Snapshots != nil {
		view.Snapshots = cfg.Snapshots
	}
	if cfg.Sessions != nil {
		view.Sessions = tr.Sessions
	}
	srv := mcp.NewServer(cfg)
	view.Rerun = func(ctx context.Context, r history.Run) (string, error) { return rerun(ctx, srv, r) }
	return srv, view, closeAll, nil
}

// rerun starts run r's program again, in a fresh sandbox in the
// background, through the tenant's own MCP server: the same admission,
// quotas, workspace and history as an agent's run_code.
func rerun(ctx context.Context, srv *server.MCPServer, r history.Run) (string, error) {
	args := map[string]any{"language": r.Language, "background": true}
	switch {
	case r.Path != "":
		args["path"] = r.Path
	case r.Code != "":
		args["code"] = r.Code
	default:
		return "", fmt.Errorf("%w: run %s kept no code to run again", sandpit.ErrInvalidArgument, r.ID)
	}
	msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": "run_code", "arguments": args}})
	if err != nil {
		return "", err
	}
	out, err := json.Marshal(srv.HandleMessage(ctx, msg))
	if err != nil {
		return "", err
	}
	var resp struct {
		Result *struct {
			IsError           bool `json:"isError"`
			StructuredContent struct {
				ID string `json:"id"`
			} `json:"structuredContent"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		return "", fmt.Errorf("run again: %w", err)
	}
	switch {
	case resp.Error != nil:
		return "", fmt.Errorf("run again: %s", resp.Error.Message)
	case resp.Result == nil:
		return "", fmt.Errorf("run again: no result")
	case resp.Result.IsError:
		var b strings.Builder
		for _, c := range resp.Result.Content {
			b.WriteString(c.Text)
		}
		return "", sandpit.Newf(sandpit.ErrConflict, "%s", b.String())
	}
	return resp.Result.StructuredContent.ID, nil
}

// Close stops serving tenants and closes each one's stores, cancelling and
// recording its background runs first.
func (ts *tenants) Close() {
	ts.mu.Lock()
	ts.closed = true
	all := make([]*tenant, 0, len(ts.open))
	for _, t := range ts.open {
		all = append(all, t)
	}
	ts.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-t.ready
			if t.err == nil {
				t.close()
			}
		}()
	}
	wg.Wait()
}

// tenantRunner runs a tenant's programs within its share of the server:
// its CPU budget for the hour, then a run slot in its turn.
type tenantRunner struct {
	*runtime.Tenant
	name  string
	slots *quota.Slots
	cpu   *quota.CPU
}

func (t *tenantRunner) Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	if err := t.cpu.Admit(t.name); err != nil {
		return nil, err
	}
	release, err := t.slots.Acquire(ctx, t.name)
	if err != nil {
		if errors.Is(err, ctx.Err()) && ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for a run slot: %w", err)
		}
		return nil, err
	}
	defer release()
	res, err := t.Tenant.Run(ctx, req)
	if res != nil {
		t.cpu.Charge(t.name, time.Duration(res.Usage.CPUUserMS+res.Usage.CPUSystemMS)*time.Millisecond)
	}
	return res, err
}
