package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/logring"
	"github.com/sandpit-dev/sandpit/runtime"
	"github.com/sandpit-dev/sandpit/store/history"
)

// scriptedRunner returns, for each code text, the result scripted for it,
// so the MCP layer can be tested without containers. A code of "fail:..."
// makes Run return that error class instead.
type scriptedRunner struct {
	mu      sync.Mutex
	n       int
	results map[string]sandpit.Result
}

var testLimits = sandpit.Limits{MemoryBytes: 256 << 20, PidsMax: 64, CPUs: 1, TmpfsBytes: 64 << 20,
	FileSizeBytes: 16 << 20, OpenFiles: 256, OutputBytes: 1 << 20, TimeoutSeconds: 10}

func (r *scriptedRunner) Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	switch req.Code {
	case "fail:unknown":
		return nil, fmt.Errorf("language %q: %w", req.Language, runtime.ErrUnknownLanguage)
	case "fail:unavailable":
		return nil, &runtime.UnavailableError{Address: "/run/x.sock", Err: errors.New("connection refused")}
	}
	r.mu.Lock()
	r.n++
	n := r.n
	r.mu.Unlock()
	res, ok := r.results[req.Code]
	if !ok {
		res = sandpit.Result{Status: sandpit.StatusSuccess}
	}
	res.ID = fmt.Sprintf("run-%03d", n)
	res.Language = req.Language
	// Distinct, increasing start times: newest first is well defined.
	res.Started = time.Date(2025, 6, 1, 10, 0, n, 0, time.UTC)
	res.Limits = testLimits
	return &res, nil
}

func (r *scriptedRunner) Languages() []sandpit.Language {
	return []sandpit.Language{
		{Name: "python", Version: "3.11.2", Image: "sandpit/python:1", Description: "CPython"},
		{Name: "c", Version: "gcc 12.2.0", Image: "sandpit/python:1", Description: "C17"},
	}
}

// The scripted outcomes, one per status.
var scripted = map[string]sandpit.Result{
	"print('ok')": {Status: sandpit.StatusSuccess, Stdout: "ok\n", StdoutBytes: 3, DurationMS: 40,
		Usage: sandpit.Usage{CPUUserMS: 20, CPUSystemMS: 5, MemoryPeakBytes: 9 << 20, PidsCurrent: 1, WallMS: 40}},
	"raise SystemExit(3)": {Status: sandpit.StatusError, ExitCode: 3, Stderr: "Traceback: boom\n", StderrBytes: 16, DurationMS: 50,
		Usage: sandpit.Usage{CPUUserMS: 25, MemoryPeakBytes: 10 << 20}, Files: &sandpit.Changes{}}, // a workspace, nothing changed
	"while True: pass": {Status: sandpit.StatusTimeout, ExitCode: 137, DurationMS: 10000,
		Usage: sandpit.Usage{CPUUserMS: 9900, CPUSystemMS: 40, MemoryPeakBytes: 8 << 20, WallMS: 10000}},
	"x = ' ' * 10**10": {Status: sandpit.StatusOOM, ExitCode: 137, DurationMS: 300,
		Usage: sandpit.Usage{CPUUserMS: 200, MemoryPeakBytes: 256 << 20, OOMKilled: true}},
	"int main( {": {Status: sandpit.StatusCompileError, ExitCode: 1, Stderr: "main.c:1: error: expected declaration\n", StderrBytes: 38, DurationMS: 90},
	"print('x' * 5000)": {Status: sandpit.StatusSuccess, Stdout: strings.Repeat("x", 5000) + "\n", StdoutBytes: 5001,
		Files: &sandpit.Changes{Created: []string{"out.txt"}, Modified: []string{}, Deleted: []string{}}},
}

// failingHistory refuses every write.
type failingHistory struct{ History }

func (failingHistory) Record(context.Context, history.Run) error { return errors.New("disk full") }

type fixture struct {
	c    *client.Client
	db   *history.DB
	logs *logring.Ring
}

func newFixture(t *testing.T, mutate func(*Config)) fixture {
	t.Helper()
	return newFixtureProto(t, mcpgo.LATEST_PROTOCOL_VERSION, mutate)
}

