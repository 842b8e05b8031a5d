package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/namespaces"
	"github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/runtime"
)

// Sessions in the bench. Group "session": one call of `x += 1` in a session
// that already exists, over MCP stdio and in-process, against a python
// process on the host that reads statements from a pipe and runs them in
// one namespace (the same round trip without any sandbox or protocol).
// Group "session-df": a pandas DataFrame kept in a session and re-used
// (df.shape) at 10^3 and 10^6 rows, against rebuilding the 10^6-row frame in
// a fresh run: a session call's time does not depend on what the session
// holds. The report's notes give the memory of an idle session (its cgroup,
// and the host RSS of its shim and processes), bare and holding the frame.

// sessionGroups are the bench languages that measure sessions.
var sessionGroups = map[string]bool{"session": true, "session-df": true}

// dfSetup builds a frame of n rows in a session (or a host REPL).
func dfSetup(n int) string {
	return fmt.Sprintf("import pandas as pd, numpy as np; df = pd.DataFrame({'a': np.arange(%d), 'b': np.arange(%d) * 0.5})", n, n)
}

func (b *suite) sessionComparators(ctx context.Context, group string, want func(string) bool, add func(group, name string, role Role, run func(context.Context) error, err error)) {
	switch group {
	case "session":
		if want("host-python-repl") {
			run, err := b.hostREPL(ctx, "x = 0", "x += 1")
			add(group, "host-python-repl", RoleHost, run, err)
		}
		if want("sandpit-session") {
			run, err := b.inprocSession(ctx, "x = 0", "x += 1")
			add(group, "sandpit-session", "", run, err)
		}
		if want("sandpit-mcp-session") {
			cl, err := b.sessionServer(ctx)
			var run func(context.Context) error
			if err == nil {
				run, err = mcpSession(ctx, cl, "bench", "x = 0", "x += 1", "")
			}
			add(group, "sandpit-mcp-session", "", run, err)
			if err == nil {
				b.sessionMemoryNotes(ctx, cl, "an idle session (python REPL, x = 0)")
			}
		}
	case "session-df":
		if want("host-python-repl") {
			run, err := b.hostREPL(ctx, dfSetup(1_000_000), "df.shape")
			if err != nil {
				err = fmt.Errorf("%w (the host needs python3-pandas)", err)
			}
			add(group, "host-python-repl-1e6", RoleHost, run, err)
		}
		if !want("sandpit-mcp-session") {
			return
		}
		cl, err := b.sessionServer(ctx)
		for _, size := range []struct {
			n    int
			name string
		}{{1_000, "1e3"}, {1_000_000, "1e6"}} {
			var run func(context.Context) error
			if err == nil {
				run, err = mcpSession(ctx, cl, "df"+size.name, dfSetup(size.n), "df.shape", fmt.Sprintf("(%d, 2)", size.n))
			}
			add(group, "sandpit-mcp-session-"+size.name, "", run, err)
		}
		if err == nil {
			b.sessionMemoryNotes(ctx, cl, "sessions holding a DataFrame (df1e3: 10^3 rows, df1e6: 10^6 rows)")
			code := dfSetup(1_000_000) + "\nprint(df.shape)"
			add(group, "sandpit-mcp-rebuild-1e6", "", mcpRun(cl, "python", code, "(1000000, 2)\n"), nil)
		}
	}
}

// sessionServer starts (once) the `sandpit serve` the session rows use.
func (b *suite) sessionServer(ctx context.Context) (*client.Client, error) {
	b.sessOnce.Do(func() {
		b.sessClient, b.sessErr = b.startServer(ctx, "sandpit-mcp-session", []string{"--pool=2", "--max-sessions=8"}, nil)
		if b.sessErr == nil {
			cl := b.sessClient
			b.closers = append(b.closers, func(context.Context) error { return cl.Close() })
		}
	})
	return b.sessClient, b.sessErr
}

// mcpSession sets a session up with setup, then measures call in it. want,
// when set, is the value the call must return.
func mcpSession(ctx context.Context, cl *client.Client, session, setup, call, want string) (func(context.Context) error, error) {
	callOnce := func(ctx context.Context, code string) (*mcp.RunCodeResult, error) {
		var req mcpgo.CallToolRequest
		req.Params.Name = "run_code"
		req.Params.Arguments = map[string]any{"language": "python", "code": code, "session": session, "timeout_seconds": runTimeout.Seconds()}
		res, err := cl.CallTool(ctx, req)
		if err != nil {
			return nil, err
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var out mcp.RunCodeResult
		if res.IsError || json.Unmarshal(raw, &out) != nil {
			return nil, fmt.Errorf("run_code: %s", textOf(res))
		}
		if out.Status != sandpit.StatusSuccess {
			return nil, fmt.Errorf("status %s: %s", out.Status, out.Stderr)
		}
		return &out, nil
	}
	if _, err := callOnce(ctx, setup); err != nil {
		return nil, fmt.Errorf("session set-up: %w", err)
	}
	return func(ctx context.Context) error {
		out, err := callOnce(ctx, call)
		if err == nil && want != "" && out.Value != want {
			err = fmt.Errorf("value %q, want %q", out.Value, want)
		}
		return err
	}, nil
}

func textOf(res *mcpgo.CallToolResult) string {
	var msg []string
	for _, c := range res.Content {
		if t, ok := c.(mcpgo.TextContent); ok {
			msg = append(msg, t.Text)
		}
	}
	return strings.Join(msg, " ")
}

// inprocSession is mcpSession through an in-process runtime.
func (b *suite) inprocSession(ctx context.Context, setup, call string) (func(context.Context) error, error) {
	cfg := b.cfg.Runtime
	cfg.Instance, cfg.StateDir = b.instance("session"), filepath.Join(b.dir, "session")
	cfg.Pool = runtime.PoolConfig{Size: 1, IdleTimeout: 5 * time.Minute}
	rt, err := runtime.New(cfg)
	if err != nil {
		return nil, err
	}
	b.closers = append(b.closers, func(context.Context) error { return rt.Close() })
	run := func(ctx context.Context, code string) error {
		res, err := rt.Run(ctx, sandpit.Request{Language: "python", Session: "bench", Code: code, Timeout: runTimeout})
		if err != nil {
			return err
		}
		if res.Status != sandpit.StatusSuccess {
			return fmt.Errorf("status %s: %s", res.Status, res.Stderr)
		}
		return nil
	}
	if err := run(ctx, setup); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return run(ctx, call) }, nil
}

