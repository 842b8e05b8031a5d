package main

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1GiB", 1 << 30, true},
		{"512MiB", 512 << 20, true},
		{"64k", 64 << 10, true},
		{"2 G", 2 << 30, true},
		{"4096", 4096, true},
		{"", 0, false},
		{"-1G", 0, false},
		{"lots", 0, false},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// A root server whose workspace cannot have per-run overlays (here its path
// holds a ',', which overlay options cannot carry) refuses to start rather
// than let runs write the workspace directly, unless told it may (review
// 2026-12-01, H2: bind mode is where a run could turn another run's cleanup
// against the host).
func TestRootRefusesWorkspaceBind(t *testing.T) {
	if !systemWide() {
		testenv.Skip(t, "needs the host's root (a root server's default)")
	}
	for _, tc := range []struct {
		name     string
		args     []string
		wantBind bool
	}{
		{name: "default"},
		{name: "allowed", args: []string{"--allow-workspace-bind"}, wantBind: true},
		{name: "allowed but quota required", args: []string{"--allow-workspace-bind", "--require-workspace-quota"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			var (
				cfg     mcp.Config
				openErr error
			)
			app := &cli.App{Commands: []*cli.Command{{
				Name:  "serve",
				Flags: workspaceFlags(),
				Action: func(c *cli.Context) error {
					cleanup, err := workspaceConfig(c, &cfg, workspace.Owner{UID: 101000, GID: 101000}, filepath.Join(base, "state"))
					if err == nil {
						cleanup()
					}
					openErr = err
					return nil
				},
			}}}
			args := append([]string{"sandpit", "serve", "--workspace", filepath.Join(base, "a,b", "ws"), "--snapshot-dir", filepath.Join(base, "snapshots")}, tc.args...)
			if err := app.Run(args); err != nil {
				t.Fatal(err)
			}
			if !tc.wantBind {
				if !errors.Is(openErr, workspace.ErrNoOverlay) {
					t.Fatalf("workspace opened (err %v), want ErrNoOverlay", openErr)
				}
				if h := sandpit.HintOf(openErr); !strings.Contains(h, "--allow-workspace-bind") && !slices.Contains(tc.args, "--require-workspace-quota") {
					t.Errorf("hint %q does not name --allow-workspace-bind", h)
				}
				return
			}
			if openErr != nil {
				t.Fatal(openErr)
			}
			if ws := cfg.Workspace.(*workspace.Workspace); ws.Isolated() {
				t.Error("a workspace path with ',' has overlay views")
			}
		})
	}
}
