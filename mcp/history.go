package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/store/history"
)

// History records runs and reads them back. *history.DB implements it.
type History interface {
	Record(ctx context.Context, r history.Run) error
	List(ctx context.Context, f history.Filter) ([]history.Run, error)
	Get(ctx context.Context, id string) (history.Run, error)
}

// recordTimeout bounds how long a run's result waits on the history.
const recordTimeout = 2 * time.Second

// observedRunner counts every run in the metrics and records each result in
// the history. Neither can fail a run: a history error is logged and the
// result goes back to the caller unchanged.
type observedRunner struct {
	Runner
	metrics *metrics
	history History // may be nil
	log     *slog.Logger
}

func (o *observedRunner) Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	done := o.metrics.begin()
	t0 := time.Now()
	res, err := o.Runner.Run(ctx, req)
	if err != nil && ctx.Err() != nil && req.ID != "" && !errors.Is(err, sandpit.ErrInvalidArgument) {
		// Cancelled before its program started (waiting for admission,
		// its sandbox being made): the runtime has no result, but the run
		// was started, given an id and perhaps shown by get_run. It is
		// data, a cancelled run, and recorded as every run is.
		res, err = cancelledEarly(req, t0), nil
	}
	done(req.Language, res, err)
	if err != nil || res == nil || o.history == nil {
		return res, err
	}
	rec := historyRun(req, res)
	if res.Status == sandpit.StatusCancelled && errors.Is(context.Cause(ctx), ErrCancelledByPerson) {
		rec.CancelledBy = "person"
	}
	// Recording is synchronous so that get_execution_history right after
	// run_code shows the run. It costs a median 0.1-1.4 ms (BenchmarkRecord;
	// get_sandbox_metrics reports it live) against runs of hundreds of ms. A
	// client that gave up on the run must not stop it being recorded, hence
	// WithoutCancel.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	t := time.Now()
	rerr := o.history.Record(rctx, rec)
	o.metrics.recorded(time.Since(t), rerr)
	if rerr != nil {
		o.log.Warn("recording run in history failed; the run itself is unaffected", "run", res.ID, "err", rerr)
	}
	return res, nil
}

// cancelledEarly is the result of a run cancelled before the runtime had
// one to give.
func cancelledEarly(req sandpit.Request, started time.Time) *sandpit.Result {
	d := time.Since(started)
	return &sandpit.Result{
		ID: req.ID, Language: req.Language, Status: sandpit.StatusCancelled,
		Started: started.UTC(), Duration: d, DurationMS: d.Milliseconds(),
		Limits: sandpit.Limits{TimeoutSeconds: req.Timeout.Seconds()},
	}
}

// historyRun is what the history keeps of a run.
func historyRun(req sandpit.Request, res *sandpit.Result) history.Run {
	lang := res.Language
	if lang == "" {
		lang = req.Language
	}
	started := res.Started
	if started.IsZero() {
		started = time.Now().Add(-time.Duration(res.DurationMS) * time.Millisecond)
	}
	r := history.Run{
		ID: res.ID, Started: started.UTC(), Language: lang,
		Code: req.Code, Path: req.Path, StdinBytes: int64(len(req.Stdin)),
		Status: string(res.Status), ExitCode: res.ExitCode, DurationMS: res.DurationMS,
		CPUUserMS: res.Usage.CPUUserMS, CPUSystemMS: res.Usage.CPUSystemMS,
		MemoryPeakBytes: int64(res.Usage.MemoryPeakBytes), Pids: int64(res.Usage.PidsCurrent),
		OOMKilled:   res.Usage.OOMKilled || res.Status == sandpit.StatusOOM,
		StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes,
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		StdoutHead: res.Stdout, StderrHead: res.Stderr, // the store keeps the first KiB
		Stdout: res.Stdout, Stderr: res.Stderr, // and, for the newest runs, more
	}
	if f := res.Files; f != nil && len(f.Created)+len(f.Modified)+len(f.Deleted) > 0 {
		r.Files, _ = json.Marshal(f)
	}
	r.Limits, _ = json.Marshal(res.Limits)
	return r
}

// statuses are the values status filters accept.
var statuses = []sandpit.Status{
	sandpit.StatusSuccess, sandpit.StatusError, sandpit.StatusTimeout, sandpit.StatusOOM, sandpit.StatusCompileError, sandpit.StatusCancelled,
	sandpit.StatusSessionLost,
}