// hostREPL is a python process on the host that runs each line it reads in
// one namespace and answers "ok": a session's round trip without a sandbox.
func (b *suite) hostREPL(ctx context.Context, setup, call string) (func(context.Context) error, error) {
	cmd := exec.Command(b.cfg.HostPython, "-c", "import sys\nns = {}\nfor line in sys.stdin:\n    r = eval(compile(line, '<call>', 'single' if '=' in line else 'eval'), ns)\n    sys.stdout.write('ok\\n'); sys.stdout.flush()")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.closers = append(b.closers, func(context.Context) error { in.Close(); cmd.Wait(); return nil })
	out := bufio.NewReader(outPipe)
	var mu sync.Mutex
	roundTrip := func(line string) error {
		mu.Lock()
		defer mu.Unlock()
		if _, err := io.WriteString(in, line+"\n"); err != nil {
			return err
		}
		got, err := out.ReadString('\n')
		if err != nil {
			return fmt.Errorf("host repl: %w", err)
		}
		if got != "ok\n" {
			return fmt.Errorf("host repl: %q", got)
		}
		return nil
	}
	if err := roundTrip(setup); err != nil {
		return nil, err
	}
	return func(context.Context) error { return roundTrip(call) }, nil
}

// sessionMemoryNotes adds what the open sessions of cl's server hold: their
// cgroup memory, and the host RSS of each session sandbox's processes and
// of the shim that is their parent.
func (b *suite) sessionMemoryNotes(ctx context.Context, cl *client.Client, what string) {
	var req mcpgo.CallToolRequest
	req.Params.Name = "list_sessions"
	res, err := cl.CallTool(ctx, req)
	if err != nil || res.IsError {
		return
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var list mcp.SessionsResult
	if json.Unmarshal(raw, &list) != nil {
		return
	}
	for _, s := range list.Sessions {
		b.report.Notes = append(b.report.Notes, fmt.Sprintf("memory of %s: session %s holds %.1f MiB in its cgroup", what, s.Name, float64(s.MemoryBytes)/(1<<20)))
	}
	for _, r := range b.sessionRSS(ctx, "mcp-session") {
		b.report.Notes = append(b.report.Notes, "host RSS of a session sandbox, "+r)
	}
}

// sessionRSS describes the host RSS of every session sandbox (sess-*) of
// the bench instance suffix.
func (b *suite) sessionRSS(ctx context.Context, suffix string) []string {
	var out []string
	cl, err := b.dial()
	if err != nil {
		return nil
	}
	defer cl.Close()
	ctx = namespaces.WithNamespace(ctx, b.cfg.Runtime.Namespace)
	ctrs, err := cl.Containers(ctx, fmt.Sprintf("labels.%q==%q", runtime.LabelInstance, b.prefix+"-"+suffix))
	if err != nil {
		return nil
	}
	for _, c := range ctrs {
		if !strings.HasPrefix(c.ID(), "sess-") {
			continue // a pooled sandbox
		}
		task, err := c.Task(ctx, nil)
		if err != nil {
			continue
		}
		pids, err := task.Pids(ctx)
		if err != nil {
			continue
		}
		var parts []string
		var total int64
		for _, p := range pids {
			kb := procKB(int(p.Pid), "VmRSS")
			total += kb
			parts = append(parts, fmt.Sprintf("%s %.1f", procName(int(p.Pid)), float64(kb)/1024))
		}
		if shim := procKB(int(task.Pid()), "PPid"); shim > 1 {
			kb := procKB(int(shim), "VmRSS")
			total += kb
			parts = append(parts, fmt.Sprintf("shim %.1f", float64(kb)/1024))
		}
		out = append(out, fmt.Sprintf("%s: %.1f MiB (%s MiB)", c.ID(), float64(total)/1024, strings.Join(parts, ", ")))
	}
	return out
}

// procKB reads a number field of /proc/PID/status (kB for memory fields).
func procKB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

func procName(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
