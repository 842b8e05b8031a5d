package mcp

import (
	"context"
	"fmt"
	"strings"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
)

// SessionManager lists and closes sessions: sandboxes whose interpreter
// keeps its state between run_code calls that name it. *runtime.Runtime
// implements it.
type SessionManager interface {
	Sessions() []sandpit.SessionInfo
	CloseSession(ctx context.Context, name string) (sandpit.SessionInfo, error)
}

// SessionLimits are the session bounds in effect, for tool descriptions
// and sandbox://sessions.
type SessionLimits struct {
	Max    int           `json:"max_sessions"`
	Idle   time.Duration `json:"-"`
	MaxAge time.Duration `json:"-"`
	Grace  time.Duration `json:"-"`

	IdleSeconds   float64  `json:"idle_seconds"`
	MaxAgeSeconds float64  `json:"max_age_seconds"`
	GraceSeconds  float64  `json:"interrupt_grace_seconds"`
	Languages     []string `json:"languages"`
}

func (l SessionLimits) withSeconds() SessionLimits {
	l.IdleSeconds, l.MaxAgeSeconds, l.GraceSeconds = l.Idle.Seconds(), l.MaxAge.Seconds(), l.Grace.Seconds()
	return l
}

// SessionsResult is list_sessions' structured output and sandbox://sessions'.
type SessionsResult struct {
	Sessions []sandpit.SessionInfo `json:"sessions"`
	Limits   SessionLimits         `json:"limits"`
}

// CloseSessionArgs are close_session's arguments.
type CloseSessionArgs struct {
	Name string `json:"name" jsonschema:"the session's name, as given to run_code"`
}

// CloseSessionResult is close_session's structured output.
type CloseSessionResult struct {
	Closed sandpit.SessionInfo `json:"closed" jsonschema:"the session as it was when closed"`
}

func (cfg Config) sessionsResult() SessionsResult {
	return SessionsResult{Sessions: cfg.Sessions.Sessions(), Limits: cfg.SessionLimits.withSeconds()}
}

func addSessionTools(s *server.MCPServer, cfg Config) {
	s.AddTool(listSessionsTool(cfg))
	s.AddTool(closeSessionTool(cfg))
	s.AddResource(mcpgo.NewResource("sandbox://sessions", "sessions",
		mcpgo.WithResourceDescription("The open sessions (run_code's session argument): language, calls, idle and age limits, current memory and CPU, the names each holds."),
		mcpgo.WithMIMEType("application/json"),
	), func(ctx context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
		return jsonContents(req.Params.URI, cfg.sessionsResult())
	})
}

func listSessionsTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("list_sessions",
		mcpgo.WithDescription("List the open sessions (started by run_code with a session name): language, number of calls, when each expires, its memory and CPU now, and the variables and modules it holds."),
		mcpgo.WithOutputSchema[SessionsResult](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, _ noArgs) (any, string, error) {
		out := cfg.sessionsResult()
		return out, formatSessions(out), nil
	})
}

func formatSessions(r SessionsResult) string {
	if len(r.Sessions) == 0 {
		return fmt.Sprintf("no sessions open (at most %d; run_code with a session name starts one)\n", r.Limits.Max)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of at most %d sessions open:\n", len(r.Sessions), r.Limits.Max)
	for _, s := range r.Sessions {
		state := "idle"
		if s.Running != "" {
			state = "running " + s.Running
		}
		fmt.Fprintf(&b, "%s: %s, %d calls, %s, memory %d MiB, cpu %d ms, expires %s\n",
			s.Name, s.Language, s.Calls, state, s.MemoryBytes>>20, s.CPUUserMS+s.CPUSystemMS, s.Expires.Format(time.RFC3339))
		if len(s.Names) > 0 {
			fmt.Fprintf(&b, "  holds: %s%s\n", textNames(s.Names), andMore(s.More))
		}
	}
	return b.String()
}

func andMore(n int) string {
	if n > 0 {
		return fmt.Sprintf(" and %d more", n)
	}
	return ""
}

func closeSessionTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("close_session",
		mcpgo.WithDescription("End a session: its sandbox is destroyed and everything it held in memory (variables, imports, open data) is gone; its workspace files stay. A call running in it ends with status session_lost."),
		mcpgo.WithInputSchema[CloseSessionArgs](),
		nonBlank("name"),
		mcpgo.WithOutputSchema[CloseSessionResult](),
		mcpgo.WithDestructiveHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a CloseSessionArgs) (any, string, error) {
		info, err := cfg.Sessions.CloseSession(ctx, a.Name)
		if err != nil {
			return nil, "", err
		}
		text := fmt.Sprintf("session %s closed after %d calls; what it held in memory is gone", info.Name, info.Calls)
		if len(info.Names) > 0 {
			text += ": " + textNames(info.Names) + andMore(info.More)
		}
		return CloseSessionResult{Closed: info}, text + "\n", nil
	})
}

// formatSession is the session part of a run's text.
func formatSession(s *sandpit.SessionResult) string {
	if s == nil {
		return ""
	}
	var b strings.Builder
	switch {
	case s.Lost:
		fmt.Fprintf(&b, "session_lost: session %s ended: %s.", textName(s.Name), textLine(s.LostReason))
		if len(s.LostNames) > 0 {
			fmt.Fprintf(&b, " It held %s%s: all gone.", textNames(s.LostNames), andMore(s.LostMore))
		}
		b.WriteString(" A run_code with this session name starts a new, empty session.\n")
	case s.New:
		fmt.Fprintf(&b, "session %s: new (call 1)", textName(s.Name))
		if s.Previous != "" {
			b.WriteString("; " + textLine(s.Previous))
		}
		b.WriteString("\n")
	default:
		fmt.Fprintf(&b, "session %s: call %d\n", textName(s.Name), s.Call)
	}
	return b.String()
}