// newFixtureProto is newFixture with a client of protocol version proto.
func newFixtureProto(t *testing.T, proto string, mutate func(*Config)) fixture {
	t.Helper()
	db, err := history.Open(t.Context(), filepath.Join(t.TempDir(), "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	logs := logring.New(100, slog.LevelInfo)
	cfg := Config{
		Runner:  &scriptedRunner{results: scripted},
		History: db,
		Logs:    logs,
		Logger:  slog.New(logs.Handler(nil)),
		Status: func(context.Context) StatusReport {
			l := testLimits
			return StatusReport{Runtime: "runc", Rootless: false, UserNamespace: true, Limits: &l,
				ContainerdAddress: "/run/sandpit/containerd.sock"}
		},
		Health: fakeHealth{},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := client.NewInProcessClient(NewServer(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ProtocolVersion = proto
	init.Params.ClientInfo = mcpgo.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	return fixture{c: c, db: db, logs: logs}
}

type fakeHealth struct{}

func (fakeHealth) Health(context.Context) sandpit.HealthReport {
	return sandpit.HealthReport{ContainerdAddress: "/run/sandpit/containerd.sock", ContainerdVersion: "1.6.20",
		Reachable: true, Runtime: "runc", Images: []sandpit.ImageStatus{{Ref: "sandpit/python:1", Present: true,
			Versions: map[string]string{"python": "3.11.2"}}}}
}

// call invokes a tool and decodes its structured output into out (when not nil).
func (f fixture) call(t *testing.T, tool string, args map[string]any, out any) *mcpgo.CallToolResult {
	t.Helper()
	req := mcpgo.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := f.c.CallTool(t.Context(), req)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if out != nil && !res.IsError {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured output %s: %v", tool, b, err)
		}
	}
	return res
}

func text(res *mcpgo.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcpgo.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func (f fixture) run(t *testing.T, lang, code string) RunCodeResult {
	t.Helper()
	var out RunCodeResult
	res := f.call(t, "run_code", map[string]any{"language": lang, "code": code}, &out)
	if res.IsError {
		t.Fatalf("run_code(%q): %s", code, text(res))
	}
	return out
}

func TestRunsAreRecorded(t *testing.T) {
	f := newFixture(t, nil)
	codes := []string{"print('ok')", "raise SystemExit(3)", "while True: pass", "x = ' ' * 10**10", "int main( {", "print('x' * 5000)"}
	for _, code := range codes {
		lang := "python"
		if strings.HasPrefix(code, "int main") {
			lang = "c"
		}
		t.Run(code, func(t *testing.T) {
			ran := f.run(t, lang, code)
			want := scripted[code]
			var got RunRecord
			if res := f.call(t, "get_run", map[string]any{"id": ran.ID}, &got); res.IsError {
				t.Fatalf("get_run: %s", text(res))
			}
			if got.ID != ran.ID || got.Code != code || got.Language != lang {
				t.Errorf("id/code/language = %q/%q/%q, want %q/%q/%q", got.ID, got.Code, got.Language, ran.ID, code, lang)
			}
			if got.Status != string(want.Status) || got.ExitCode != want.ExitCode || got.DurationMS != want.DurationMS {
				t.Errorf("status %s exit %d duration %d, want %s %d %d", got.Status, got.ExitCode, got.DurationMS, want.Status, want.ExitCode, want.DurationMS)
			}
			u := want.Usage
			if got.CPUUserMS != u.CPUUserMS || got.CPUSystemMS != u.CPUSystemMS || got.MemoryPeakBytes != int64(u.MemoryPeakBytes) ||
				got.Pids != int64(u.PidsCurrent) || got.OOMKilled != (want.Status == sandpit.StatusOOM) {
				t.Errorf("usage = %+v, want %+v", got, u)
			}
			if got.Limits == nil || !reflect.DeepEqual(*got.Limits, testLimits) {
				t.Errorf("limits = %+v, want %+v", got.Limits, testLimits)
			}
			if wantHead := want.Stdout[:min(len(want.Stdout), history.HeadBytes)]; got.StdoutHead != wantHead || got.StdoutBytes != want.StdoutBytes {
				t.Errorf("stdout head %d bytes of %d, want %d of %d", len(got.StdoutHead), got.StdoutBytes, len(wantHead), want.StdoutBytes)
			}
			if got.StderrHead != want.Stderr {
				t.Errorf("stderr head = %q, want %q", got.StderrHead, want.Stderr)
			}
			wantFiles := want.Files // kept only when something changed
			if wantFiles != nil && len(wantFiles.Created)+len(wantFiles.Modified)+len(wantFiles.Deleted) == 0 {
				wantFiles = nil
			}
			if (got.Files == nil) != (wantFiles == nil) || (got.Files != nil && !slices.Equal(got.Files.Created, wantFiles.Created)) {
				t.Errorf("files = %+v, want %+v", got.Files, wantFiles)
			}
			if _, err := time.Parse(time.RFC3339, got.Started); err != nil || !strings.HasSuffix(got.Started, "Z") {
				t.Errorf("started %q is not ISO-8601 UTC", got.Started)
			}
		})
	}

	var all HistoryResult
	f.call(t, "get_execution_history", map[string]any{}, &all)
	var ids []string
	for _, r := range all.Runs {
		ids = append(ids, r.ID)
	}
	if got, want := strings.Join(ids, ","), "run-006,run-005,run-004,run-003,run-002,run-001"; got != want {
		t.Errorf("history order = %s, want %s", got, want)
	}
	if p := all.Runs[5].CodePreview; p != "print('ok')" {
		t.Errorf("code preview = %q", p)
	}

	tests := []struct {
		name string
		args map[string]any
		want string // ids, comma separated
	}{
		{"status", map[string]any{"status": "error"}, "run-002"},
		{"status upper case", map[string]any{"status": "OOM"}, "run-004"},
		{"language", map[string]any{"language": "c"}, "run-005"},
		{"limit", map[string]any{"limit": 2}, "run-006,run-005"},
		{"offset", map[string]any{"limit": 2, "offset": 2}, "run-004,run-003"},
		{"before id", map[string]any{"before": "run-003"}, "run-002,run-001"},
		{"before time", map[string]any{"before": "2025-06-01T10:00:02Z"}, "run-001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got HistoryResult
			if res := f.call(t, "get_execution_history", tt.args, &got); res.IsError {
				t.Fatal(text(res))
			}
			var ids []string
			for _, r := range got.Runs {
				ids = append(ids, r.ID)
			}
			if strings.Join(ids, ",") != tt.want {
				t.Errorf("got %v, want %s", ids, tt.want)
			}
		})
	}

	// Paging with next_before visits every run exactly once.
	var seen []string
	args := map[string]any{"limit": 4}
	for range 10 {
		var page HistoryResult
		f.call(t, "get_execution_history", args, &page)
		for _, r := range page.Runs {
			seen = append(seen, r.ID)
		}
		if page.NextBefore == "" {
			break
		}
		args["before"] = page.NextBefore
	}
	if got := strings.Join(seen, ","); got != strings.Join(ids, ",") {
		t.Errorf("paged = %s, want %s", got, strings.Join(ids, ","))
	}

	var m MetricsResult
	f.call(t, "get_sandbox_metrics", nil, &m)
	if m.Runs.Total != 6 || m.Runs.OOM != 1 || m.Runs.Timeouts != 1 || m.Runs.ByStatus["success"] != 2 ||
		m.Runs.ByLanguage["python"] != 5 || m.Runs.ByLanguage["c"] != 1 || m.Runs.InFlight != 0 {
		t.Errorf("run metrics = %+v", m.Runs)
	}
	if m.Runs.Latency.Window != 6 || m.History == nil || m.History.Window != 6 || m.History.Errors != 0 {
		t.Errorf("latency %+v, history %+v", m.Runs.Latency, m.History)
	}
	if m.Server.RSSBytes <= 0 || m.Server.PID <= 0 || m.Host.MemTotalBytes <= 0 || m.Host.CPUs <= 0 {
		t.Errorf("server %+v host %+v", m.Server, m.Host)
	}
	if m.Containerd == nil || !m.Containerd.Reachable || m.Containerd.ContainerdVersion != "1.6.20" {
		t.Errorf("containerd = %+v", m.Containerd)
	}
}

func TestBadArgumentsAreRejected(t *testing.T) {
	f := newFixture(t, nil)
	tests := []struct {
		name string
		tool string
		args map[string]any
		want string // in the error text
	}{
		{"empty code", "run_code", map[string]any{"language": "python", "code": "  "}, "code is empty"},
		{"unknown language from runtime", "run_code", map[string]any{"language": "cobol", "code": "fail:unknown"}, "unknown language"},
		{"bad status filter", "get_execution_history", map[string]any{"status": "crashed"}, "use one of success"},
		{"limit too big", "get_execution_history", map[string]any{"limit": 1000}, "limit must be"},
		{"offset and before", "get_execution_history", map[string]any{"offset": 1, "before": "run-001"}, "not both"},
		{"before unknown run", "get_execution_history", map[string]any{"before": "run-999"}, "not found"},
		{"get_run unknown", "get_run", map[string]any{"id": "run-999"}, "get_execution_history lists"},
		{"get_run empty", "get_run", map[string]any{"id": ""}, "id: must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := f.call(t, tt.tool, tt.args, nil)
			if !res.IsError || !strings.Contains(text(res), tt.want) {
				t.Errorf("got error=%t %q, want an error containing %q", res.IsError, text(res), tt.want)
			}
		})
	}
	// An infrastructure failure is an error result, counted as failed.
	if res := f.call(t, "run_code", map[string]any{"language": "python", "code": "fail:unavailable"}, nil); !res.IsError {
		t.Error("unavailable runtime: want an error result")
	}
	var m MetricsResult
	f.call(t, "get_sandbox_metrics", nil, &m)
	if m.Runs.Rejected != 2 || m.Runs.Failed != 1 || m.Runs.Total != 0 {
		t.Errorf("rejected %d failed %d total %d, want 2 1 0", m.Runs.Rejected, m.Runs.Failed, m.Runs.Total)
	}
	if n, _ := f.db.Count(t.Context()); n != 0 {
		t.Errorf("%d runs recorded, want none: rejected and failed requests are not runs", n)
	}
}

func TestHistoryFailureDoesNotFailRun(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.History = failingHistory{c.History} })
	ran := f.run(t, "python", "print('ok')")
	if ran.Status != sandpit.StatusSuccess || ran.Stdout != "ok\n" {
		t.Errorf("run = %+v", ran)
	}
	var m MetricsResult
	f.call(t, "get_sandbox_metrics", nil, &m)
	if m.History == nil || m.History.Errors != 1 || m.Runs.Total != 1 {
		t.Errorf("history metrics %+v, runs %d", m.History, m.Runs.Total)
	}
	var warned bool
	for _, r := range f.logs.Records(0) {
		if r.Level == "WARN" && r.Attrs["run"] == ran.ID && r.Attrs["err"] == "disk full" {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning logged for the failed record: %+v", f.logs.Records(0))
	}
}

func TestWithoutHistory(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.History = nil })
	f.run(t, "python", "print('ok')")
	tools, err := f.c.ListTools(t.Context(), mcpgo.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "get_execution_history" || tool.Name == "get_run" {
			t.Errorf("%s offered without a history", tool.Name)
		}
	}
	var m MetricsResult
	f.call(t, "get_sandbox_metrics", nil, &m)
	if m.Runs.Total != 1 || m.History != nil {
		t.Errorf("metrics without history: %+v %+v", m.Runs, m.History)
	}
}

