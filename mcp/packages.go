package mcp

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/packages"
)

// Packages keeps the workspace's package layer; *packages.Manager
// implements it.
type Packages interface {
	Configured(language string) bool
	// Layer is the layer's host dir for a lock ("" for none), held until
	// release.
	Layer(ctx context.Context, lock []byte) (dir string, release func(), err error)
	Plan(ctx context.Context, op packages.Op, readLock func(context.Context) ([]byte, error)) (*packages.Install, error)
	List(lock []byte) ([]packages.Package, error)
}

// readLock reads sandpit.lock from the workspace; no file is no lock.
func (cfg Config) readLock(ctx context.Context) ([]byte, error) {
	c, err := cfg.Files.Read(ctx, packages.LockFile, 0, packages.MaxLockBytes)
	if errors.Is(err, sandpit.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !c.EOF {
		return nil, fmt.Errorf("%w: %s is over %d bytes: delete it, or restore it from a snapshot", packages.ErrBadLock, packages.LockFile, packages.MaxLockBytes)
	}
	return c.Data, nil
}

// layeredRunner gives every run with the workspace the layer its
// sandpit.lock names, read just before the run (an edit, a restore or an
// undo of the lock takes effect on the next run).
type layeredRunner struct {
	Runner
	cfg Config
}

func (l *layeredRunner) Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	if req.Workspace != nil && req.Install == nil {
		text, err := l.cfg.readLock(ctx)
		if err != nil {
			return nil, err
		}
		var release func()
		if req.Env, release, err = l.cfg.Packages.Layer(ctx, text); err != nil {
			return nil, err
		}
		defer release()
	}
	return l.Runner.Run(ctx, req)
}

// InstallPackagesArgs are install_packages' arguments.
type InstallPackagesArgs struct {
	Language string   `json:"language" jsonschema:"required" jsonschema_description:"python (pip requirement strings) or javascript (npm specs)"`
	Packages []string `json:"packages" jsonschema:"required" jsonschema_description:"e.g. [\"requests>=2.31\", \"polars==1.2.0\"] or [\"left-pad@1.3.0\"]; dependencies are resolved for you"`
}

// RemovePackagesArgs are remove_packages' arguments.
type RemovePackagesArgs struct {
	Language string   `json:"language" jsonschema:"required" jsonschema_description:"python or javascript"`
	Packages []string `json:"packages" jsonschema:"required" jsonschema_description:"names of requested packages to drop; dependencies nothing else needs go with them"`
}

// PackagesResult is what install_packages and remove_packages return.
type PackagesResult struct {
	RunID     string             `json:"run_id,omitempty"` // the install step, in the history; undo_last_run reverts it
	Installed []packages.Package `json:"installed"`
	Removed   []packages.Package `json:"removed,omitempty"`
	Unchanged []packages.Package `json:"unchanged,omitempty"`
	Refused   []packages.Refusal `json:"refused,omitempty"`
	Notes     []string           `json:"notes,omitempty"`
	Lock      string             `json:"lock"` // the workspace's lock file
	Files     *sandpit.Changes   `json:"files,omitempty"`
	Status    sandpit.Status     `json:"status,omitempty"`
}

// ListPackagesResult is list_packages'.
type ListPackagesResult struct {
	Packages   []packages.Package `json:"packages"`
	Lock       string             `json:"lock"`
	Configured []string           `json:"configured"` // languages this server installs
}

func addPackageTools(s *server.MCPServer, cfg Config) {
	s.AddTool(installPackagesTool(cfg))
	s.AddTool(removePackagesTool(cfg))
	s.AddTool(listPackagesTool(cfg))
}

func installPackagesTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("install_packages",
		mcpgo.WithDescription("Install Python wheels or npm packages into this workspace's package layer, which every later run and session of the workspace imports (read-only, on PYTHONPATH / NODE_PATH). "+
			"The server resolves dependencies and downloads only from the package sources the operator configured, verifying every file's hash; sandboxes still get no network. "+
			"Python installs wheels only (a package with only a source distribution is refused); npm install scripts never run. "+
			"The exact set is recorded in sandpit.lock in the workspace: snapshots and undo_last_run restore it, and editing it changes the layer on the next run. "+
			"The result lists what was installed, what was refused and why."),
		mcpgo.WithInputSchema[InstallPackagesArgs](),
		nonBlank("language"),
		mcpgo.WithOutputSchema[PackagesResult](),
		mcpgo.WithDestructiveHintAnnotation(false),
		mcpgo.WithOpenWorldHintAnnotation(true),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a InstallPackagesArgs) (any, string, error) {
		if len(a.Packages) == 0 {
			return nil, "", argErrorf("packages is empty: name at least one, e.g. [\"requests>=2.31\"]")
		}
		return cfg.changePackages(ctx, packages.Op{Language: langName(a.Language), Add: a.Packages})
	})
}

func removePackagesTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("remove_packages",
		mcpgo.WithDescription("Remove packages installed with install_packages from this workspace's package layer (and the dependencies nothing else needs). Recorded in sandpit.lock like an install; undo_last_run brings them back."),
		mcpgo.WithInputSchema[RemovePackagesArgs](),
		nonBlank("language"),
		mcpgo.WithOutputSchema[PackagesResult](),
		mcpgo.WithDestructiveHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a RemovePackagesArgs) (any, string, error) {
		if len(a.Packages) == 0 {
			return nil, "", argErrorf("packages is empty: name the packages to remove (list_packages shows them)")
		}
		return cfg.changePackages(ctx, packages.Op{Language: langName(a.Language), Remove: a.Packages})
	})
}

func listPackagesTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("list_packages",
		mcpgo.WithDescription("List the packages of this workspace's package layer (from sandpit.lock): name, version, sha256, size, and whether it was asked for or came as a dependency; and which languages this server installs."),
		mcpgo.WithInputSchema[noArgs](),
		mcpgo.WithOutputSchema[ListPackagesResult](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, _ noArgs) (any, string, error) {
		text, err := cfg.readLock(ctx)
		if err != nil {
			return nil, "", err
		}
		pkgs, err := cfg.Packages.List(text)
		if err != nil {
			return nil, "", err
		}
		out := ListPackagesResult{Packages: pkgs, Lock: packages.LockFile, Configured: []string{}}
		for _, l := range []string{packages.Python, packages.JavaScript} {
			if cfg.Packages.Configured(l) {
				out.Configured = append(out.Configured, l)
			}
		}
		if out.Packages == nil {
			out.Packages = []packages.Package{}
		}
		var b strings.Builder
		if len(pkgs) == 0 {
			b.WriteString("no packages installed in this workspace")
		} else {
			fmt.Fprintf(&b, "%d packages in this workspace's layer:\n", len(pkgs))
			for _, p := range pkgs {
				fmt.Fprintf(&b, "  %s\n", packageLine(p))
			}
		}
		if len(out.Configured) == 0 {
			b.WriteString("\nthis server installs no packages (the operator enables them with --package-source)\n")
		} else {
			fmt.Fprintf(&b, "\ninstall_packages serves: %s\n", strings.Join(out.Configured, ", "))
		}
		return out, b.String(), nil
	})
}

func langName(s string) string {
	switch l := strings.ToLower(strings.TrimSpace(s)); l {
	case "py", "python3":
		return packages.Python
	case "js", "node", "nodejs", "npm":
		return packages.JavaScript
	default:
		return l
	}
}

func packageLine(p packages.Package) string {
	s := fmt.Sprintf("%s %s %s (%d bytes, sha256 %s)", p.Language, p.Name, p.Version, p.Size, p.SHA256[:min(12, len(p.SHA256))])
	if p.Path != "" && p.Path != "node_modules/"+p.Name {
		s += " at " + p.Path
	}
	if !p.Requested {
		s += ", a dependency"
	}
	return s
}

