package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/runtime"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

func serveCommand() *cli.Command {
	flags := append(containerdFlags(), workspaceFlags()...)
	flags = append(flags, dataFlags()...)
	flags = append(flags, historyFlags()...)
	flags = append(flags,
		&cli.DurationFlag{Name: "timeout", Value: sandpit.DefaultTimeout, Usage: "run_code's default timeout"},
		&cli.DurationFlag{Name: "max-timeout", Value: sandpit.DefaultMaxTimeout, Usage: "the longest timeout a caller may ask for (at most 24h; long runs belong in the background)"},
		&cli.IntFlag{Name: "max-code-kb", Value: 64, Usage: "largest code or stdin accepted (KiB)"},
		&cli.IntFlag{Name: "max-message-mb", Value: mcp.DefaultMaxMessageBytes >> 20, Usage: "largest JSON-RPC message accepted from the client (MiB); a longer one is answered with an error and never read whole"},
		&cli.IntFlag{Name: "concurrency", Value: 16, Usage: "tool calls served at once (mcp-go's default is 5)"},
		&cli.IntFlag{Name: "pool", Value: 2, Usage: "sandboxes kept started ahead of requests, per image (0: off)"},
		&cli.IntFlag{Name: "pool-max", Usage: "under a burst of requests the started pool grows up to this, and shrinks back when misses stop (default 4 × --pool)"},
		&cli.IntFlag{Name: "pool-created", Value: 2, Usage: "sandboxes kept created but not started behind the started ones: a request that finds none started pays only a start"},
		&cli.DurationFlag{Name: "pool-idle", Value: 5 * time.Minute, Usage: "destroy pooled sandboxes unused for this long; refill on the next request"},
		&cli.BoolFlag{Name: "build-images", Value: true, Usage: "build the images the catalog's languages run on, in the background, if they are missing"},
		&cli.IntFlag{Name: "max-images", Value: 8, Usage: "images a run_code result shows at most (the rest are linked)"},
		&cli.IntFlag{Name: "max-image-edge", Value: 1568, Usage: "longest side of an image shown (px); larger ones are scaled down"},
		&cli.IntFlag{Name: "max-image-kb", Value: 1024, Usage: "largest image block (KiB); larger images are re-encoded smaller"},
		&cli.IntFlag{Name: "max-resource-mb", Value: 8, Usage: "largest workspace file resources/read returns (MiB)"},
		&cli.IntFlag{Name: "max-sessions", Value: runtime.DefaultMaxSessions, Usage: fmt.Sprintf("sessions open at once (at most %d; 0: sessions off)", runtime.MaxSessionsLimit)},
		&cli.DurationFlag{Name: "session-idle", Value: runtime.DefaultSessionIdle, Usage: "end a session unused for this long"},
		&cli.DurationFlag{Name: "session-max-age", Value: runtime.DefaultSessionMaxAge, Usage: fmt.Sprintf("end a session this long after it started (at most %s)", runtime.MaxSessionAge)},
		&cli.IntFlag{Name: "max-background", Value: mcp.DefaultMaxBackground, Usage: fmt.Sprintf("background runs in flight at once (at most %d; 0: off)", mcp.MaxBackgroundLimit)},
	)
	flags = append(flags, httpFlags()...)
	flags = append(flags, clusterFlags()...)
	flags = append(flags, tenantFlags()...)
	flags = append(flags, packageFlags()...)
	return &cli.Command{
		Name:  "serve",
		Usage: "serve MCP over stdio (stdout is the protocol; logs go to stderr), or with --listen over HTTP to tenants",
		Flags: flags,
		Action: func(c *cli.Context) error {
			if err := checkServeBounds(c); err != nil {
				return err
			}
			if err := checkHTTPFlags(c); err != nil {
				return err
			}
			if err := checkClusterFlags(c); err != nil {
				return err
			}
			if c.Bool("cluster") {
				return serveFrontDoor(c) // no sandbox here: no instance, no runtime
			}
			in, err := acquireInstance(c)
			if err != nil {
				return err
			}
			// Runs last: after the runtime and the workspace closed, nothing
			// of this instance is left, and its dir goes.
			defer func() {
				if err := in.Remove(); err != nil {
					slog.Warn("instance dir not removed", "instance", in.Name(), "err", err)
				}
			}()
			rt, err := newRuntime(c, in)
			if err != nil {
				return err
			}
			defer rt.Close()
			go func() {
				// What dead sandpit processes left: in the background, so the
				// MCP handshake is not held up.
				if n, err := sweepDead(c, rt.Config().Address); err != nil {
					slog.Warn("janitor: leftovers of dead instances not all removed", "err", err)
				} else if n > 0 {
					slog.Info("janitor: removed sandboxes of dead instances", "count", n)
				}
			}()
			if c.Bool("build-images") {
				// Ended, not orphaned, when the server exits.
				defer startImageBuild(c, rt.Config())()
			}
			cfg := mcp.Config{
				Name:           "sandpit",
				Version:        version,
				Runner:         rt,
				DefaultTimeout: c.Duration("timeout"),
				MaxTimeout:     c.Duration("max-timeout"),
				MaxCodeBytes:   c.Int("max-code-kb") << 10,
				Logger:         slog.Default(),
				Health:         rt,
				Content: mcp.ContentLimits{
					MaxImages:        c.Int("max-images"),
					MaxImageEdge:     c.Int("max-image-edge"),
					MaxImageBytes:    c.Int("max-image-kb") << 10,
					MaxResourceBytes: int64(c.Int("max-resource-mb")) << 20,
				},
			}
			cfg.Status = func(ctx context.Context) mcp.StatusReport {
				return statusReport(ctx, rt, c.Duration("timeout"))
			}
			if c.Int("max-sessions") > 0 {
				sc := rt.SessionConfig()
				cfg.Sessions = rt
				cfg.SessionLimits = mcp.SessionLimits{Max: sc.Max, Idle: sc.Idle, MaxAge: sc.MaxAge, Grace: sc.Grace, Languages: runtime.SessionLanguages()}
			}
			if c.String("listen") != "" {
				return serveHTTP(c, rt, in, cfg)
			}
			uid, gid := rt.SandboxOwner()
			closeWS, err := workspaceConfig(c, &cfg, workspace.Owner{UID: uid, GID: gid}, filepath.Join(in.Dir(), "workspace"))
			if err != nil {
				return err
			}
			defer closeWS()
			ps, err := newPackageSources(c)
			if err != nil {
				return err
			}
			pdir := c.String("packages-dir")
			if pdir == "" {
				pdir = filepath.Join(filepath.Dir(filepath.Clean(c.String("snapshot-dir"))), "packages")
			}
			if err := ps.manager(&cfg, pdir, uid, gid); err != nil {
				return err
			}
			if err := dataConfig(c, &cfg); err != nil {
				return err
			}
			closeHistory, err := historyConfig(c, &cfg)
			if err != nil {
				return err
			}
			defer closeHistory()
			// Closed first (deferred last): background runs are cancelled
			// and recorded while the history and the runtime are still open.
			nbg := c.Int("max-background")
			if nbg == 0 {
				nbg = -1 // NewRuns: off
			}
			runs := mcp.NewRuns(nbg)
			defer runs.Close()
			cfg.Runs = runs
			s := mcp.NewServer(cfg)
			slog.Info("sandpit serving MCP on stdio", "version", version, "instance", in.Name())
			return serveStdio(c.Context, s, c.Int("concurrency"), c.Int("max-message-mb")<<20)
		},
	}
}

