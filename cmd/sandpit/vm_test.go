package main

// The rootless smoke suite that scripts/vm-test.sh runs inside a cgroup v2 +
// systemd guest, as a normal lingering user: scripts/serve.sh (rootless
// containerd in a delegated systemd unit, image imported on first use) is
// driven over stdio by mcp-go's client, and every limit must be enforced by
// the user's delegated cgroup. Off unless SANDPIT_VM_SUITE says which part
// to run; the guest sets it, SANDPIT_BIN and SANDPIT_VM_CHECKOUT (a directory
// with scripts/ and bin/sandpit).

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit/internal/pypi/pypitest"
	"github.com/sandpit-dev/sandpit/mcp"
)

// Limits the smoke suite's server runs with: small, so that hitting them is
// quick under emulation.
const (
	vmMemoryMB = 192
	vmPids     = 48
	vmCPUs     = 0.5
)

func vmSuite(t *testing.T, part string) {
	t.Helper()
	if got := os.Getenv("SANDPIT_VM_SUITE"); got != part {
		t.Skipf("SANDPIT_VM_SUITE=%q, not %q: this runs inside scripts/vm-test.sh's guest", got, part)
	}
	if os.Geteuid() == 0 {
		t.Fatal("the VM suite runs as a normal user: it tests rootless mode")
	}
}

// startServeScript runs the checkout's scripts/serve.sh, as an MCP client
// configured without sudo would, and initializes a client on it. The first
// start imports the language image, so this waits until a run succeeds.
func startServeScript(t *testing.T, args ...string) (c *client.Client, workspace string) {
	t.Helper()
	script := filepath.Join(os.Getenv("SANDPIT_VM_CHECKOUT"), "scripts", "serve.sh")
	// Not t.TempDir: files that runs write back belong to a subordinate id
	// of the user (the sandbox user as rootlesskit maps it), which the user
	// cannot remove outside the namespace. The guest is thrown away.
	dir, err := os.MkdirTemp("", "sandpit-vm-")
	if err != nil {
		t.Fatal(err)
	}
	workspace = filepath.Join(dir, "workspace")
	args = append([]string{
		"--memory-mb", fmt.Sprint(vmMemoryMB), "--pids", fmt.Sprint(vmPids), "--cpus", fmt.Sprint(vmCPUs),
		"--workspace-quota", "32MiB", "--pool", "1",
		// A cold sandbox takes seconds under emulation; runs that test a
		// timeout say theirs.
		"--timeout", "60s",
		"--state-dir", filepath.Join(dir, "state"),
		"--workspace", workspace,
		"--snapshot-dir", filepath.Join(dir, "snapshots"),
		"--history-db", filepath.Join(dir, "history.db"),
	}, args...)
	if vmNegative() {
		args = append(args, "--allow-unenforced-limits")
	}
	c, err = client.NewStdioMCPClient(script, os.Environ(), args...)
	if err != nil {
		t.Fatalf("start %s: %v", script, err)
	}
	t.Cleanup(func() { c.Close() })
	// serve.sh's and sandpit's log, for the console: what it set up and why.
	if r, ok := client.GetStderr(c); ok {
		go func() {
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				fmt.Fprintln(os.Stderr, "serve.sh: "+sc.Text())
			}
		}()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var init mcpgo.InitializeRequest
	init.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcpgo.Implementation{Name: "sandpit-vm", Version: "1"}
	start := time.Now()
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize (serve.sh's stderr is in the console log above): %v", err)
	}
	figure(t, "serve_ready_s", time.Since(start).Seconds())
	return c, workspace
}

// vmNegative is the suite's negative control (scripts/vm-test.sh negative):
// delegation is off and the server runs with --allow-unenforced-limits, so
// the memory and CPU checks below must fail; the guest expects them to.
func vmNegative() bool { return os.Getenv("SANDPIT_VM_NEGATIVE") == "1" }

// figure prints a measurement in a form scripts/vm-test.sh collects.
func figure(t *testing.T, name string, v any) {
	t.Helper()
	t.Logf("SANDPIT-VM-FIGURE %s=%v", name, v)
}

// firstRun waits for the image import that serve starts on first use.
func firstRun(t *testing.T, c *client.Client) mcp.RunCodeResult {
	t.Helper()
	start := time.Now()
	for {
		res := call(t, c, "run_code", map[string]any{"language": "python", "code": "print(6*7)"})
		if !res.IsError {
			figure(t, "first_run_s", time.Since(start).Seconds())
			return runResult(t, res)
		}
		msg := text(res)
		if !strings.Contains(msg, "image") || time.Since(start) > 8*time.Minute {
			t.Fatalf("first run: %s", msg)
		}
		time.Sleep(10 * time.Second)
	}
}

