// Package mcp translates the Model Context Protocol into calls on sandpit's
// runtime and store. It owns the tool, resource and prompt definitions, their
// argument and result structs, and the one place where errors become tool
// results. It never touches containerd: everything it needs is behind the
// small interfaces declared in this package.
package mcp

import (
	"context"
	"log/slog"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
)

// Runner runs programs in sandboxes. *runtime.Runtime implements it.
type Runner interface {
	Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error)
	Languages() []sandpit.Language
}

// Config is everything the MCP layer needs. Only Runner is required; a nil
// dependency leaves its tools out.
type Config struct {
	Name    string
	Version string

	Runner         Runner
	DefaultTimeout time.Duration // run_code's timeout when the caller gives none
	MaxTimeout     time.Duration // the ceiling a caller may ask for
	MaxCodeBytes   int           // largest accepted code or stdin
	// Workspace, when set, is attached to every run at /workspace.
	Workspace sandpit.Workspace
	// Files, when set, serves the file tools (list/read/write/delete/move_file).
	Files FileStore
	// Snapshots, when set (with Files), serves the *_state_snapshot tools and undo_last_run.
	Snapshots SnapshotStore

	Logger *slog.Logger

	// History, when set, records every run and serves get_execution_history,
	// get_run, sandbox://runs/{id} and the fix_failed_run prompt.
	History History
	// Health, when set, adds containerd and image status to get_sandbox_metrics.
	Health Health
	// Status, when set, reports what only the runtime knows (limits, images,
	// OCI runtime, rootless) for sandbox://status and the prompts.
	Status func(context.Context) StatusReport
	// Logs, when set, serves sandbox://logs.
	Logs LogSource
	// HostPaths are the host directories and files the server was
	// configured with (workspace, state dir, snapshot store, history
	// database...): sandbox://logs shows each as its placeholder.
	HostPaths []HostPath
	// QueryDB, when set, serves describe_schema and query_db.
	QueryDB QueryDB
	// Validator, when set, serves validate_json_data, validate_csv_data,
	// sandbox://schemas and the diagnose_validation_error prompt.
	Validator Validator
	// Opener, when set, opens workspace files for the data tools' path
	// arguments (and workspace databases for query_db).
	Opener Opener

	// Content bounds the images and links a result carries and what
	// resources/read of a workspace file returns.
	Content ContentLimits

	// Sessions, when set (with Runner), lets run_code run in named sessions
	// and serves list_sessions, close_session and sandbox://sessions;
	// SessionLimits describes their bounds.
	Sessions      SessionManager
	SessionLimits SessionLimits
	// Runs tracks the runs in flight (get_run and cancel_run of a run in
	// progress, progress notifications) and owns background runs; whoever
	// makes it closes it after the server stops. Nil: one without
	// background runs.
	Runs *Runs
	// Packages, when set (with Workspace and Files), serves
	// install_packages, remove_packages and list_packages, and gives every
	// run the package layer its workspace's sandpit.lock names.
	Packages Packages
	// Events, when set, keeps the tool calls refused or failed, for a
	// person watching (the dashboard's security view).
	Events *Events

	metrics *metrics // set by NewServer
}

func (c *Config) defaults() {
	if c.Name == "" {
		c.Name = "sandpit"
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = sandpit.DefaultTimeout
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = sandpit.DefaultMaxTimeout
	}
	if c.MaxCodeBytes <= 0 {
		c.MaxCodeBytes = 64 << 10
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Content.defaults()
}

// NewServer builds the MCP server with every tool whose dependency is set.
func NewServer(cfg Config) *server.MCPServer {
	cfg.defaults()
	if cfg.Runs == nil {
		cfg.Runs = NewRuns(-1)
	}
	hooks := &server.Hooks{}
	cfg.Runs.hooks(hooks)
	s := server.NewMCPServer(cfg.Name, cfg.Version,
		server.WithToolCapabilities(false),
		// Subscriptions: sandbox://runs/{id} is updated when the run ends.
		server.WithResourceCapabilities(true, false),
		server.WithPromptCapabilities(false),
		server.WithRecovery(),
		server.WithInstructions(instructions),
		server.WithHooks(hooks),
	)
	cfg.Runs.subMu.Lock()
	cfg.Runs.srv = s
	cfg.Runs.subMu.Unlock()
	cfg.metrics = newMetrics()
	if cfg.Runner == nil {
		cfg.Sessions = nil
	}
	if cfg.Packages != nil && (cfg.Files == nil || cfg.Workspace == nil) {
		cfg.Packages = nil // a layer belongs to a workspace
	}
	if cfg.Runner != nil {
		if cfg.Packages != nil {
			cfg.Runner = &layeredRunner{Runner: cfg.Runner, cfg: cfg}
		}
		cfg.Runner = &observedRunner{Runner: cfg.Runner, metrics: cfg.metrics, history: cfg.History, log: cfg.Logger}
		s.AddTool(runCodeTool(cfg))
		s.AddTool(listLanguagesTool(cfg))
	}
	if cfg.Sessions != nil {
		addSessionTools(s, cfg)
	}
	if cfg.Files != nil {
		addWorkspaceTools(s, cfg)
	}
	if cfg.Packages != nil && cfg.Runner != nil {
		addPackageTools(s, cfg)
	}
	addDataTools(s, cfg) // each tool only when its dependency is set
	addObservability(s, cfg)
	return s
}

const instructions = `sandpit runs code (list_supported_languages says which languages, and which libraries each can import) in locked-down, single-use containers: no network, a read-only root filesystem, bounded CPU, memory, processes, time and output. Use run_code to execute code and read its stdout, stderr, exit code and status; fix the code and run again when it fails. To keep Python state (loaded data, variables, imports) between calls, give run_code a session name: that session's interpreter keeps it, like a notebook, until close_session or its idle limit; long runs can go in the background (background: true, then get_run). Images a run writes into the workspace (a matplotlib plt.savefig, or plt.show(), which saves figure-N.png) come back as image content; other files it writes come back as links that resources/read returns.`
