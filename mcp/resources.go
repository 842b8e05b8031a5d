package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	goruntime "runtime"
	"strings"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/logring"
	"github.com/sandpit-dev/sandpit/internal/packages"
)

// LogSource hands out the server's recent log records. *logring.Ring implements it.
type LogSource interface {
	Records(n int) []logring.Record
}

// StatusReport is the configuration in effect, for sandbox://status and the
// prompts. cmd/sandpit fills what only the runtime knows through
// Config.Status; the server sets the fields it owns itself (name, version,
// timeouts, code size limit, languages, workspace).
type StatusReport struct {
	Server    string `json:"server"`
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`

	ContainerdAddress string                `json:"containerd_address,omitempty"`
	ContainerdVersion string                `json:"containerd_version,omitempty"`
	Namespace         string                `json:"namespace,omitempty"`
	Runtime           string                `json:"runtime,omitempty"` // e.g. runc
	Rootless          bool                  `json:"rootless"`
	UserNamespace     bool                  `json:"user_namespace"`
	Network           string                `json:"network"` // always "none": sandboxes have no network
	Limits            *sandpit.Limits       `json:"limits,omitempty"`
	Images            []sandpit.ImageStatus `json:"images,omitempty"`
	// Libraries lists, per language, what its image offers beyond the
	// standard library (e.g. "python": ["numpy 1.24"]).
	Libraries map[string][]string `json:"libraries,omitempty"`

	Languages             []sandpit.Language `json:"languages"`
	Workspace             string             `json:"workspace,omitempty"` // "/workspace" when runs get one
	DefaultTimeoutSeconds float64            `json:"default_timeout_seconds"`
	MaxTimeoutSeconds     float64            `json:"max_timeout_seconds"`
	MaxCodeBytes          int                `json:"max_code_bytes"`
	// Packages are the languages install_packages offers (from the
	// operator's sources; the sandboxes still have no network).
	Packages []string `json:"packages,omitempty"`
}

// status is the report with the server's own fields filled in.
func (cfg Config) status(ctx context.Context) StatusReport {
	var s StatusReport
	if cfg.Status != nil {
		s = cfg.Status(ctx)
	}
	s.Server, s.Version, s.GoVersion = cfg.Name, cfg.Version, goruntime.Version()
	s.Network = "none"
	s.DefaultTimeoutSeconds = cfg.DefaultTimeout.Seconds()
	s.MaxTimeoutSeconds = cfg.MaxTimeout.Seconds()
	s.MaxCodeBytes = cfg.MaxCodeBytes
	s.Languages = []sandpit.Language{}
	if cfg.Runner != nil {
		s.Languages = append(s.Languages, cfg.Runner.Languages()...)
		for _, l := range s.Languages {
			if len(l.Libraries) > 0 {
				if s.Libraries == nil {
					s.Libraries = map[string][]string{}
				}
				s.Libraries[l.Name] = l.Libraries
			}
		}
	}
	if cfg.Workspace != nil {
		s.Workspace = sandpit.WorkspaceDir
	}
	if cfg.Packages != nil {
		for _, l := range []string{packages.Python, packages.JavaScript} {
			if cfg.Packages.Configured(l) {
				s.Packages = append(s.Packages, l)
			}
		}
	}
	return s
}

// logsShown is how many records sandbox://logs returns at most.
const logsShown = 500

// addResources registers the resources whose dependencies are set.
func addResources(s *server.MCPServer, cfg Config) {
	s.AddResource(mcpgo.NewResource("sandbox://status", "status",
		mcpgo.WithResourceDescription("The configuration in effect: limits, images, OCI runtime, rootless or not, workspace, timeouts, versions."),
		mcpgo.WithMIMEType("application/json"),
	), func(ctx context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
		return jsonContents(req.Params.URI, cfg.status(ctx))
	})
	if cfg.Runner != nil {
		s.AddResource(mcpgo.NewResource("sandbox://languages", "languages",
			mcpgo.WithResourceDescription("The languages run_code accepts, with the image and version of each and the libraries programs can import."),
			mcpgo.WithMIMEType("application/json"),
		), func(ctx context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
			return jsonContents(req.Params.URI, map[string]any{"languages": cfg.Runner.Languages()})
		})
		addRunApp(s)
	}
	if cfg.Files != nil {
		addWorkspaceResource(s, cfg)
	}
	if cfg.Logs != nil {
		redact := newRedactor(cfg.HostPaths)
		s.AddResource(mcpgo.NewResource("sandbox://logs", "logs",
			mcpgo.WithResourceDescription(fmt.Sprintf("The server's most recent structured log records (at most %d), oldest first; host paths show as placeholders such as <workspace>.", logsShown)),
			mcpgo.WithMIMEType("application/json"),
		), func(ctx context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
			return jsonContents(req.Params.URI, map[string]any{"records": redact.records(cfg.Logs.Records(logsShown))})
		})
	}
	if cfg.History != nil {
		s.AddResourceTemplate(mcpgo.NewResourceTemplate("sandbox://runs/{id}", "run",
			mcpgo.WithTemplateDescription("One run in full, as get_run returns it: code, status, usage, limits, output heads, workspace changes; while it runs, status running and its output so far. Subscribe to be notified (notifications/resources/updated) when it ends."),
			mcpgo.WithTemplateMIMEType("application/json"),
		), func(ctx context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
			if l := cfg.Runs.get(templateArg(req, "id")); l != nil {
				return jsonContents(req.Params.URI, l.record())
			}
			r, err := getRun(ctx, cfg.History, templateArg(req, "id"))
			if err != nil {
				return nil, err
			}
			return jsonContents(req.Params.URI, record(r))
		})
	}
}

// templateArg is a URI template variable; mcp-go passes them as []string.
func templateArg(req mcpgo.ReadResourceRequest, name string) string {
	switch v := req.Params.Arguments[name].(type) {
	case string:
		return v
	case []string:
		if len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// jsonContents is v as an indented JSON resource. Nothing here is HTML, so
// "<" stays "<" (a placeholder such as <workspace> reads as written).
func jsonContents(uri string, v any) ([]mcpgo.ResourceContents, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("%s: %w", uri, err)
	}
	return []mcpgo.ResourceContents{mcpgo.TextResourceContents{URI: uri, MIMEType: "application/json", Text: strings.TrimSuffix(b.String(), "\n")}}, nil
}
