package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/store/snapshot"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// systemWide says sandpit runs as the host's root, whose state lives in
// /var/lib; root of a rootless user namespace (rootlesskit) keeps the
// user's, in the user's home.
func systemWide() bool { return os.Geteuid() == 0 && !host.IsRootless() }

// dataDir is where persistent state lives: /var/lib/sandpit for root,
// $XDG_DATA_HOME/sandpit otherwise.
func dataDir() string {
	if systemWide() {
		return "/var/lib/sandpit"
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "sandpit")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "sandpit")
}

// workspaceFlags are serve's workspace flags. The per-run overlay
// directories go under the instance's state dir.
func workspaceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "workspace", Value: filepath.Join(dataDir(), "workspace"), Usage: "directory shared by the file tools and every run (mounted at /workspace)", EnvVars: []string{"SANDPIT_WORKSPACE"}},
		&cli.StringFlag{Name: "workspace-quota", Value: "256MiB", Usage: "most bytes one run may write into the workspace (it gets ENOSPC beyond); they are held in memory until the run ends and count against --memory-mb, so keep it below that; it also bounds what one run's merge writes to the host (apparent size)"},
		&cli.StringFlag{Name: "workspace-max-size", Usage: "largest the whole workspace may grow (apparent bytes; write_file refuses past it, a run's merge drops what does not fit; default 4× --workspace-quota)"},
		&cli.Int64Flag{Name: "workspace-max-files", Value: 100000, Usage: "most entries the whole workspace may hold"},
		&cli.Int64Flag{Name: "run-max-files", Value: 20000, Usage: "most files and directories one run may bring back into the workspace (the rest is dropped and reported)"},
		&cli.DurationFlag{Name: "merge-timeout", Value: 30 * time.Second, Usage: "longest the copy of one run's changes into the workspace may take; past it none are applied"},
		&cli.StringFlag{Name: "snapshot-dir", Value: filepath.Join(dataDir(), "snapshots"), Usage: "content-addressed snapshot store and its index"},
		&cli.IntFlag{Name: "undo-runs", Value: snapshot.DefaultMaxUndo, Usage: "how many runs undo_last_run can take back"},
		&cli.StringFlag{Name: "workspace-owner", Usage: "UID:GID that owns the workspace's files on the host (default: the owner of the workspace directory); runs still see them as the sandbox user's (idmapped mounts)"},
		&cli.BoolFlag{Name: "require-workspace-quota", Usage: "refuse to start when per-run overlays cannot be mounted (instead of binding the workspace without quota); always so as root, unless --allow-workspace-bind"},
		&cli.BoolFlag{Name: "allow-workspace-bind", Usage: "as root, let runs write the workspace directly when per-run overlays cannot be mounted (a workspace path with ',', ':' or '\\', no overlay module): no quota, no bounds on what a run brings back, changes visible while it writes"},
	}
}

// workspaceConfig opens the workspace and its snapshot store, removes what a
// crashed server left, and fills cfg's Workspace, Files and Snapshots. owner
// is the host uid/gid of the sandbox user (zero: 1000:1000, or the current
// user when not root).
func workspaceConfig(c *cli.Context, cfg *mcp.Config, sandbox workspace.Owner, viewsDir string) (cleanup func(), err error) {
	return openWorkspace(c, cfg, sandbox, c.String("workspace"), c.String("snapshot-dir"), viewsDir, 0)
}

// openWorkspace opens the workspace dir with its snapshot store snapDir,
// its run views under viewsDir, under the workspace flags; maxSize, when
// set, bounds it instead of --workspace-max-size.
func openWorkspace(c *cli.Context, cfg *mcp.Config, sandbox workspace.Owner, dir, snapDir, viewsDir string, maxSize int64) (cleanup func(), err error) {
	var owner workspace.Owner
	if s := c.String("workspace-owner"); s != "" {
		if _, err := fmt.Sscanf(s, "%d:%d", &owner.UID, &owner.GID); err != nil {
			return nil, fmt.Errorf("--workspace-owner %q: want UID:GID, e.g. 1000:1000", s)
		}
	}
	quota, err := parseSize(c.String("workspace-quota"))
	if err != nil {
		return nil, fmt.Errorf("--workspace-quota: %w", err)
	}
	if mem := c.Int64("memory-mb") << 20; mem > 0 && quota >= mem && c.String("listen") == "" {
		// (Over HTTP, serve warns once, not per tenant.)
		slog.Warn("--workspace-quota is not below --memory-mb: a run writing that much is OOM-killed before it sees ENOSPC", "quota_bytes", quota, "memory_bytes", mem)
	}
	if v := c.String("workspace-max-size"); v != "" && maxSize == 0 {
		if maxSize, err = parseSize(v); err != nil {
			return nil, fmt.Errorf("--workspace-max-size: %w", err)
		}
	}
	snaps, err := snapshot.Open(snapDir, snapshot.Options{MaxUndo: c.Int("undo-runs"), Logger: slog.Default()})
	if err != nil {
		return nil, err
	}
	// As the host's root, a run that writes the workspace directly writes
	// it with root's reach over everything beside it: a root server falls
	// back to that only when told it may (review 2026-12-01, H2).
	rootDefault := systemWide() && !c.Bool("allow-workspace-bind") && !c.Bool("require-workspace-quota")
	ws, err := workspace.Open(dir, workspace.Options{
		StateDir:          viewsDir, // the instance's: no other process touches it
		Sandbox:           &sandbox,
		Owner:             owner, // zero: the workspace directory's owner
		LockDir:           lockDir(),
		Quota:             quota,
		MaxSize:           maxSize,
		MaxWorkspaceFiles: c.Int64("workspace-max-files"),
		MaxFiles:          c.Int64("run-max-files"),
		MergeTimeout:      c.Duration("merge-timeout"),
		RequireOverlay:    c.Bool("require-workspace-quota") || rootDefault,
		BeforeRun:         snaps.BeforeRun,
		Logger:            slog.Default(),
	})
	if err != nil {
		snaps.Close()
		if rootDefault && errors.Is(err, workspace.ErrNoOverlay) {
			err = sandpit.WithHint(err, "a root server needs per-run overlays: use a workspace path without ',', ':' or '\\' and a kernel with overlay and tmpfs; or accept runs writing the workspace directly (no quota) with --allow-workspace-bind")
		}
		return nil, err
	}
	if err := ws.Sweep(c.Context); err != nil {
		slog.Warn("leftover run views could not all be removed", "err", err)
	}
	slog.Info("workspace ready", "dir", ws.Dir(), "owner", ws.Owner(), "sandbox_user", sandbox, "quota_bytes", quota, "per_run_overlay", ws.Isolated(), "snapshots", snapDir)
	cfg.Workspace, cfg.Files, cfg.Snapshots = ws, ws, snaps.For(ws)
	cfg.Opener = ws // the data tools open workspace files by descriptor
	return func() { ws.Close(); snaps.Close() }, nil
}

// parseSize reads "1GiB", "512MiB", "64k", "1g" or a byte count.
func parseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10}, {"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}, {"b", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.m
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a size (e.g. 1GiB, 512MiB)", s)
	}
	return n * mult, nil
}

// lockDir holds the host-wide workspace locks: one place for every sandpit
// process of this user, whatever its --state-dir, so that two servers (or a
// server and `sandpit run`) on one workspace take the same locks.
func lockDir() string {
	if os.Geteuid() == 0 {
		return "/run/sandpit/locks"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "sandpit", "locks")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("sandpit-%d", os.Getuid()), "locks")
}
