package mcp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit/store/snapshot"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

func workspaceFixture(t *testing.T) (fixture, *workspace.Workspace) {
	t.Helper()
	dir := t.TempDir()
	snaps, err := snapshot.Open(filepath.Join(dir, "snapshots"), snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { snaps.Close() })
	ws, err := workspace.Open(filepath.Join(dir, "ws"), workspace.Options{MaxReadBytes: 64, BeforeRun: snaps.BeforeRun})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *Config) {
		c.Workspace, c.Files, c.Snapshots = ws, ws, snaps.For(ws)
	})
	return f, ws
}

func TestFileTools(t *testing.T) {
	f, ws := workspaceFixture(t)
	png := []byte{0x89, 'P', 'N', 'G', 0, 1, 2, 0xff}
	for _, w := range []map[string]any{
		{"path": "src/main.py", "content": "print('héllo')\n"},
		{"path": "/workspace/plot.png", "content": base64.StdEncoding.EncodeToString(png), "encoding": "base64"},
	} {
		if res := f.call(t, "write_file", w, nil); res.IsError {
			t.Fatalf("write_file %v: %s", w["path"], text(res))
		}
	}
	var r ReadFileResult
	if res := f.call(t, "read_file", map[string]any{"path": "src/main.py"}, &r); res.IsError || r.Content != "print('héllo')\n" || r.Encoding != "utf-8" || !r.EOF {
		t.Errorf("read_file main.py = %+v (%s)", r, text(res))
	}
	r = ReadFileResult{}
	f.call(t, "read_file", map[string]any{"path": "plot.png"}, &r)
	if got, _ := base64.StdEncoding.DecodeString(r.Content); r.Encoding != "base64" || string(got) != string(png) {
		t.Errorf("read_file plot.png = %+v, want base64 of %v", r, png)
	}
	// Paging: MaxReadBytes is 64 in this fixture.
	long := strings.Repeat("é", 50) // 100 bytes; byte 64 is mid-rune
	f.call(t, "write_file", map[string]any{"path": "long.txt", "content": long}, nil)
	var p1, p2 ReadFileResult
	f.call(t, "read_file", map[string]any{"path": "long.txt"}, &p1)
	f.call(t, "read_file", map[string]any{"path": "long.txt", "offset": p1.NextOffset}, &p2)
	if p1.Encoding != "utf-8" || p1.EOF || p1.NextOffset != 64 || p1.Content+p2.Content != long || !p2.EOF {
		t.Errorf("paged read = %+v then %+v", p1, p2)
	}
	var ls ListFilesResult
	f.call(t, "list_files", map[string]any{"recursive": true}, &ls)
	var names []string
	for _, e := range ls.Entries {
		names = append(names, e.Path+":"+e.Type)
	}
	if got := strings.Join(names, " "); got != "long.txt:file plot.png:file src:dir src/main.py:file" {
		t.Errorf("list_files = %s", got)
	}
	if res := f.call(t, "move_file", map[string]any{"from": "src/main.py", "to": "app/main.py"}, nil); res.IsError {
		t.Errorf("move_file: %s", text(res))
	}
	if res := f.call(t, "delete_file", map[string]any{"path": "src"}, nil); res.IsError {
		t.Errorf("delete_file: %s", text(res))
	}
	if err := syscall.Mkfifo(filepath.Join(ws.Dir(), "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	errs := []struct {
		name, tool string
		args       map[string]any
		want       string
	}{
		{"dotdot", "read_file", map[string]any{"path": "../x"}, "outside the workspace"},
		{"absolute", "write_file", map[string]any{"path": "/etc/passwd", "content": "x"}, "outside the workspace"},
		{"climb", "list_files", map[string]any{"path": "a/../../x"}, "outside the workspace"},
		{"nul", "delete_file", map[string]any{"path": "a\x00b"}, "outside the workspace"},
		{"fifo", "read_file", map[string]any{"path": "fifo"}, "not a regular file"},
		{"missing", "read_file", map[string]any{"path": "src/main.py"}, "no such file"},
		{"bad base64", "write_file", map[string]any{"path": "x", "content": "!!", "encoding": "base64"}, "not valid base64"},
		{"bad encoding", "write_file", map[string]any{"path": "x", "content": "x", "encoding": "latin1"}, "not supported"},
		{"unknown snapshot", "restore_state_snapshot", map[string]any{"snapshot_id": "snap-nope"}, "unknown snapshot"},
		{"nothing to undo", "undo_last_run", nil, "no run to undo"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			res := f.call(t, tt.tool, tt.args, nil)
			if !res.IsError || !strings.Contains(text(res), tt.want) {
				t.Errorf("%s = error %v, %q; want an error containing %q", tt.tool, res.IsError, text(res), tt.want)
			}
		})
	}
}

