package mcp

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
)

// RunCodeArgs are run_code's arguments.
type RunCodeArgs struct {
	Language       string   `json:"language" jsonschema:"a language name or alias (case-insensitive); list_supported_languages lists them"`
	Code           string   `json:"code,omitempty" jsonschema:"the program's source; give this or path"`
	Path           string   `json:"path,omitempty" jsonschema:"a source file in the workspace to run instead of code"`
	Args           []string `json:"args,omitempty" jsonschema:"command-line arguments passed to the program"`
	Stdin          string   `json:"stdin,omitempty" jsonschema:"text given to the program's standard input"`
	TimeoutSeconds float64  `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit in seconds (the default and the ceiling are in this tool's description)"`
	Session        string   `json:"session,omitempty" jsonschema:"run in this named session (python or bash): its variables, imports, functions and loaded data stay for the next call that names it; started on first use. Without it every run starts fresh"`
	Background     bool     `json:"background,omitempty" jsonschema:"return the run's id at once and run it in the background; get_run(id) shows its output so far and its result, cancel_run(id) stops it"`
}

// RunCodeResult is run_code's structured output.
type RunCodeResult struct {
	ID              string                 `json:"id" jsonschema:"identifier of this run"`
	Status          sandpit.Status         `json:"status" jsonschema:"success, error, timeout, oom, compile_error, cancelled, session_lost, or running (a background run)"`
	ExitCode        int                    `json:"exit_code" jsonschema:"the program's exit code (128+signal when killed)"`
	Stdout          string                 `json:"stdout"`
	Stderr          string                 `json:"stderr"`
	StdoutTruncated bool                   `json:"stdout_truncated"`
	StderrTruncated bool                   `json:"stderr_truncated"`
	StdoutBytes     int64                  `json:"stdout_bytes" jsonschema:"bytes the program wrote to stdout, including any cut off"`
	StderrBytes     int64                  `json:"stderr_bytes" jsonschema:"bytes the program wrote to stderr, including any cut off"`
	DurationMS      int64                  `json:"duration_ms"`
	Language        string                 `json:"language"`
	Usage           sandpit.Usage          `json:"usage"`
	Limits          sandpit.Limits         `json:"limits"`
	Files           *sandpit.Changes       `json:"files,omitempty" jsonschema:"workspace files the run created, modified or deleted"`
	Value           string                 `json:"value,omitempty" jsonschema:"a session call's last expression, as repr() shows it (when not None)"`
	ValueTruncated  bool                   `json:"value_truncated,omitempty"`
	Session         *sandpit.SessionResult `json:"session,omitempty" jsonschema:"the session a session call ran in; lost says it ended and why"`
	Background      bool                   `json:"background,omitempty" jsonschema:"the run goes on in the background: status is running; get_run(id) has the rest"`
}

func runCodeTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	langs := make([]string, 0, 4)
	for _, l := range cfg.Runner.Languages() {
		langs = append(langs, l.Name)
	}
	tool := mcpgo.NewTool("run_code",
		mcpgo.WithDescription(fmt.Sprintf(
			"Run a %s program in a fresh, isolated container (no network, read-only system files, bounded CPU/memory/processes/time/output) and return its stdout, stderr, exit code and status. "+
				"C and C++ are compiled first; a compiler failure is status compile_error. Timeout defaults to %s, at most %s. "+
				"Images the run writes into the workspace (PNG, JPEG, GIF, WebP; matplotlib's plt.show() saves figure-N.png) come back as image content, other files it writes as resource links. "+
				"In the text result every line the program wrote (and a session's value) follows \"| \", control characters escaped; the structured result has them exactly.%s%s",
			strings.Join(langs, ", "), cfg.DefaultTimeout, cfg.MaxTimeout, cfg.sessionHelp(), cfg.backgroundHelp())),
		mcpgo.WithInputSchema[RunCodeArgs](),
		nonBlank("language"),
		mcpgo.WithOutputSchema[RunCodeResult](),
		mcpgo.WithDestructiveHintAnnotation(false),
		mcpgo.WithOpenWorldHintAnnotation(false),
		withRunApp(),
	)
	handler := handle(cfg, tool, func(ctx context.Context, args RunCodeArgs) (any, string, error) {
		req, err := cfg.runRequest(args)
		if err != nil {
			cfg.metrics.reject()
			return nil, "", err
		}
		if args.Background {
			if !cfg.backgroundOK() {
				cfg.metrics.reject()
				return nil, "", argErrorf("background runs are off on this server: run without background")
			}
			id, err := cfg.Runs.runBackground(cfg.Runner, req)
			if err != nil {
				return nil, "", err
			}
			out := RunCodeResult{ID: id, Status: "running", Language: req.Language, Background: true, Limits: sandpit.Limits{TimeoutSeconds: req.Timeout.Seconds()}}
			return out, fmt.Sprintf("started run %s in the background (timeout %s). get_run(id=%q) shows its output so far and, once it ends, its result; cancel_run(id=%q) stops it; subscribers of %s are notified when it ends.\n",
				id, req.Timeout, id, id, runURI(id)), nil
		}
		res, err := cfg.Runs.runForeground(ctx, cfg.Runner, req, func(l *liveRun) func() { return startProgress(ctx, l) })
		if err != nil {
			return nil, "", err
		}
		out := toRunCodeResult(res)
		text := formatRun(out)
		blocks, notes := cfg.runContent(ctx, res.Files)
		if h := cfg.missingPackageHint(res.Language, res.Stderr); h != "" && res.Status == sandpit.StatusError {
			notes = append(notes, h)
		}
		for _, n := range notes {
			text += n + "\n"
		}
		return withContent(out, blocks), text, nil
	})
	return tool, handler
}