// serveStdio serves MCP on stdin/stdout until stdin ends or a SIGTERM or
// SIGINT arrives. Then every in-flight call's context is cancelled (its
// sandbox is killed and the run recorded as cancelled) and serveStdio
// returns once the handlers are done, for the deferred closes to remove
// the pool, views and run dirs. The signals stay caught until the process
// exits: a SIGTERM while those closes run (a client that closed stdin and
// signals 2 s later, as mcp-go's does) lets them finish rather than kill
// the server with its sandboxes left; a second signal exits at once.
func serveStdio(ctx context.Context, s *server.MCPServer, workers, maxMessage int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-sigs
		slog.Info("stopping: cancelling in-flight runs, then releasing sandboxes", "signal", sig.String())
		cancel()
		sig = <-sigs
		slog.Warn("second signal: exiting now", "signal", sig.String())
		os.Exit(1)
	}()
	err := mcp.ServeStdio(ctx, s, os.Stdin, os.Stdout, workers, maxMessage, slog.Default())
	if errors.Is(err, context.Canceled) {
		err = nil // stopped by a signal: a clean exit
	}
	slog.Info("stdio closed; releasing sandboxes")
	return err
}

// statusReport is what only the runtime knows, for sandbox://status.
func statusReport(ctx context.Context, rt *runtime.Runtime, timeout time.Duration) mcp.StatusReport {
	h := rt.Health(ctx)
	l := rt.Limits(timeout) // a run without timeout_seconds gets these
	return mcp.StatusReport{
		ContainerdAddress: h.ContainerdAddress,
		ContainerdVersion: h.ContainerdVersion,
		Namespace:         h.Namespace,
		Runtime:           h.Runtime,
		Rootless:          h.Rootless,
		UserNamespace:     h.UserNamespace,
		Network:           "none",
		Limits:            &l,
		Images:            h.Images,
	}
}

// maxTimeoutLimit bounds --max-timeout and --timeout: a run of a day or
// more is a job for something else.
const maxTimeoutLimit = 24 * time.Hour

// checkServeBounds refuses serve's numbers past their bounds.
func checkServeBounds(c *cli.Context) error {
	switch {
	case c.Duration("max-timeout") <= 0 || c.Duration("max-timeout") > maxTimeoutLimit:
		return fmt.Errorf("--max-timeout %s: give a duration up to %s", c.Duration("max-timeout"), maxTimeoutLimit)
	case c.Duration("timeout") <= 0 || c.Duration("timeout") > c.Duration("max-timeout"):
		return fmt.Errorf("--timeout %s: give a duration up to --max-timeout (%s)", c.Duration("timeout"), c.Duration("max-timeout"))
	case c.Int("max-sessions") < 0 || c.Int("max-sessions") > runtime.MaxSessionsLimit:
		return fmt.Errorf("--max-sessions %d: give 0 (off) to %d", c.Int("max-sessions"), runtime.MaxSessionsLimit)
	case c.Int("max-background") < 0 || c.Int("max-background") > mcp.MaxBackgroundLimit:
		return fmt.Errorf("--max-background %d: give 0 (off) to %d", c.Int("max-background"), mcp.MaxBackgroundLimit)
	}
	return nil
}