func (f fixture) read(t *testing.T, uri string, out any) {
	t.Helper()
	req := mcpgo.ReadResourceRequest{}
	req.Params.URI = uri
	res, err := f.c.ReadResource(t.Context(), req)
	if err != nil {
		t.Fatalf("read %s: %v", uri, err)
	}
	if len(res.Contents) != 1 {
		t.Fatalf("read %s: %d contents", uri, len(res.Contents))
	}
	tc, ok := res.Contents[0].(mcpgo.TextResourceContents)
	if !ok || tc.MIMEType != "application/json" {
		t.Fatalf("read %s: %#v", uri, res.Contents[0])
	}
	if err := json.Unmarshal([]byte(tc.Text), out); err != nil {
		t.Fatalf("read %s: %v\n%s", uri, err, tc.Text)
	}
}

func TestResources(t *testing.T) {
	f := newFixture(t, nil)
	ran := f.run(t, "python", "x = ' ' * 10**10")
	slog.New(f.logs.Handler(nil)).With("component", "test").WithGroup("g").Info("hello", "n", 7)

	list, err := f.c.ListResources(t.Context(), mcpgo.ListResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range list.Resources {
		uris = append(uris, r.URI)
	}
	for _, want := range []string{"sandbox://status", "sandbox://logs", "sandbox://languages"} {
		if !slices.Contains(uris, want) {
			t.Errorf("resources %v lack %s", uris, want)
		}
	}
	tmpl, err := f.c.ListResourceTemplates(t.Context(), mcpgo.ListResourceTemplatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tmpl.ResourceTemplates) != 1 || tmpl.ResourceTemplates[0].URITemplate.Raw() != "sandbox://runs/{id}" {
		t.Errorf("templates = %+v", tmpl.ResourceTemplates)
	}

	var run RunRecord
	f.read(t, "sandbox://runs/"+ran.ID, &run)
	if run.ID != ran.ID || run.Code != "x = ' ' * 10**10" || run.Status != "oom" || !run.OOMKilled {
		t.Errorf("run resource = %+v", run)
	}
	req := mcpgo.ReadResourceRequest{}
	req.Params.URI = "sandbox://runs/run-999"
	if _, err := f.c.ReadResource(t.Context(), req); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing run: err = %v", err)
	}

	var status StatusReport
	f.read(t, "sandbox://status", &status)
	if status.Runtime != "runc" || !status.UserNamespace || status.Limits == nil || !reflect.DeepEqual(*status.Limits, testLimits) ||
		status.Network != "none" || status.Server != "sandpit" || len(status.Languages) != 2 ||
		status.DefaultTimeoutSeconds != 10 || status.MaxTimeoutSeconds != 60 || status.MaxCodeBytes != 64<<10 {
		t.Errorf("status = %+v", status)
	}

	var langs struct{ Languages []sandpit.Language }
	f.read(t, "sandbox://languages", &langs)
	if len(langs.Languages) != 2 || langs.Languages[0].Name != "python" || langs.Languages[0].Version != "3.11.2" {
		t.Errorf("languages = %+v", langs)
	}

	var logs struct{ Records []logring.Record }
	f.read(t, "sandbox://logs", &logs)
	last := logs.Records[len(logs.Records)-1]
	if last.Message != "hello" || last.Attrs["component"] != "test" ||
		fmt.Sprint(last.Attrs["g"]) != "map[n:7]" {
		t.Errorf("last log record = %+v", last)
	}
}