// runRequest validates arguments before anything runs.
func (cfg Config) runRequest(a RunCodeArgs) (sandpit.Request, error) {
	lang := strings.ToLower(strings.TrimSpace(a.Language))
	if lang == "" {
		return sandpit.Request{}, argErrorf("language is required: one of %s", cfg.languageNames())
	}
	switch {
	case a.Code != "" && a.Path != "":
		return sandpit.Request{}, argErrorf("give either code or path, not both")
	case a.Path != "" && cfg.Workspace == nil:
		return sandpit.Request{}, argErrorf("path needs a workspace, and this server has none: pass the source as code")
	case a.Path == "" && strings.TrimSpace(a.Code) == "":
		return sandpit.Request{}, argErrorf("code is empty: give the program's source in code (or a workspace file in path)")
	case len(a.Code) > cfg.MaxCodeBytes:
		return sandpit.Request{}, argErrorf("code is %d bytes, over the %d-byte limit: write it to a workspace file and run it by path, or shorten it", len(a.Code), cfg.MaxCodeBytes)
	case len(a.Stdin) > cfg.MaxCodeBytes:
		return sandpit.Request{}, argErrorf("stdin is %d bytes, over the %d-byte limit", len(a.Stdin), cfg.MaxCodeBytes)
	case !utf8.ValidString(a.Code):
		return sandpit.Request{}, argErrorf("code is not valid UTF-8")
	case a.TimeoutSeconds < 0:
		return sandpit.Request{}, argErrorf("timeout_seconds must be positive, got %g", a.TimeoutSeconds)
	}
	timeout := cfg.DefaultTimeout
	if a.TimeoutSeconds > 0 {
		// Compared as the caller's number: converted first, 1e10 s overflows
		// a Duration into a negative one that passes any ceiling.
		if !(a.TimeoutSeconds <= cfg.MaxTimeout.Seconds()) {
			return sandpit.Request{}, argErrorf("timeout_seconds %g is over the ceiling of %g seconds: ask for %g or less", a.TimeoutSeconds, cfg.MaxTimeout.Seconds(), cfg.MaxTimeout.Seconds())
		}
		timeout = time.Duration(a.TimeoutSeconds * float64(time.Second))
		if timeout < time.Millisecond {
			return sandpit.Request{}, argErrorf("timeout_seconds %g is too short: ask for at least 0.001, or leave it out for the default of %g", a.TimeoutSeconds, cfg.DefaultTimeout.Seconds())
		}
	}
	if timeout > cfg.MaxTimeout {
		return sandpit.Request{}, argErrorf("the default timeout %g s is over the ceiling of %g seconds", timeout.Seconds(), cfg.MaxTimeout.Seconds())
	}
	if len(a.Args) > 256 {
		return sandpit.Request{}, argErrorf("too many args (%d, at most 256)", len(a.Args))
	}
	session := a.Session // exact, as ids are: the runtime refuses "a " rather than taking it for "a"
	if session != "" && cfg.Sessions == nil {
		return sandpit.Request{}, argErrorf("sessions are off on this server: run without session (every run starts fresh)")
	}
	return sandpit.Request{
		Language:  lang,
		Code:      a.Code,
		Path:      a.Path,
		Args:      a.Args,
		Stdin:     []byte(a.Stdin),
		Timeout:   timeout,
		Workspace: cfg.Workspace,
		Session:   session,
	}, nil
}

func (cfg Config) sessionHelp() string {
	if cfg.Sessions == nil {
		return ""
	}
	l := cfg.SessionLimits
	return fmt.Sprintf(" Give session (a name you choose) to run %s in a session that keeps its variables, imports and loaded data for the next call naming it, like a notebook: the last expression's value comes back as value. "+
		"A session ends on close_session, after %s unused, %s after it started, or when its interpreter is lost (out of memory, or a call that does not stop on interrupt; status session_lost says what it held). At most %d sessions at once.",
		strings.Join(l.Languages, ", "), l.Idle, l.MaxAge, l.Max)
}

func (cfg Config) backgroundHelp() string {
	if !cfg.backgroundOK() {
		return ""
	}
	return " background: true returns the run's id at once; get_run(id) shows its output so far and its result, cancel_run(id) stops it."
}

func (cfg Config) backgroundOK() bool {
	return cfg.History != nil && cfg.Runs != nil && cfg.Runs.maxBackground > 0
}

func (cfg Config) languageNames() string {
	var names []string
	for _, l := range cfg.Runner.Languages() {
		names = append(names, l.Name)
	}
	return strings.Join(names, ", ")
}