func TestSnapshotTools(t *testing.T) {
	f, _ := workspaceFixture(t)
	f.call(t, "write_file", map[string]any{"path": "a.txt", "content": "one"}, nil)
	f.call(t, "write_file", map[string]any{"path": "b.txt", "content": "bee"}, nil)
	var snap SnapshotInfo
	if res := f.call(t, "create_state_snapshot", map[string]any{"description": "first"}, &snap); res.IsError || snap.SnapshotID == "" || snap.Files != 2 {
		t.Fatalf("create_state_snapshot = %+v (%s)", snap, text(res))
	}
	f.call(t, "write_file", map[string]any{"path": "a.txt", "content": "two"}, nil)
	f.call(t, "write_file", map[string]any{"path": "c.txt", "content": "new"}, nil)
	f.call(t, "delete_file", map[string]any{"path": "b.txt"}, nil)
	var d DiffSnapshotResult
	f.call(t, "diff_state_snapshot", map[string]any{"snapshot_id": snap.SnapshotID}, &d)
	if strings.Join(d.Added, ",") != "c.txt" || strings.Join(d.Removed, ",") != "b.txt" || strings.Join(d.Changed, ",") != "a.txt" {
		t.Errorf("diff = %+v", d)
	}
	if res := f.call(t, "restore_state_snapshot", map[string]any{"snapshot_id": snap.SnapshotID}, nil); res.IsError {
		t.Fatalf("restore: %s", text(res))
	}
	var ls ListFilesResult
	f.call(t, "list_files", nil, &ls)
	var r ReadFileResult
	f.call(t, "read_file", map[string]any{"path": "a.txt"}, &r)
	if len(ls.Entries) != 2 || r.Content != "one" {
		t.Errorf("after restore: %+v, a.txt = %q", ls.Entries, r.Content)
	}
	var list ListSnapshotsResult
	f.call(t, "list_state_snapshots", nil, &list)
	if len(list.Snapshots) != 1 || list.Snapshots[0].Description != "first" {
		t.Errorf("list = %+v", list)
	}
	if res := f.call(t, "delete_state_snapshot", map[string]any{"snapshot_id": snap.SnapshotID}, nil); res.IsError {
		t.Errorf("delete: %s", text(res))
	}
	list = ListSnapshotsResult{}
	f.call(t, "list_state_snapshots", nil, &list)
	if len(list.Snapshots) != 0 {
		t.Errorf("list after delete = %+v", list)
	}
}

// TestListFilesBoundedAndPaged: a listing of thousands of long names (1.23
// MB in one result before) stops at maxListingBytes with a count of what
// is left and the offset to go on from; paging returns every entry once.
func TestListFilesBoundedAndPaged(t *testing.T) {
	f, ws := workspaceFixture(t)
	const n = 3000
	want := map[string]bool{}
	for i := range n {
		name := fmt.Sprintf("%04d-%s.csv", i, strings.Repeat("x", 200))
		if err := os.WriteFile(filepath.Join(ws.Dir(), name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want[name] = true
	}
	seen := map[string]bool{}
	offset, pages := 0, 0
	for {
		var ls ListFilesResult
		args := map[string]any{}
		if offset > 0 {
			args["offset"] = offset
		}
		res := f.call(t, "list_files", args, &ls)
		if res.IsError {
			t.Fatalf("list_files offset %d: %s", offset, text(res))
		}
		size := resultBytes(t, res)
		if size > maxListingBytes+16<<10 {
			t.Fatalf("page at offset %d is %d bytes, over %d", offset, size, maxListingBytes)
		}
		for _, e := range ls.Entries {
			if seen[e.Path] {
				t.Errorf("%s listed twice", e.Path)
			}
			seen[e.Path] = true
		}
		pages++
		if ls.More == 0 {
			if ls.NextOffset != 0 || ls.Truncated {
				t.Errorf("last page: next_offset %d, truncated %v", ls.NextOffset, ls.Truncated)
			}
			break
		}
		if !ls.Truncated || ls.NextOffset != offset+len(ls.Entries) || ls.Total != n || ls.More != n-ls.NextOffset {
			t.Fatalf("page at %d: %d entries, truncated %v, next_offset %d, more %d, total %d", offset, len(ls.Entries), ls.Truncated, ls.NextOffset, ls.More, ls.Total)
		}
		if hint := fmt.Sprintf("and %d more: list_files with offset=%d", ls.More, ls.NextOffset); !strings.Contains(text(res), hint) {
			t.Errorf("text lacks %q", hint)
		}
		offset = ls.NextOffset
	}
	if len(seen) != n || pages < 2 {
		t.Errorf("%d entries in %d pages, want %d in several", len(seen), pages, n)
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("%s never listed", name)
			break
		}
	}
}

// resultBytes is the size of res as the client receives it.
func resultBytes(t *testing.T, res *mcpgo.CallToolResult) int {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}
