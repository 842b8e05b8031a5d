package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/mark3labs/mcp-go/server"
	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/dash"
	"github.com/sandpit-dev/sandpit/internal/front"
	"github.com/sandpit-dev/sandpit/store/history"
	"github.com/sandpit-dev/sandpit/store/snapshot"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// uiCommand serves the dashboard over a stdio server's state: the history,
// workspace and snapshots it keeps on disk, read while it runs, read-only.
func uiCommand() *cli.Command {
	return &cli.Command{
		Name:  "ui",
		Usage: "serve the dashboard (history, workspace, snapshots, metrics) of a stdio server's state, read-only, on a loopback address",
		Description: "A stdio `sandpit serve` keeps its history, workspace and snapshots on disk; `sandpit ui` reads them while it runs.\n" +
			"Log in with a token of --data-dir (`sandpit token create NAME`), or give --insecure-no-auth on loopback.\n" +
			"Runs in flight, cancelling and restoring belong to the server that runs the code: `sandpit serve --listen` serves the full dashboard.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8081", Usage: "loopback HOST:PORT to serve the pages on"},
			&cli.StringFlag{Name: "workspace", Value: filepath.Join(dataDir(), "workspace"), EnvVars: []string{"SANDPIT_WORKSPACE"}, Usage: "the stdio server's --workspace"},
			&cli.StringFlag{Name: "snapshot-dir", Value: filepath.Join(dataDir(), "snapshots"), Usage: "the stdio server's --snapshot-dir"},
			historyDBFlag(),
			&cli.StringFlag{Name: "data-dir", Value: dataDir(), EnvVars: []string{"SANDPIT_DATA_DIR"}, Usage: "the stdio server's --data-dir: its workspace, snapshots and history unless given one by one, and the tokens that may log in (sandpit token create --data-dir)"},
			&cli.BoolFlag{Name: "insecure-no-auth", Usage: "no login (loopback only): anyone who can reach the address reads the pages"},
		},
		Action: runUI,
	}
}

func runUI(c *cli.Context) error {
	host, _, err := net.SplitHostPort(c.String("listen"))
	if err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT", c.String("listen"))
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--listen %s: sandpit ui serves a loopback address only (it reads a workspace and history with no tenants)", c.String("listen"))
	}
	// As for a stdio serve: --data-dir places the workspace, snapshots
	// and history unless each is given.
	wsDir, snapDir, histDB := c.String("workspace"), c.String("snapshot-dir"), c.String("history-db")
	if data := c.String("data-dir"); c.IsSet("data-dir") {
		if !c.IsSet("workspace") {
			wsDir = filepath.Join(data, "workspace")
		}
		if !c.IsSet("snapshot-dir") {
			snapDir = filepath.Join(data, "snapshots")
		}
		if !c.IsSet("history-db") {
			histDB = filepath.Join(data, "history.db")
		}
	}
	view := &dash.Tenant{}
	if p := histDB; p != "" && p != "off" {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("--history-db %s: %w (a stdio server makes it when it first runs; give the path it uses)", p, err)
		}
		db, err := history.Open(c.Context, p)
		if err != nil {
			return err
		}
		defer db.Close()
		view.History = db
	}
	if d := wsDir; d != "" {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return fmt.Errorf("--workspace %s: no such directory (give the stdio server's --workspace)", d)
		}
		snaps, err := snapshot.Open(snapDir, snapshot.Options{Logger: slog.Default()})
		if err != nil {
			return err
		}
		defer snaps.Close()
		views, err := os.MkdirTemp("", "sandpit-ui-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(views)
		// Opened for reading: the host locks coordinate with the server's
		// runs; nothing here writes the workspace, and no run view is
		// made or swept (views is this process's own, and empty).
		ws, err := workspace.Open(d, workspace.Options{StateDir: views, LockDir: lockDir(), Logger: slog.Default()})
		if err != nil {
			return err
		}
		defer ws.Close()
		view.Files, view.Snapshots = ws, snaps.For(ws)
	}

	noAuth := c.Bool("insecure-no-auth")
	var a auth.Authenticator
	if !noAuth {
		tokens, err := auth.OpenTokens(c.String("data-dir"))
		if err != nil {
			return err
		}
		if list, err := tokens.List(); err == nil && len(list) == 0 {
			slog.Warn("no tokens yet: create one to log in with `sandpit token create NAME` (or give --insecure-no-auth)", "data_dir", c.String("data-dir"))
		}
		a = tokens
	}
	pages, err := dash.New(dash.Config{Auth: a, NoAuth: noAuth, NoAuthTenant: front.NoAuthTenant, ReadOnly: true, Logger: slog.Default(),
		Tenants: dash.SourceFunc(func(context.Context, string) (*dash.Tenant, error) { return view, nil })})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	f, err := front.New(front.Config{
		Addr: net.JoinHostPort(host, port), InsecureNoAuth: noAuth, Auth: a, Pages: pages, Logger: slog.Default(),
		Tenants: front.TenantSourceFunc(func(context.Context, string) (*server.MCPServer, error) {
			return nil, sandpit.Hintf(sandpit.Newf(sandpit.ErrNotFound, "sandpit ui serves no MCP"), "connect the client to sandpit serve")
		}),
	})
	if err != nil {
		ln.Close()
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	slog.Info("sandpit ui: the dashboard, read-only", "url", f.PublicURL()+"/", "workspace", wsDir, "history_db", histDB, "auth", !noAuth)
	err = f.Serve(ctx, ln)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
