package main

// End-to-end tests: the built sandpit binary, started as `sandpit serve`, is
// driven over stdio by mcp-go's client, exactly as an MCP host would.

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit/internal/instance"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/mcp"
)

var binPath string

func TestMain(m *testing.M) {
	code := func() int {
		if p := os.Getenv("SANDPIT_BIN"); p != "" {
			binPath = p
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "sandpit-e2e")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		binPath = filepath.Join(dir, "sandpit")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			os.Stderr.Write(out)
			panic(err)
		}
		return m.Run()
	}()
	os.Exit(code)
}

// startServer runs `sandpit serve` with args and returns an initialized client.
func startServer(t *testing.T, env []string, args ...string) *client.Client {
	t.Helper()
	// mcp-go's Close sends SIGTERM 2 s after it closes stdin and SIGKILL
	// 3 s later: a loaded host's shutdown (every pooled sandbox destroyed,
	// every view unmounted) can take longer, and a killed server leaves its
	// mounts in the test's temp dir. A shell in front takes the signals;
	// sandpit, its stdin closed, shuts down as any client's EOF asks, and
	// the cleanup waits for it to release its instance.
	c, err := client.NewStdioMCPClient("/bin/sh", append(os.Environ(), env...),
		append([]string{"-c", `exec 3<&0; "$@" <&3 3<&- & trap '' TERM; wait`, "sh", binPath, "serve"}, args...)...)
	if err != nil {
		t.Fatalf("start sandpit serve: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		state, name := flagValue(args, "state-dir"), flagValue(args, "instance")
		if state == "" || name == "" {
			return
		}
		root := filepath.Join(state, "instances")
		if !testenv.Poll(testenv.Patience, func() bool { return instance.Holder(root, name) == 0 }) {
			t.Errorf("sandpit serve (instance %s) still holds its instance %v after its client closed", name, testenv.Patience)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	var init mcpgo.InitializeRequest
	init.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcpgo.Implementation{Name: "sandpit-e2e", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return c
}

// flagValue is the value of --name in args ("--name v" or "--name=v").
func flagValue(args []string, name string) string {
	for i, a := range args {
		switch {
		case a == "--"+name && i+1 < len(args):
			return args[i+1]
		case strings.HasPrefix(a, "--"+name+"="):
			return strings.TrimPrefix(a, "--"+name+"=")
		}
	}
	return ""
}

// serverArgs points a test server at the test containerd with its own
// instance label and state, so parallel tests never share sandboxes.
func serverArgs(t *testing.T) []string {
	addr := testenv.Containerd(t)
	return append([]string{
		"--address", addr, "--no-start", "--build-images=false", "--memory-mb", "256",
		"--instance", testenv.Instance(t),
		// A run that gives no timeout may take a minute, not 10 s: a
		// loaded host compiles C++ slowly.
		"--timeout", "1m",
	}, storeArgs(t)...)
}

// storeArgs keeps a test server's persistent state in the test's temp dir.
func storeArgs(t *testing.T) []string {
	dir := t.TempDir()
	return []string{
		"--state-dir", filepath.Join(dir, "state"),
		"--workspace", filepath.Join(dir, "workspace"),
		"--snapshot-dir", filepath.Join(dir, "snapshots"),
		"--history-db", filepath.Join(dir, "history.db"),
	}
}

func call(t *testing.T, c *client.Client, tool string, args map[string]any) *mcpgo.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	var req mcpgo.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return res
}

func text(r *mcpgo.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcpgo.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func runResult(t *testing.T, r *mcpgo.CallToolResult) mcp.RunCodeResult {
	t.Helper()
	if r.IsError {
		t.Fatalf("run_code returned a tool error: %s", text(r))
	}
	b, err := json.Marshal(r.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var out mcp.RunCodeResult
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return out
}

func TestMCPRunCode(t *testing.T) {
	c := startServer(t, nil, serverArgs(t)...)
	tests := []struct {
		name   string
		args   map[string]any
		status string
		exit   int
		stdout string // exact when set
		has    string // in stdout+stderr
	}{
		{name: "python print", args: map[string]any{"language": "python", "code": "print('ok')"}, status: "success", stdout: "ok\n"},
		{name: "python exit", args: map[string]any{"language": "PYTHON", "code": "exit(3)"}, status: "error", exit: 3},
		{name: "python traceback", args: map[string]any{"language": "python", "code": "1/0"}, status: "error", exit: 1, has: "ZeroDivisionError"},
		{name: "stdin", args: map[string]any{"language": "python", "code": "print(input()[::-1])", "stdin": "abc\n"}, status: "success", stdout: "cba\n"},
		{name: "c hello", args: map[string]any{"language": "c", "code": "#include <stdio.h>\nint main(){printf(\"hi\\n\");}"}, status: "success", stdout: "hi\n"},
		{name: "cpp hello", args: map[string]any{"language": "cpp", "code": "#include <iostream>\nint main(){std::cout<<\"hi++\\n\";}"}, status: "success", stdout: "hi++\n"},
		{name: "c compile error", args: map[string]any{"language": "c", "code": "int main(){ oops }"}, status: "compile_error", has: "error"},
		{name: "bash", args: map[string]any{"language": "bash", "code": "echo $((2+3))"}, status: "success", stdout: "5\n"},
		{name: "timeout", args: map[string]any{"language": "python", "code": "while True: pass", "timeout_seconds": 2}, status: "timeout"},
		{name: "no network", args: map[string]any{"language": "python", "code": "import socket\ntry:\n  socket.create_connection(('1.1.1.1', 80), timeout=3); print('CONNECTED')\nexcept OSError as e: print('blocked:', e)"}, status: "success", has: "blocked:"},
		{name: "read-only root", args: map[string]any{"language": "bash", "code": "echo x > /usr/x"}, status: "error", exit: 1, has: "Read-only file system"},
		{name: "no privileges", args: map[string]any{"language": "bash", "code": "grep -E 'NoNewPrivs|CapEff' /proc/self/status"}, status: "success", has: "CapEff:\t0000000000000000"},
		{name: "memory hog", args: map[string]any{"language": "python", "code": "x = []\nwhile True: x.append(bytearray(32 << 20))", "timeout_seconds": 60}, status: "oom"},
		{name: "fork bomb", args: map[string]any{"language": "bash", "code": ":(){ :|:& };: 2>/dev/null; sleep 1; echo alive", "timeout_seconds": 60}, has: "alive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runResult(t, call(t, c, "run_code", tt.args))
			if tt.status != "" && string(got.Status) != tt.status {
				t.Errorf("status = %s, want %s (exit %d)\nstdout: %s\nstderr: %s", got.Status, tt.status, got.ExitCode, got.Stdout, got.Stderr)
			}
			if got.ExitCode != tt.exit && tt.status != "timeout" && tt.status != "oom" && tt.status != "compile_error" && tt.status != "" {
				t.Errorf("exit code = %d, want %d", got.ExitCode, tt.exit)
			}
			if tt.stdout != "" && got.Stdout != tt.stdout {
				t.Errorf("stdout = %q, want %q", got.Stdout, tt.stdout)
			}
			if !strings.Contains(got.Stdout+got.Stderr, tt.has) {
				t.Errorf("output %q lacks %q", got.Stdout+got.Stderr, tt.has)
			}
		})
	}
	t.Run("truncation", func(t *testing.T) {
		got := runResult(t, call(t, c, "run_code", map[string]any{"language": "python", "code": "print('z' * 200 * 1024)"}))
		if !got.StdoutTruncated || got.StdoutBytes != 200*1024+1 || !strings.Contains(got.Stdout, "truncated") {
			t.Errorf("truncated=%v bytes=%d", got.StdoutTruncated, got.StdoutBytes)
		}
	})
}

func TestMCPBadInput(t *testing.T) {
	c := startServer(t, nil, serverArgs(t)...)
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"unknown language", map[string]any{"language": "cobol", "code": "x"}, "supported languages"},
		{"missing language", map[string]any{"code": "print(1)"}, "missing property 'language'"},
		{"empty code", map[string]any{"language": "python", "code": "  "}, "code is empty"},
		{"code too large", map[string]any{"language": "python", "code": strings.Repeat("#", 65*1024)}, "over the"},
		{"timeout over ceiling", map[string]any{"language": "python", "code": "print(1)", "timeout_seconds": 600}, "ceiling"},
		{"negative timeout", map[string]any{"language": "python", "code": "print(1)", "timeout_seconds": -1}, "positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := call(t, c, "run_code", tt.args)
			if !res.IsError {
				t.Fatalf("want a tool error, got %s", text(res))
			}
			if !strings.Contains(text(res), tt.want) {
				t.Errorf("error %q lacks %q", text(res), tt.want)
			}
		})
	}
}

func TestMCPListLanguages(t *testing.T) {
	c := startServer(t, nil, serverArgs(t)...)
	res := call(t, c, "list_supported_languages", nil)
	if res.IsError {
		t.Fatal(text(res))
	}
	b, _ := json.Marshal(res.StructuredContent)
	var out mcp.LanguagesResult
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range out.Languages {
		got[l.Language] = l.Version
	}
	for _, want := range []string{"python", "c", "cpp", "bash"} {
		v, ok := got[want]
		if !ok {
			t.Errorf("language %s missing from %v", want, got)
		}
		if strings.Contains(v, "unknown") {
			t.Errorf("language %s has no version from its image: %q", want, v)
		}
	}
	tools, err := c.ListTools(t.Context(), mcpgo.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "list_supported_languages" && (tool.Annotations.ReadOnlyHint == nil || !*tool.Annotations.ReadOnlyHint) {
			t.Error("list_supported_languages lacks the read-only annotation")
		}
	}
}

// A server pointed at a socket that does not exist still starts, and every
// run_code call says which socket failed, quickly.
func TestMCPMissingContainerd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nope", "containerd.sock")
	c := startServer(t, nil, append([]string{"--address", sock, "--no-start", "--build-images=false"}, storeArgs(t)...)...)
	start := time.Now()
	res := call(t, c, "run_code", map[string]any{"language": "python", "code": "print(1)"})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s to fail", d)
	}
	if !res.IsError || !strings.Contains(text(res), sock) {
		t.Errorf("want a tool error naming %s, got isError=%v %q", sock, res.IsError, text(res))
	}
}

// sandbox://status over stdio reports what the wiring in serve put there:
// the limits in force (with the default timeout), the runtime, containerd.
func TestMCPStatusResource(t *testing.T) {
	c := startServer(t, nil, append(serverArgs(t), "--timeout", "7s", "--pids", "99")...)
	var req mcpgo.ReadResourceRequest
	req.Params.URI = "sandbox://status"
	res, err := c.ReadResource(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Contents) == 0 {
		t.Fatal("empty sandbox://status")
	}
	tc, ok := res.Contents[0].(mcpgo.TextResourceContents)
	if !ok {
		t.Fatalf("contents %T", res.Contents[0])
	}
	var st mcp.StatusReport
	if err := json.Unmarshal([]byte(tc.Text), &st); err != nil {
		t.Fatalf("%v: %s", err, tc.Text)
	}
	if st.Limits == nil || st.Limits.PidsMax != 99 || st.Limits.TimeoutSeconds != 7 {
		t.Errorf("limits %+v: want pids 99 and timeout 7 s from the flags", st.Limits)
	}
	if st.Network != "none" || st.Runtime != "runc" || !st.UserNamespace || st.ContainerdVersion == "" {
		t.Errorf("status %+v", st)
	}
}