func TestVMRootless(t *testing.T) {
	vmSuite(t, "rootless")
	// A package index on the guest's loopback (rootlesskit shares the
	// guest's network; the sandboxes never see it): packages work rootless.
	ix, err := pypitest.NewIndex()
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.AddWheel("sp-vm", "1.0", nil, map[string][]byte{"sp_vm.py": []byte("X = 'from the layer'\n")}); err != nil {
		t.Fatal(err)
	}
	c, ws := startServeScript(t, "--package-source", "python="+ix.URL())
	first := firstRun(t, c)
	if first.Stdout != "42\n" || first.Status != "success" {
		t.Fatalf("python: status %s stdout %q stderr %q", first.Status, first.Stdout, first.Stderr)
	}
	if len(first.Limits.Unenforced) > 0 && !vmNegative() {
		t.Fatalf("limits reported unenforced: %q", first.Limits.Unenforced)
	}
	if first.Usage.MemoryPeakBytes == 0 && first.Usage.CPUUserMS+first.Usage.CPUSystemMS == 0 {
		t.Errorf("no usage read from the sandbox's cgroup: %+v", first.Usage)
	}

	run := func(t *testing.T, args map[string]any) mcp.RunCodeResult {
		t.Helper()
		start := time.Now()
		r := runResult(t, call(t, c, "run_code", args))
		t.Logf("%s in %.1fs: status %s exit %d usage %+v\nstdout: %s\nstderr: %s", args["language"], time.Since(start).Seconds(), r.Status, r.ExitCode, r.Usage, r.Stdout, r.Stderr)
		return r
	}

	t.Run("c", func(t *testing.T) {
		r := run(t, map[string]any{"language": "c", "code": "#include <stdio.h>\nint main(void){puts(\"built\");return 0;}\n"})
		if r.Status != "success" || r.Stdout != "built\n" {
			t.Errorf("status %s stdout %q", r.Status, r.Stdout)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		r := run(t, map[string]any{"language": "python", "code": "while True: pass", "timeout_seconds": 3})
		if r.Status != "timeout" {
			t.Errorf("status %s, want timeout", r.Status)
		}
	})
	t.Run("oom", func(t *testing.T) {
		r := run(t, map[string]any{"language": "python", "code": "x = []\nwhile True: x.append(bytearray(16 << 20))", "timeout_seconds": 30})
		if r.Status != "oom" || !r.Usage.OOMKilled {
			t.Errorf("status %s oom_killed %v, want oom read from the cgroup", r.Status, r.Usage.OOMKilled)
		}
		figure(t, "oom_peak_mb", r.Usage.MemoryPeakBytes>>20)
		if limit := uint64(vmMemoryMB) << 20; r.Usage.MemoryPeakBytes > limit {
			t.Errorf("peak %d bytes above the %d limit", r.Usage.MemoryPeakBytes, limit)
		}
	})
	t.Run("pids", func(t *testing.T) {
		r := run(t, map[string]any{"language": "python", "timeout_seconds": 30, "code": `import os, time, errno
n = 0
try:
    for n in range(1, 500):
        if os.fork() == 0:
            time.sleep(20); os._exit(0)
except OSError as e:
    print("forks", n - 1, errno.errorcode[e.errno])
`})
		var forks int
		var errname string
		fmt.Sscanf(r.Stdout, "forks %d %s", &forks, &errname)
		figure(t, "pids_forks_before_eagain", forks)
		if errname != "EAGAIN" || forks >= vmPids || forks < vmPids/2 {
			t.Errorf("stdout %q: want EAGAIN after fewer than %d forks (the pids limit)", r.Stdout, vmPids)
		}
	})
	t.Run("cpu quota", func(t *testing.T) {
		// Two processes spin for 4 s of wall time and measure the CPU time
		// they got (os.times, the program's own and its child's): with a
		// quota of 0.5 CPU that is 2 s between them, without one up to 8 s
		// on the guest's two vCPUs. (The cgroup's counters would include
		// what a pooled sandbox spent before the request: its interpreter's
		// start.)
		r := run(t, map[string]any{"language": "python", "timeout_seconds": 30, "code": `import os, time
t0, c0 = time.monotonic(), os.times()
pid = os.fork()
while time.monotonic() < t0 + 4: pass
if pid == 0: os._exit(0)
os.waitpid(pid, 0)
t1, c1 = time.monotonic(), os.times()
cpu = sum(c1[i] - c0[i] for i in range(4))
print("cpu %.2f wall %.2f" % (cpu, t1 - t0))
`})
		var cpu, wall float64
		if _, err := fmt.Sscanf(r.Stdout, "cpu %f wall %f", &cpu, &wall); err != nil || wall <= 0 {
			t.Fatalf("status %s stdout %q: %v", r.Status, r.Stdout, err)
		}
		ratio := cpu / wall
		figure(t, "cpu_s", cpu)
		figure(t, "cpu_wall_s", wall)
		figure(t, "cpu_per_wall", fmt.Sprintf("%.2f", ratio))
		figure(t, "cpu_cgroup_ms", r.Usage.CPUUserMS+r.Usage.CPUSystemMS)
		if ratio > vmCPUs*1.2 || ratio < vmCPUs/4 {
			t.Errorf("%.2f s CPU in %.2f s wall = %.2f CPUs, want about %.2f (the quota)", cpu, wall, ratio, vmCPUs)
		}
	})
	t.Run("no network", func(t *testing.T) {
		// A listener in the guest's own network namespace (rootlesskit runs
		// with --net=host) must be out of reach: the sandbox has its own.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		r := run(t, map[string]any{"language": "python", "code": fmt.Sprintf(`import socket
print(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
try:
    socket.create_connection(("127.0.0.1", %d), timeout=3); print("CONNECTED")
except OSError as e:
    print("blocked:", e)
`, port)})
		if !strings.Contains(r.Stdout, "['lo']") || !strings.Contains(r.Stdout, "blocked:") || strings.Contains(r.Stdout, "CONNECTED") {
			t.Errorf("stdout %q: want only lo and the connection refused", r.Stdout)
		}
	})
	t.Run("read-only root", func(t *testing.T) {
		r := run(t, map[string]any{"language": "bash", "code": "echo x > /usr/x"})
		if r.Status != "error" || !strings.Contains(r.Stderr, "Read-only file system") {
			t.Errorf("status %s stderr %q", r.Status, r.Stderr)
		}
	})
	t.Run("packages", func(t *testing.T) {
		res := call(t, c, "install_packages", map[string]any{"language": "python", "packages": []string{"sp-vm==1.0"}})
		if res.IsError {
			t.Fatalf("install_packages: %s", text(res))
		}
		r := run(t, map[string]any{"language": "python", "code": "import sp_vm; print(sp_vm.X)\nopen('/opt/sandpit/env/python/sp_vm.py', 'a')"})
		if !strings.Contains(r.Stdout, "from the layer") || !strings.Contains(r.Stderr, "Read-only file system") && !strings.Contains(r.Stderr, "Permission denied") {
			t.Errorf("status %s stdout %q stderr %q: want the import, and the layer not writable", r.Status, r.Stdout, r.Stderr)
		}
	})
	t.Run("workspace and file tools", func(t *testing.T) {
		if res := call(t, c, "write_file", map[string]any{"path": "in.txt", "content": "from the file tool\n"}); res.IsError {
			t.Fatalf("write_file: %s", text(res))
		}
		r := run(t, map[string]any{"language": "python", "code": "print(open('in.txt').read().strip())\nopen('out.txt', 'w').write('written by the sandbox\\n')"})
		if r.Status != "success" || r.Stdout != "from the file tool\n" {
			t.Fatalf("status %s stdout %q", r.Status, r.Stdout)
		}
		if r.Files == nil || !contains(r.Files.Created, "out.txt") {
			t.Errorf("files %+v, want out.txt created", r.Files)
		}
		res := call(t, c, "read_file", map[string]any{"path": "out.txt"})
		if res.IsError || !strings.Contains(text(res), "written by the sandbox") {
			t.Errorf("read_file: %s", text(res))
		}
		st, err := os.Stat(filepath.Join(ws, "out.txt"))
		if err != nil {
			t.Fatalf("out.txt not written back to the workspace on disk: %v", err)
		}
		uid := st.Sys().(*syscall.Stat_t).Uid
		figure(t, "workspace_file_owner_uid", uid)
		if uid != uint32(os.Getuid()) {
			t.Errorf("out.txt belongs to uid %d, not to the user running sandpit (%d)", uid, os.Getuid())
		}
		// A file the user already has, changed by a run, stays theirs.
		if err := os.WriteFile(filepath.Join(ws, "mine.txt"), []byte("1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r = run(t, map[string]any{"language": "python", "code": "open('mine.txt', 'a').write('2\\n')"})
		if r.Status != "success" {
			t.Errorf("a run changing the user's file: status %s stderr %q", r.Status, r.Stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "mine.txt")); string(b) != "1\n2\n" {
			t.Errorf("mine.txt = %q after the run", b)
		}
		if st, err := os.Stat(filepath.Join(ws, "mine.txt")); err == nil && st.Sys().(*syscall.Stat_t).Uid != uint32(os.Getuid()) {
			t.Errorf("mine.txt belongs to uid %d after a run changed it", st.Sys().(*syscall.Stat_t).Uid)
		}
	})
}

// TestVMRefusal runs with delegation switched off in the guest: sandpit must
// refuse to run code, saying why and what to do, rather than run unbounded.
func TestVMRefusal(t *testing.T) {
	vmSuite(t, "refusal")
	c, _ := startServeScript(t)
	start := time.Now()
	for {
		res := call(t, c, "run_code", map[string]any{"language": "python", "code": "print('UNSAFE ran without limits')"})
		msg := text(res)
		if !res.IsError {
			t.Fatalf("run_code ran with delegation off: %s", msg)
		}
		if strings.Contains(msg, "image") && time.Since(start) < 8*time.Minute {
			time.Sleep(5 * time.Second) // the image import comes first
			continue
		}
		t.Logf("refused: %s", msg)
		for _, want := range []string{"cannot be enforced", "delegat", "hint"} {
			if !strings.Contains(msg, want) {
				t.Errorf("refusal %q does not say %q", msg, want)
			}
		}
		return
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
