package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/images"
	"github.com/sandpit-dev/sandpit/mcp"
)

// hostPaths lists the host paths this command was configured with, for
// sandbox://logs to show as placeholders: the value of every string flag
// that names a path (--workspace, --state-dir, --snapshot-dir,
// --history-db, --db, --schemas, --private-dir, --address...) as
// "<flag-name>", sandpit's data and image cache directories, and the home
// directory as "~". Walking the flags, rather than naming them, covers a
// path flag added later too. A value without a slash counts when it exists
// (serve asks after it has made the workspace).
func hostPaths(c *cli.Context) []mcp.HostPath {
	var out []mcp.HostPath
	add := func(p, placeholder string) {
		p = strings.TrimPrefix(p, "unix://")
		if p == "" {
			return
		}
		if _, err := os.Stat(p); err != nil && !strings.Contains(p, "/") {
			return // "default", "runc", "256MiB": not a path
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return
		}
		out = append(out, mcp.HostPath{Path: abs, Placeholder: placeholder})
		if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
			out = append(out, mcp.HostPath{Path: real, Placeholder: placeholder})
		}
	}
	for _, ctx := range c.Lineage() {
		var flags []cli.Flag
		switch {
		case ctx.Command != nil && ctx.Command.Name != "":
			flags = ctx.Command.Flags
		case ctx.App != nil:
			flags = ctx.App.Flags
		}
		for _, f := range flags {
			switch f.(type) {
			case *cli.StringFlag, *cli.PathFlag:
				name := f.Names()[0]
				add(ctx.String(name), "<"+name+">")
			}
		}
	}
	add(dataDir(), "<data-dir>")
	cache := images.DefaultCacheDir
	if d := os.Getenv(images.EnvCacheDir); d != "" {
		cache = d
	}
	add(cache, "<image-cache>")
	if home, err := os.UserHomeDir(); err == nil {
		add(home, "~")
	}
	return out
}
