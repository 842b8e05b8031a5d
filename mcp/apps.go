package mcp

import (
	"context"
	_ "embed"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// MCP Apps (the io.modelcontextprotocol/ui extension, SEP-1865, specification
// version 2026-01-26 in github.com/modelcontextprotocol/ext-apps): a host that
// renders apps reads the ui:// resource a tool's _meta.ui.resourceUri names,
// shows it in a sandboxed iframe and passes it the tool's result over
// postMessage (ui/notifications/tool-result, after the app's ui/initialize
// handshake). run_code's result itself is unchanged: clients without the
// extension ignore _meta and read the same text, images and links as before.

const (
	// runAppURI is the app that shows one run: status, exit code, duration,
	// output as text, the images and a table preview the result carries,
	// the workspace files it changed.
	runAppURI = "ui://sandpit/run"
	// appMIMEType is the type the specification requires of an app's HTML.
	appMIMEType = "text/html;profile=mcp-app"
	// legacyResourceURIKey is the flat _meta key that named the app before
	// the specification nested it as ui.resourceUri. Deprecated there, but
	// the extension's own SDK (registerAppTool) still sets both for hosts
	// that read only the old one, and so does sandpit.
	legacyResourceURIKey = "ui/resourceUri"
)

// runAppHTML is the app: one self-contained page, its script and style
// inline, asking nothing of any origin. It never puts what the result holds
// into the page as HTML, only as text, and shows images only as data: URIs
// of PNG, JPEG, GIF and WebP.
//
//go:embed apps/run.html
var runAppHTML string

// withRunApp points the tool at the run app: a host that renders MCP Apps
// shows the tool's result in it.
func withRunApp() mcpgo.ToolOption {
	return func(t *mcpgo.Tool) {
		if t.Meta == nil {
			t.Meta = &mcpgo.Meta{}
		}
		if t.Meta.AdditionalFields == nil {
			t.Meta.AdditionalFields = map[string]any{}
		}
		t.Meta.AdditionalFields["ui"] = map[string]any{"resourceUri": runAppURI}
		t.Meta.AdditionalFields[legacyResourceURIKey] = runAppURI
	}
}

// runAppMeta is the app resource's _meta. It declares no csp, so the host
// applies the specification's restrictive default (no connections; scripts
// and styles inline; images from data:), which is all the app needs.
func runAppMeta() map[string]any {
	return map[string]any{"ui": map[string]any{"prefersBorder": true}}
}

// addRunApp registers the run app's resource.
func addRunApp(s *server.MCPServer) {
	res := mcpgo.NewResource(runAppURI, "run view",
		mcpgo.WithResourceDescription("The MCP App (io.modelcontextprotocol/ui) that shows a run_code result: status, exit code, duration, stdout and stderr as text, the images it made, a table preview, the workspace files it changed. Hosts that render MCP Apps show it; it is not meant to be read otherwise."),
		mcpgo.WithMIMEType(appMIMEType),
	)
	res.Meta = &mcpgo.Meta{AdditionalFields: runAppMeta()}
	s.AddResource(res, func(ctx context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
		return []mcpgo.ResourceContents{mcpgo.TextResourceContents{
			URI: runAppURI, MIMEType: appMIMEType, Text: runAppHTML, Meta: runAppMeta(),
		}}, nil
	})
}