func statusNames() string {
	names := make([]string, len(statuses))
	for i, s := range statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// HistoryArgs are get_execution_history's arguments.
type HistoryArgs struct {
	Limit    int    `json:"limit,omitempty" jsonschema:"how many runs to return, newest first (default 20, at most 100)"`
	Offset   int    `json:"offset,omitempty" jsonschema:"skip this many matching runs (use offset or before, not both)"`
	Before   string `json:"before,omitempty" jsonschema:"only runs older than this: a run id (the next_before of a previous page) or an ISO-8601 time"`
	Status   string `json:"status,omitempty" jsonschema:"only runs with this status: success, error, timeout, oom, compile_error, cancelled or session_lost"`
	Language string `json:"language,omitempty" jsonschema:"only runs in this language"`
}

// RunSummary is one row of get_execution_history.
type RunSummary struct {
	ID              string `json:"id"`
	Started         string `json:"started" jsonschema:"ISO-8601 UTC"`
	Language        string `json:"language"`
	Status          string `json:"status"`
	ExitCode        int    `json:"exit_code"`
	DurationMS      int64  `json:"duration_ms"`
	CPUUserMS       int64  `json:"cpu_user_ms"`
	CPUSystemMS     int64  `json:"cpu_system_ms"`
	MemoryPeakBytes int64  `json:"memory_peak_bytes"`
	OOMKilled       bool   `json:"oom_killed"`
	StdoutBytes     int64  `json:"stdout_bytes"`
	StderrBytes     int64  `json:"stderr_bytes"`
	CodePreview     string `json:"code_preview,omitempty" jsonschema:"the first 200 characters of the code"`
	CodeBytes       int64  `json:"code_bytes"`
	Path            string `json:"path,omitempty" jsonschema:"the workspace file run instead of code"`
}

// HistoryResult is get_execution_history's structured output.
type HistoryResult struct {
	Runs []RunSummary `json:"runs"`
	// NextBefore pages on: pass it as before to get the next (older) page.
	NextBefore string `json:"next_before,omitempty" jsonschema:"pass as before to get the next, older page; absent on the last page"`
}

// RunRecord is get_run's structured output and sandbox://runs/{id}'s content.
type RunRecord struct {
	RunSummary
	Code            string           `json:"code" jsonschema:"the full source (empty when a workspace file was run)"`
	CodeSHA256      string           `json:"code_sha256,omitempty"`
	StdinBytes      int64            `json:"stdin_bytes"`
	Pids            int64            `json:"pids"`
	StdoutTruncated bool             `json:"stdout_truncated"`
	StderrTruncated bool             `json:"stderr_truncated"`
	StdoutHead      string           `json:"stdout_head" jsonschema:"the first KiB of stdout"`
	StderrHead      string           `json:"stderr_head" jsonschema:"the first KiB of stderr"`
	Files           *sandpit.Changes `json:"files,omitempty" jsonschema:"workspace files the run created, modified or deleted"`
	Limits          *sandpit.Limits  `json:"limits,omitempty" jsonschema:"the limits the run ran under"`
	// Only while the run is in flight (status running):
	StdoutTail string `json:"stdout_tail,omitempty" jsonschema:"while running: the last 4 KiB of stdout so far, when there is more than the head"`
	StderrTail string `json:"stderr_tail,omitempty" jsonschema:"while running: the last 4 KiB of stderr so far"`
	Session    string `json:"session,omitempty" jsonschema:"while running: the session it runs in"`
	Background bool   `json:"background,omitempty" jsonschema:"while running: it was started with background"`
}

const maxHistoryPage = 100

func historyTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("get_execution_history",
		mcpgo.WithDescription("List past run_code executions, newest first: when each started (UTC), language, status, exit code, duration, CPU and peak memory, output sizes and a code preview. Filter by status or language; page with limit and offset, or with before=next_before. get_run returns one run in full."),
		mcpgo.WithInputSchema[HistoryArgs](),
		mcpgo.WithOutputSchema[HistoryResult](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	handler := handle(cfg, tool, func(ctx context.Context, a HistoryArgs) (any, string, error) {
		f, err := historyFilter(a)
		if err != nil {
			return nil, "", err
		}
		runs, err := cfg.History.List(ctx, f)
		if errors.Is(err, history.ErrNotFound) {
			err = argErrorf("before: %v (it may have been pruned; give an ISO-8601 time instead)", err)
		}
		if err != nil {
			return nil, "", err
		}
		out := HistoryResult{Runs: make([]RunSummary, len(runs))}
		for i, r := range runs {
			out.Runs[i] = summary(r)
		}
		if len(runs) == f.Limit {
			out.NextBefore = runs[len(runs)-1].ID
		}
		return out, formatHistory(out), nil
	})
	return tool, handler
}

func historyFilter(a HistoryArgs) (history.Filter, error) {
	f := history.Filter{Limit: a.Limit, Offset: a.Offset, Language: strings.ToLower(strings.TrimSpace(a.Language))}
	switch {
	case a.Limit < 0 || a.Limit > maxHistoryPage:
		return f, argErrorf("limit must be between 1 and %d, got %d", maxHistoryPage, a.Limit)
	case a.Offset < 0:
		return f, argErrorf("offset must not be negative, got %d", a.Offset)
	case a.Offset > 0 && a.Before != "":
		return f, argErrorf("give offset or before, not both")
	}
	if f.Limit == 0 {
		f.Limit = history.DefaultLimit
	}
	if s := sandpit.Status(strings.ToLower(strings.TrimSpace(a.Status))); s != "" {
		if !slices.Contains(statuses, s) {
			return f, argErrorf("unknown status %q: use one of %s", a.Status, statusNames())
		}
		f.Status = string(s)
	}
	if b := strings.TrimSpace(a.Before); b != "" {
		if t, err := time.Parse(time.RFC3339Nano, b); err == nil {
			f.Before = t
		} else {
			f.BeforeID = b
		}
	}
	return f, nil
}

func summary(r history.Run) RunSummary {
	return RunSummary{
		ID: r.ID, Started: r.Started.UTC().Format(time.RFC3339Nano), Language: r.Language,
		Status: r.Status, ExitCode: r.ExitCode, DurationMS: r.DurationMS,
		CPUUserMS: r.CPUUserMS, CPUSystemMS: r.CPUSystemMS, MemoryPeakBytes: r.MemoryPeakBytes,
		OOMKilled: r.OOMKilled, StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		CodePreview: r.CodePreview, CodeBytes: r.CodeBytes, Path: r.Path,
	}
}

func record(r history.Run) RunRecord {
	out := RunRecord{
		RunSummary: summary(r),
		Code:       r.Code, CodeSHA256: r.CodeSHA256, StdinBytes: r.StdinBytes, Pids: r.Pids,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
		StdoutHead: r.StdoutHead, StderrHead: r.StderrHead,
	}
	out.CodePreview = ""
	if len(r.Files) > 0 {
		var c sandpit.Changes
		if json.Unmarshal(r.Files, &c) == nil {
			out.Files = &c
		}
	}
	if len(r.Limits) > 0 {
		var l sandpit.Limits
		if json.Unmarshal(r.Limits, &l) == nil {
			out.Limits = &l
		}
	}
	return out
}

func formatHistory(h HistoryResult) string {
	if len(h.Runs) == 0 {
		return "no runs match\n"
	}
	var b strings.Builder
	for _, r := range h.Runs {
		fmt.Fprintf(&b, "%s  %s  %-6s %-13s exit %-3d %6d ms  %s\n",
			r.Started, r.ID, r.Language, r.Status, r.ExitCode, r.DurationMS, oneLine(r.CodePreview, r.Path, 60))
	}
	if h.NextBefore != "" {
		fmt.Fprintf(&b, "more: before=%s\n", h.NextBefore)
	}
	return b.String()
}

// oneLine squeezes a code preview onto one line of at most n runes.
func oneLine(code, path string, n int) string {
	if code == "" && path != "" {
		return "(file " + textName(path) + ")"
	}
	s := textLine(strings.Join(strings.Fields(code), " "))
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

// GetRunArgs are get_run's arguments.
type GetRunArgs struct {
	ID string `json:"id" jsonschema:"the run's id, as returned by run_code or get_execution_history"`
}

func getRunTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("get_run",
		mcpgo.WithDescription("Return one run in full: its complete code, status, exit code, usage (CPU, peak memory, pids), limits, the first KiB of stdout and stderr, and the workspace files it changed. A run still in flight (a background run) has status running and its output so far."),
		mcpgo.WithInputSchema[GetRunArgs](),
		nonBlank("id"),
		mcpgo.WithOutputSchema[RunRecord](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
		withRunApp(),
	)
	handler := handle(cfg, tool, func(ctx context.Context, a GetRunArgs) (any, string, error) {
		if l := cfg.Runs.get(a.ID); l != nil {
			out := l.record()
			return out, formatLive(out), nil
		}
		r, err := getRun(ctx, cfg.History, a.ID)
		if err != nil {
			return nil, "", err
		}
		out := record(r)
		return out, formatRecord(out), nil
	})
	return tool, handler
}

// getRun looks a run up, turning "no such run" into an error the model can
// act on. The id is matched exactly, as Runs.get matches it.
func getRun(ctx context.Context, h History, id string) (history.Run, error) {
	if id == "" {
		return history.Run{}, argErrorf("id is required: a run id from run_code or get_execution_history")
	}
	r, err := h.Get(ctx, id)
	if errors.Is(err, history.ErrNotFound) {
		return r, argErrorf("%v (it may have been pruned; get_execution_history lists the runs kept)", err)
	}
	return r, err
}

func formatRecord(r RunRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s: %s %s, exit code %d, %d ms, started %s\n", r.ID, r.Language, r.Status, r.ExitCode, r.DurationMS, r.Started)
	fmt.Fprintf(&b, "usage: cpu %d ms user + %d ms system, peak memory %d KiB, pids %d, oom %t\n",
		r.CPUUserMS, r.CPUSystemMS, r.MemoryPeakBytes>>10, r.Pids, r.OOMKilled)
	if r.Path != "" {
		fmt.Fprintf(&b, "--- ran workspace file %s ---\n", textName(r.Path))
	} else {
		fmt.Fprintf(&b, "--- code (%d bytes) ---\n", r.CodeBytes)
		writeFenced(&b, r.Code)
	}
	head := func(name, s string, total int64) {
		if s == "" {
			return
		}
		fmt.Fprintf(&b, "--- %s (first %d of %d bytes) ---\n", name, len(s), total)
		writeFenced(&b, s)
	}
	head("stdout", r.StdoutHead, r.StdoutBytes)
	head("stderr", r.StderrHead, r.StderrBytes)
	b.WriteString(changesLine(r.Files))
	b.WriteString(changesNote(r.Files))
	return b.String()
}

// addObservability registers the history, metrics, resource and prompt
// surface: what the server can tell about what happened.
func addObservability(s *server.MCPServer, cfg Config) {
	s.AddTool(metricsTool(cfg))
	if cfg.History != nil {
		s.AddTool(historyTool(cfg))
		s.AddTool(getRunTool(cfg))
		if cfg.Runner != nil {
			s.AddTool(cancelRunTool(cfg))
		}
	}
	addResources(s, cfg)
	addPrompts(s, cfg)
}

// CancelRunArgs are cancel_run's arguments.
type CancelRunArgs struct {
	ID string `json:"id" jsonschema:"the run's id, as run_code (background or not) returned it"`
}

// cancelWait is how long cancel_run waits for the run's result.
const cancelWait = 10 * time.Second

func cancelRunTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("cancel_run",
		mcpgo.WithDescription("Stop a run in flight (a background run, or another call's run): its sandbox is killed (a session call is interrupted instead) and it is recorded as cancelled with its output so far; its workspace changes are applied. Returns the run as get_run would."),
		mcpgo.WithInputSchema[CancelRunArgs](),
		nonBlank("id"),
		mcpgo.WithOutputSchema[RunRecord](),
		mcpgo.WithDestructiveHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a CancelRunArgs) (any, string, error) {
		l, err := cfg.Runs.cancelRun(ctx, a.ID, cancelWait)
		if err != nil {
			return nil, "", err
		}
		if l == nil {
			r, err := getRun(ctx, cfg.History, a.ID)
			if err != nil {
				return nil, "", err
			}
			out := record(r)
			return out, "run " + out.ID + " had already ended (" + out.Status + "); nothing to cancel\n" + formatRecord(out), nil
		}
		select {
		case <-l.done:
		default:
			out := l.record()
			return out, "run " + out.ID + " was told to stop but has not ended yet\n" + formatLive(out), nil
		}
		r, err := getRun(ctx, cfg.History, a.ID)
		if err != nil {
			return nil, "", err
		}
		out := record(r)
		return out, formatRecord(out), nil
	})
}