func toRunCodeResult(r *sandpit.Result) RunCodeResult {
	return RunCodeResult{
		ID: r.ID, Status: r.Status, ExitCode: r.ExitCode,
		Stdout: r.Stdout, Stderr: r.Stderr,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		DurationMS: r.DurationMS, Language: r.Language,
		Usage: r.Usage, Limits: r.Limits, Files: r.Files,
		Value: r.Value, ValueTruncated: r.ValueTruncated, Session: r.Session,
	}
}

// formatRun is the readable fallback for clients that ignore structured content.
func formatRun(r RunCodeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "status: %s (exit code %d) in %d ms [run %s]\n", r.Status, r.ExitCode, r.DurationMS, r.ID)
	section := func(name, s string, truncated bool, total int64) {
		if s == "" && !truncated {
			return
		}
		fmt.Fprintf(&b, "--- %s", name)
		if truncated {
			fmt.Fprintf(&b, " (truncated: %d of %d bytes shown)", len(s), total)
		}
		b.WriteString(" ---\n")
		writeFenced(&b, s)
	}
	section("stdout", r.Stdout, r.StdoutTruncated, r.StdoutBytes)
	section("stderr", r.Stderr, r.StderrTruncated, r.StderrBytes)
	if r.Value != "" {
		b.WriteString("--- value")
		if r.ValueTruncated {
			b.WriteString(" (truncated)")
		}
		b.WriteString(" ---\n")
		writeFenced(&b, r.Value)
	}
	b.WriteString(formatSession(r.Session))
	switch r.Status {
	case sandpit.StatusTimeout:
		if r.Session != nil {
			fmt.Fprintf(&b, "the call was interrupted after %g s (KeyboardInterrupt); the session kept its state\n", r.Limits.TimeoutSeconds)
			break
		}
		fmt.Fprintf(&b, "the program was killed after %g s; make it faster or ask for a longer timeout_seconds\n", r.Limits.TimeoutSeconds)
	case sandpit.StatusCancelled:
		b.WriteString("the run was cancelled before it ended; its output so far is above, and its workspace changes were applied\n")
	case sandpit.StatusOOM:
		fmt.Fprintf(&b, "the program ran out of memory (limit %d MiB) and was killed\n", r.Limits.MemoryBytes>>20)
	}
	b.WriteString(changesLine(r.Files))
	b.WriteString(changesNote(r.Files))
	return b.String()
}

// changesNote says what the workspace lines above leave out: changes not
// applied at all, paths not listed, entries dropped (with the reasons in
// files.dropped).
func changesNote(f *sandpit.Changes) string {
	switch {
	case f == nil:
		return ""
	case f.Discarded:
		return "workspace: none of the run's changes were applied: " + textLine(f.Reason) + "\n"
	}
	var b strings.Builder
	if f.Truncated {
		fmt.Fprintf(&b, "workspace: %d created, %d modified, %d deleted in all (not all listed)\n", f.CreatedCount, f.ModifiedCount, f.DeletedCount)
	}
	if f.DroppedCount > 0 {
		fmt.Fprintf(&b, "workspace: %d entries did not come back (see files.dropped for which and why)\n", f.DroppedCount)
	}
	return b.String()
}

// changesLine is the text line listing a run's workspace changes, or
// nothing when there are none.
func changesLine(f *sandpit.Changes) string {
	if f == nil || len(f.Created)+len(f.Modified)+len(f.Deleted) == 0 {
		return ""
	}
	return fmt.Sprintf("workspace: created %s, modified %s, deleted %s\n", textNames(f.Created), textNames(f.Modified), textNames(f.Deleted))
}

// LanguageInfo is one row of list_supported_languages.
type LanguageInfo struct {
	Language    string   `json:"language"`
	Aliases     []string `json:"aliases,omitempty"`
	Image       string   `json:"image"`
	Version     string   `json:"version"`
	Description string   `json:"description"`
	Libraries   []string `json:"libraries,omitempty" jsonschema:"what programs can import beyond the standard library, as 'module version'"`
}

// LanguagesResult is list_supported_languages' structured output.
type LanguagesResult struct {
	Languages []LanguageInfo `json:"languages"`
}

func listLanguagesTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("list_supported_languages",
		mcpgo.WithDescription("List the languages run_code accepts, with the image and version each runs on and the libraries a program can import (nothing can be installed at run time: there is no network)."),
		mcpgo.WithOutputSchema[LanguagesResult](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, _ noArgs) (any, string, error) {
		var out LanguagesResult
		var b strings.Builder
		for _, l := range cfg.Runner.Languages() {
			out.Languages = append(out.Languages, LanguageInfo{l.Name, l.Aliases, l.Image, l.Version, l.Description, l.Libraries})
			fmt.Fprintf(&b, "%s: %s (%s) — %s\n", l.Name, l.Version, l.Image, l.Description)
			if len(l.Libraries) > 0 {
				fmt.Fprintf(&b, "  libraries: %s\n", strings.Join(l.Libraries, ", "))
			}
		}
		return out, b.String(), nil
	})
}
