package front

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/packages"
	"github.com/sandpit-dev/sandpit/mcp"
)

// Fakes that only satisfy mcp.Config's interfaces: registering tools calls
// none of their methods but Languages.
type (
	fakeRunner    struct{ mcp.Runner }
	fakeSessions  struct{ mcp.SessionManager }
	fakeFiles     struct{ mcp.FileStore }
	fakeSnapshots struct{ mcp.SnapshotStore }
	fakeHistory   struct{ mcp.History }
	fakeQueryDB   struct{ mcp.QueryDB }
	fakeValidator struct{ mcp.Validator }
	fakeOpener    struct{ mcp.Opener }
	fakeLogs      struct{ mcp.LogSource }
)

func (fakeRunner) Languages() []sandpit.Language { return nil }

type fakeWorkspace struct{}

func (fakeWorkspace) Open(context.Context, string) (sandpit.View, error) {
	return nil, errors.New("fake")
}

type fakePackages struct{}

func (fakePackages) Configured(string) bool                                { return false }
func (fakePackages) Layer(context.Context, []byte) (string, func(), error) { return "", func() {}, nil }
func (fakePackages) List([]byte) ([]packages.Package, error)               { return nil, nil }
func (fakePackages) Plan(context.Context, packages.Op, func(context.Context) ([]byte, error)) (*packages.Install, error) {
	return nil, errors.New("fake")
}

// TestScopeTableCoversServer builds sandpit's MCP server with every
// dependency set, so it registers every tool, prompt and resource it can,
// and checks each has its own entry in the scope tables — and that no
// entry names something the server no longer has.
func TestScopeTableCoversServer(t *testing.T) {
	runs := mcp.NewRuns(1)
	defer runs.Close()
	s := mcp.NewServer(mcp.Config{
		Runner:    fakeRunner{},
		Sessions:  fakeSessions{},
		Files:     fakeFiles{},
		Workspace: fakeWorkspace{},
		Packages:  fakePackages{},
		Snapshots: fakeSnapshots{},
		History:   fakeHistory{},
		QueryDB:   fakeQueryDB{},
		Validator: fakeValidator{},
		Opener:    fakeOpener{},
		Logs:      fakeLogs{},
		Runs:      runs,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	var tools []string
	for name := range s.ListTools() {
		tools = append(tools, name)
		if _, ok := toolScopes[name]; !ok {
			t.Errorf("tool %s has no scope in toolScopes", name)
		}
	}
	for name := range toolScopes {
		if !slices.Contains(tools, name) {
			t.Errorf("toolScopes names %s, which the server does not register", name)
		}
	}
	var prompts []string
	for name := range s.ListPrompts() {
		prompts = append(prompts, name)
		if _, ok := promptScopes[name]; !ok {
			t.Errorf("prompt %s has no scope in promptScopes", name)
		}
	}
	for name := range promptScopes {
		if !slices.Contains(prompts, name) {
			t.Errorf("promptScopes names %s, which the server does not register", name)
		}
	}

	c, err := client.NewInProcessClient(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	init := mcpgo.InitializeRequest{}
	init.Params.ProtocolVersion = "2025-06-18"
	init.Params.ClientInfo = mcpgo.Implementation{Name: "t", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	var uris []string
	for uri := range s.ListResources() {
		uris = append(uris, uri)
	}
	tmpls, err := c.ListResourceTemplates(ctx, mcpgo.ListResourceTemplatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range tmpls.ResourceTemplates {
		uris = append(uris, tm.URITemplate.Raw())
	}
	if len(uris) < 5 {
		t.Fatalf("only %d resources registered: %v", len(uris), uris)
	}
	for _, uri := range uris {
		if s := resourceScope(uri); s == everyScope {
			t.Errorf("resource %s has no scope in resourceScopes", uri)
		}
	}
	for _, r := range resourceScopes {
		if !slices.ContainsFunc(uris, func(u string) bool { return len(u) >= len(r.prefix) && u[:len(r.prefix)] == r.prefix }) {
			t.Errorf("resourceScopes names %s, which the server does not serve", r.prefix)
		}
	}
	for _, table := range []map[string]string{toolScopes, promptScopes} {
		for name, scope := range table {
			if !slices.Contains(auth.AllScopes, scope) {
				t.Errorf("%s: scope %q is not one of auth.AllScopes", name, scope)
			}
		}
	}
}
