package mcp

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/runtime"
	"github.com/sandpit-dev/sandpit/store/snapshot"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// realWorkspace serves the file, snapshot and run tools over one workspace
// attached to real sandboxes.
func realWorkspace(t *testing.T, quota int64) (fixture, *workspace.Workspace) {
	t.Helper()
	rt := realRuntime(t, func(c *runtime.Config) { c.Limits.MemoryBytes = 256 << 20 })
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	snaps, err := snapshot.Open(filepath.Join(dir, "snapshots"), snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { snaps.Close() })
	uid, gid := rt.SandboxOwner()
	ws, err := workspace.Open(filepath.Join(dir, "ws"), workspace.Options{
		StateDir: filepath.Join(dir, "state"), Sandbox: &workspace.Owner{UID: uid, GID: gid}, Owner: workspace.Owner{UID: uid, GID: gid},
		Quota: quota, RequireOverlay: true, BeforeRun: snaps.BeforeRun,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ws.Close)
	f := newFixture(t, func(c *Config) {
		c.Runner, c.Status, c.Health = rt, nil, nil
		c.Workspace, c.Files, c.Snapshots = ws, ws, snaps.For(ws)
	})
	return f, ws
}

func TestRunsWriteBackToWorkspace(t *testing.T) {
	f, ws := realWorkspace(t, 64<<20)
	f.call(t, "write_file", map[string]any{"path": "data/in.txt", "content": "3\n4\n5\n"}, nil)
	script := `
import os
nums = [int(l) for l in open("data/in.txt")]
with open("out.csv", "w") as f:
    f.write("n,square\n" + "".join(f"{n},{n*n}\n" for n in nums))
open("plot.png", "wb").write(bytes(range(256)) * 4)
os.symlink("/", "escape")
os.symlink("/etc/passwd", "data/in.txt.link")
os.mkfifo("pipe")
os.remove("data/in.txt")
print(sorted(os.listdir(".")))
`
	out := f.run(t, "python", script)
	if out.Status != sandpit.StatusSuccess {
		t.Fatalf("run: %s %s", out.Status, out.Stderr)
	}
	if out.Files == nil || !slices.Equal(out.Files.Created, []string{"out.csv", "plot.png"}) || !slices.Equal(out.Files.Deleted, []string{"data/in.txt"}) {
		t.Errorf("files = %+v", out.Files)
	}
	var r ReadFileResult
	f.call(t, "read_file", map[string]any{"path": "out.csv"}, &r)
	if r.Content != "n,square\n3,9\n4,16\n5,25\n" {
		t.Errorf("out.csv = %q", r.Content)
	}
	r = ReadFileResult{}
	f.call(t, "read_file", map[string]any{"path": "plot.png", "limit": 4096}, &r)
	if got, _ := base64.StdEncoding.DecodeString(r.Content); !bytes.Equal(got, bytes.Repeat(func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}(), 4)) {
		t.Errorf("plot.png differs (%d bytes, %s)", len(got), r.Encoding)
	}
	for _, p := range []string{"escape", "pipe", "data/in.txt.link"} {
		if _, err := os.Lstat(filepath.Join(ws.Dir(), p)); err == nil {
			t.Errorf("%s made by the run reached the workspace", p)
		}
	}
	// The next run sees the first one's output, and can rewrite it.
	out = f.run(t, "bash", "wc -l < out.csv && echo extra >> out.csv")
	if strings.TrimSpace(out.Stdout) != "4" || out.Files == nil || !slices.Equal(out.Files.Modified, []string{"out.csv"}) {
		t.Errorf("second run: %q %+v %s", out.Stdout, out.Files, out.Stderr)
	}
	// Undo takes the second run back.
	if res := f.call(t, "undo_last_run", nil, nil); res.IsError {
		t.Fatalf("undo: %s", text(res))
	}
	r = ReadFileResult{}
	f.call(t, "read_file", map[string]any{"path": "out.csv"}, &r)
	if strings.Contains(r.Content, "extra") {
		t.Errorf("after undo out.csv = %q", r.Content)
	}
}

func TestRunQuotaAndTimeout(t *testing.T) {
	const quota = 16 << 20
	f, ws := realWorkspace(t, quota)
	f.call(t, "write_file", map[string]any{"path": "keep.txt", "content": "keep"}, nil)
	// Twice the quota: the run gets ENOSPC inside, the host gets what fitted.
	var res RunCodeResult
	f.call(t, "run_code", map[string]any{"language": "bash", "code": "dd if=/dev/zero of=big bs=1M count=32"}, &res)
	if res.Status != sandpit.StatusError || !strings.Contains(res.Stderr, "No space left on device") {
		t.Errorf("over-quota run: %s %q", res.Status, res.Stderr)
	}
	if fi, err := os.Stat(filepath.Join(ws.Dir(), "big")); err != nil || fi.Size() > quota {
		t.Errorf("big after the run: %v, %v", fi, err)
	}
	// A run killed at its timeout while writing: nothing is visible while it
	// runs, and afterwards the file is exactly what it had written.
	done := make(chan RunCodeResult)
	go func() {
		var r RunCodeResult
		f.call(t, "run_code", map[string]any{"language": "bash", "timeout_seconds": 2,
			"code": "while true; do head -c 65536 /dev/zero >> growing; done"}, &r)
		done <- r
	}()
	var during []error
	started := time.Now()
	for {
		select {
		case r := <-done:
			if r.Status != sandpit.StatusTimeout {
				t.Errorf("status %s, want timeout", r.Status)
			}
			// What the run wrote before the kill is there, as it left it
			// (on a loaded machine it may not have started writing at all).
			fi, err := os.Stat(filepath.Join(ws.Dir(), "growing"))
			created := r.Files != nil && slices.Contains(r.Files.Created, "growing")
			if created != (err == nil) || err == nil && fi.Size() > quota {
				t.Errorf("growing after the timeout: %v, %v (files %+v)", fi, err, r.Files)
			}
			for _, err := range during {
				t.Errorf("during the run: %v", err)
			}
			return
		default:
			// Within the first second the 2 s run is surely still going.
			if _, err := os.Stat(filepath.Join(ws.Dir(), "growing")); err == nil && time.Since(started) < time.Second {
				during = append(during, os.ErrExist)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
