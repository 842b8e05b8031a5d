package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/mcp"
)

// TestHostPaths: every string flag that names a path, global or the
// command's own, relative ones made absolute, becomes a placeholder for
// sandbox://logs; values that are not paths do not.
func TestHostPaths(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("ws", 0o755); err != nil { // serve has made it by the time it asks
		t.Fatal(err)
	}
	var got []mcp.HostPath
	app := &cli.App{
		Flags: []cli.Flag{&cli.StringFlag{Name: "log-dir", Value: "/var/log/sandpit-test"}},
		Commands: []*cli.Command{{
			Name:  "serve",
			Flags: append(append(containerdFlags(), workspaceFlags()...), historyFlags()...),
			Action: func(c *cli.Context) error {
				got = hostPaths(c)
				return nil
			},
		}},
	}
	if err := app.Run([]string{"sandpit", "serve", "--workspace", "ws", "--state-dir", "/srv/state", "--history-db", "/srv/h/history.db", "--address", "unix:///srv/c/containerd.sock"}); err != nil {
		t.Fatal(err)
	}
	has := func(path, placeholder string) bool {
		return slices.Contains(got, mcp.HostPath{Path: path, Placeholder: placeholder})
	}
	for _, w := range []mcp.HostPath{
		{Path: filepath.Join(dir, "ws"), Placeholder: "<workspace>"},
		{Path: "/srv/state", Placeholder: "<state-dir>"},
		{Path: "/srv/h/history.db", Placeholder: "<history-db>"},
		{Path: "/srv/c/containerd.sock", Placeholder: "<address>"},
		{Path: "/var/log/sandpit-test", Placeholder: "<log-dir>"},
	} {
		if !has(w.Path, w.Placeholder) {
			t.Errorf("no %s for %s in %+v", w.Placeholder, w.Path, got)
		}
	}
	for _, p := range got {
		if !filepath.IsAbs(p.Path) {
			t.Errorf("%+v is not an absolute path", p)
		}
		for _, notPath := range []string{"<instance>", "<namespace>", "<runc-binary>", "<workspace-quota>"} {
			if p.Placeholder == notPath {
				t.Errorf("%+v: %s is not a path", p, notPath)
			}
		}
	}
	if home, err := os.UserHomeDir(); err == nil && !has(home, "~") {
		t.Errorf("home %s missing from %+v", home, got)
	}
}
