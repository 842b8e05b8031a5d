package mcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit/internal/logring"
)

// TestLogsRedactHostPaths: sandbox://logs serves the server's log to the
// model; the host paths in it (the configured directories wherever they
// appear: message, attribute, error text, nested group, a logged struct,
// and anyone's home directory) come back as placeholders (review
// 2026-11-30, L3).
func TestLogsRedactHostPaths(t *testing.T) {
	hostPaths := []HostPath{
		{Path: "/srv/alice/sandpit/workspace", Placeholder: "<workspace>"},
		{Path: "/run/sandpit/state", Placeholder: "<state-dir>"},
		{Path: "/run/sandpit/state/history.db", Placeholder: "<history-db>"},
		{Path: "/var/lib/odd dir/snaps", Placeholder: "<snapshot-dir>"},
		{Path: "/", Placeholder: "<root>"},   // too short to replace safely: ignored
		{Path: "/tmp", Placeholder: "<tmp>"}, // likewise
		{Path: "relative/dir", Placeholder: "<rel>"},
	}
	f := newFixture(t, func(c *Config) { c.HostPaths = hostPaths })
	log := slog.New(f.logs.Handler(nil))
	log.Info("workspace ready", "dir", "/srv/alice/sandpit/workspace", "snapshots", "/var/lib/odd dir/snaps")
	log.Error("tool failed", "err", errors.New(`merge /run/sandpit/state/workspace/runs/r1/changes/upper/a: file name too long`))
	log.With("component", "history").WithGroup("db").Info("pruned /run/sandpit/state/history.db", "path", "/run/sandpit/state/history.db")
	log.Warn("view", "paths", []string{"/srv/alice/sandpit/workspace/x", "/home/bob/.cache/y"}, "quoted", fmt.Sprintf("%q", "/var/lib/odd dir/snaps/blob"))
	log.Info("ordinary", "path", "/tmp/keep", "sandbox", "/workspace/data.csv")

	req := mcpgo.ReadResourceRequest{}
	req.Params.URI = "sandbox://logs"
	res, err := f.c.ReadResource(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	raw := res.Contents[0].(mcpgo.TextResourceContents).Text
	for _, leak := range []string{"/srv/alice", "/run/sandpit/state", "odd dir", "/home/bob", "alice"} {
		if strings.Contains(raw, leak) {
			t.Errorf("sandbox://logs shows %q:\n%s", leak, raw)
		}
	}
	for _, want := range []string{"<workspace>", "<state-dir>/workspace/runs/r1", "<history-db>", "<snapshot-dir>/blob", "/home/<user>/.cache/y", "/tmp/keep", "/workspace/data.csv"} {
		if !strings.Contains(raw, want) {
			t.Errorf("sandbox://logs lacks %q:\n%s", want, raw)
		}
	}
	var logs struct{ Records []logring.Record }
	if err := json.Unmarshal([]byte(raw), &logs); err != nil {
		t.Fatal(err)
	}
	// The ring itself keeps the paths: stderr and the operator see them.
	if all := fmt.Sprint(f.logs.Records(0)); !strings.Contains(all, "/srv/alice/sandpit/workspace") {
		t.Errorf("the ring lost the real paths: %s", all)
	}
}