func (f fixture) prompt(t *testing.T, name string, args map[string]string) (string, error) {
	t.Helper()
	req := mcpgo.GetPromptRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := f.c.GetPrompt(t.Context(), req)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, m := range res.Messages {
		if tc, ok := m.Content.(mcpgo.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), nil
}

func TestPrompts(t *testing.T) {
	list := func(f fixture) []string {
		res, err := f.c.ListPrompts(t.Context(), mcpgo.ListPromptsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range res.Prompts {
			names = append(names, p.Name)
		}
		slices.Sort(names)
		return names
	}
	f := newFixture(t, nil)
	if got := strings.Join(list(f), ","); got != "fix_failed_run,generate_secure_script" {
		t.Errorf("prompts = %s", got)
	}

	t.Run("generate_secure_script follows the configuration", func(t *testing.T) {
		tests := []struct {
			name    string
			mutate  func(*Config)
			want    []string
			notWant []string
		}{
			{"limits", nil,
				[]string{"count the words", "256 MiB", "1 core", "at most 64", "python 3.11.2", "c gcc 12.2.0", "10s by default, at most 60s", "No network", "no persistent workspace"},
				[]string{"/workspace"}},
			{"other limits and a workspace", func(c *Config) {
				c.MaxTimeout = 30 * time.Second
				c.Workspace = nopWorkspace{}
				c.Status = func(context.Context) StatusReport {
					return StatusReport{Limits: &sandpit.Limits{MemoryBytes: 1 << 30, CPUs: 0.5, Unenforced: []string{"memory"}},
						Libraries: map[string][]string{"python": {"numpy 1.24"}}}
				}
			}, []string{"1 GiB", "0.5 core", "at most 30s", "/workspace", "numpy 1.24", "cannot enforce memory"},
				[]string{"256 MiB", "no persistent workspace"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got, err := newFixture(t, tt.mutate).prompt(t, "generate_secure_script", map[string]string{"task": "count the words"})
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range tt.want {
					if !strings.Contains(got, w) {
						t.Errorf("prompt lacks %q:\n%s", w, got)
					}
				}
				for _, w := range tt.notWant {
					if strings.Contains(got, w) {
						t.Errorf("prompt has %q:\n%s", w, got)
					}
				}
			})
		}
		if _, err := f.prompt(t, "generate_secure_script", map[string]string{"task": "x", "language": "cobol"}); err == nil {
			t.Error("unknown language accepted")
		}
	})

	t.Run("fix_failed_run", func(t *testing.T) {
		tests := []struct {
			code string
			want []string
		}{
			{"x = ' ' * 10**10", []string{"status oom", "peak 256 MiB against a limit of 256 MiB", "x = ' ' * 10**10"}},
			{"raise SystemExit(3)", []string{"exit code 3", "Traceback: boom", "raise SystemExit(3)"}},
			{"while True: pass", []string{"status timeout", "10s time limit", "at most 60s"}},
			{"int main( {", []string{"compiler rejected", "expected declaration", "```c"}},
		}
		for _, tt := range tests {
			lang := "python"
			if strings.HasPrefix(tt.code, "int") {
				lang = "c"
			}
			ran := f.run(t, lang, tt.code)
			got, err := f.prompt(t, "fix_failed_run", map[string]string{"run_id": ran.ID})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("%s: prompt lacks %q:\n%s", tt.code, w, got)
				}
			}
		}
		if _, err := f.prompt(t, "fix_failed_run", map[string]string{"run_id": "run-999"}); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("missing run: %v", err)
		}
	})

	if got := strings.Join(list(newFixture(t, func(c *Config) { c.History = nil })), ","); got != "generate_secure_script" {
		t.Errorf("prompts without history = %s", got)
	}
}