// changePackages plans op, runs its install step as the agent's run (in
// the history, with the workspace: the lock it writes is undoable), then
// makes the new layer current.
func (cfg Config) changePackages(ctx context.Context, op packages.Op) (any, string, error) {
	in, err := cfg.Packages.Plan(ctx, op, cfg.readLock)
	if err != nil {
		return nil, "", err
	}
	defer in.Close()
	out := PackagesResult{Installed: in.Installed, Removed: in.Removed, Unchanged: in.Unchanged, Refused: in.Refused, Notes: in.Notes, Lock: packages.LockFile}
	if out.Installed == nil {
		out.Installed = []packages.Package{}
	}
	if in.Request != nil {
		req := *in.Request
		req.Workspace = cfg.Workspace
		res, err := cfg.Runs.runForeground(ctx, cfg.Runner, req, func(l *liveRun) func() { return startProgress(ctx, l) })
		if err != nil {
			return nil, "", err
		}
		out.RunID, out.Files, out.Status = res.ID, res.Files, res.Status
		if err := in.Commit(res); err != nil {
			return nil, "", sandpit.WithHint(err, fmt.Sprintf("run %s is the install step (get_run shows it); undo_last_run puts the previous %s back", res.ID, packages.LockFile))
		}
	}
	return out, packagesText(out), nil
}

func packagesText(r PackagesResult) string {
	var b strings.Builder
	switch {
	case len(r.Installed) == 0 && len(r.Removed) == 0:
		b.WriteString("nothing changed: ")
		if len(r.Unchanged) > 0 {
			b.WriteString("already installed\n")
		} else {
			b.WriteString("nothing installed\n")
		}
	default:
		if len(r.Installed) > 0 {
			fmt.Fprintf(&b, "installed %d:\n", len(r.Installed))
			for _, p := range r.Installed {
				fmt.Fprintf(&b, "  %s\n", packageLine(p))
			}
		}
		if len(r.Removed) > 0 {
			fmt.Fprintf(&b, "removed %d:\n", len(r.Removed))
			for _, p := range r.Removed {
				fmt.Fprintf(&b, "  %s\n", packageLine(p))
			}
		}
	}
	if len(r.Unchanged) > 0 {
		fmt.Fprintf(&b, "unchanged: %d packages\n", len(r.Unchanged))
	}
	for _, f := range r.Refused {
		fmt.Fprintf(&b, "refused %q: %s\n", f.Spec, f.Reason)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if r.RunID != "" {
		fmt.Fprintf(&b, "recorded in %s by run %s (undo_last_run reverts it); later runs and sessions import these read-only\n", r.Lock, r.RunID)
	}
	return b.String()
}

var (
	pyMissingRE   = regexp.MustCompile(`ModuleNotFoundError: No module named '([A-Za-z0-9_.]{1,200})'`)
	nodeMissingRE = regexp.MustCompile(`Cannot find module '([^'\s]{1,214})'`)
)

// missingPackageHint tells an agent whose run failed on a module that is
// not there how to add it, when this server installs that language's
// packages: the first wall an agent hits, turned into its next step.
func (cfg Config) missingPackageHint(language, stderr string) string {
	if cfg.Packages == nil {
		return ""
	}
	var lang, name string
	switch language {
	case packages.Python:
		m := pyMissingRE.FindStringSubmatch(stderr)
		if m == nil {
			return ""
		}
		lang, name = packages.Python, strings.SplitN(m[1], ".", 2)[0]
	case packages.JavaScript:
		m := nodeMissingRE.FindStringSubmatch(stderr)
		if m == nil || strings.HasPrefix(m[1], ".") || strings.HasPrefix(m[1], "/") || strings.HasPrefix(m[1], "node:") {
			return ""
		}
		parts := strings.Split(m[1], "/")
		name = parts[0]
		if strings.HasPrefix(name, "@") && len(parts) > 1 {
			name += "/" + parts[1]
		}
		lang = packages.JavaScript
	default:
		return ""
	}
	if !cfg.Packages.Configured(lang) {
		return ""
	}
	return fmt.Sprintf("note: %q is not installed; install_packages(language=%q, packages=[%q]) can add it from the operator's package source (the package's name may differ from the module's), and later runs import it", name, lang, name)
}