type nopWorkspace struct{}

func (nopWorkspace) Open(context.Context, string) (sandpit.View, error) {
	return nil, errors.New("not used")
}

func TestRetentionPrunes(t *testing.T) {
	f := newFixture(t, nil)
	var ids []string
	for range 5 {
		ids = append(ids, f.run(t, "python", "print('ok')").ID)
	}
	n, err := f.db.Prune(t.Context(), 0, 2)
	if err != nil || n != 3 {
		t.Fatalf("prune = %d, %v; want 3", n, err)
	}
	var h HistoryResult
	f.call(t, "get_execution_history", nil, &h)
	if len(h.Runs) != 2 || h.Runs[0].ID != ids[4] || h.Runs[1].ID != ids[3] {
		t.Errorf("after pruning to 2: %+v", h.Runs)
	}
	if res := f.call(t, "get_run", map[string]any{"id": ids[0]}, nil); !res.IsError || !strings.Contains(text(res), "pruned") {
		t.Errorf("pruned run: %s", text(res))
	}
}

func TestPercentiles(t *testing.T) {
	tests := []struct {
		name string
		vals []int64
		size int
		want []int64 // p50, p90, p99
	}{
		{"empty", nil, 10, []int64{0, 0, 0}},
		{"one", []int64{7}, 10, []int64{7, 7, 7}},
		{"1..100", seq(1, 100), 100, []int64{50, 90, 99}},
		{"window keeps the last", append(seq(1000, 1099), seq(1, 100)...), 100, []int64{50, 90, 99}},
		{"unsorted", []int64{5, 1, 4, 2, 3}, 10, []int64{3, 5, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(tt.size)
			for _, v := range tt.vals {
				r.add(v)
			}
			if got := r.percentiles(50, 90, 99); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func seq(from, to int64) []int64 {
	var s []int64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// BenchmarkRunOverhead is the cost the observation layer adds to each run:
// metrics plus recording in a real history database (the runner is a no-op).
func BenchmarkRunOverhead(b *testing.B) {
	for _, withHistory := range []bool{false, true} {
		b.Run(fmt.Sprint("history=", withHistory), func(b *testing.B) {
			var h History
			if withHistory {
				db, err := history.Open(context.Background(), filepath.Join(b.TempDir(), "h.db"))
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				h = db
			}
			o := &observedRunner{Runner: &scriptedRunner{results: scripted}, metrics: newMetrics(), history: h, log: slog.Default()}
			req := sandpit.Request{Language: "python", Code: "print('ok')"}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := o.Run(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
