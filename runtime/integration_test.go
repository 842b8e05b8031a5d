package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/snapshots"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testruntime"
	"github.com/sandpit-dev/sandpit/runtime"
)

// newRuntime returns a runtime on the test containerd with its own instance
// label, so its janitor and leak checks see only this test's sandboxes.
func newRuntime(t *testing.T, mod ...func(*runtime.Config)) *runtime.Runtime {
	t.Helper()
	cfg := testruntime.Config(t)
	addr := cfg.Address
	for _, m := range mod {
		m(&cfg)
	}
	r, err := runtime.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close() // waits for background cleanup and drains any pool
		assertNothingLeft(t, addr, cfg.Instance)
	})
	return r
}

// assertNothingLeft checks containerd for containers, tasks and snapshots
// carrying the instance label.
func assertNothingLeft(t *testing.T, addr, instance string) {
	t.Helper()
	c, err := containerd.New(addr)
	if err != nil {
		t.Fatalf("leak check: %v", err)
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), testenv.Namespace)
	filter := fmt.Sprintf("labels.%q==%q", runtime.LabelInstance, instance)
	ctrs, err := c.Containers(ctx, filter)
	if err != nil {
		t.Fatalf("leak check: %v", err)
	}
	for _, ctr := range ctrs {
		t.Errorf("container %s left behind", ctr.ID())
	}
	n := 0
	err = c.SnapshotService("overlayfs").Walk(ctx, func(context.Context, snapshots.Info) error { n++; return nil }, filter)
	if err != nil {
		t.Fatalf("leak check: %v", err)
	}
	if n > 0 {
		t.Errorf("%d snapshots left behind", n)
	}
}

func run(t *testing.T, r *runtime.Runtime, req sandpit.Request) *sandpit.Result {
	t.Helper()
	if req.Timeout == 0 {
		// Generous: it only bounds a broken run, and filling 512 MiB to an
		// OOM kill takes seconds on a loaded CI host.
		req.Timeout = time.Minute
	}
	res, err := r.Run(t.Context(), req)
	if err != nil {
		t.Fatalf("Run(%s): %v", req.Language, err)
	}
	return res
}

func TestRunPrograms(t *testing.T) {
	r := newRuntime(t)
	tests := []struct {
		name      string
		req       sandpit.Request
		status    sandpit.Status
		exit      int
		stdout    string // exact, unless empty
		stderrHas string
		stdoutHas string
	}{
		{name: "python ok", req: sandpit.Request{Language: "python", Code: "print('ok')"}, status: sandpit.StatusSuccess, stdout: "ok\n"},
		{name: "python exit 3", req: sandpit.Request{Language: "python", Code: "import sys; sys.exit(3)"}, status: sandpit.StatusError, exit: 3},
		{name: "python exception", req: sandpit.Request{Language: "Python", Code: "def f():\n    raise ValueError('boom')\nf()\n"}, status: sandpit.StatusError, exit: 1, stderrHas: "ValueError: boom"},
		{name: "python stdin", req: sandpit.Request{Language: "python", Code: "import sys; print(sys.stdin.read().upper(), end='')", Stdin: []byte("hello\n")}, status: sandpit.StatusSuccess, stdout: "HELLO\n"},
		// The program exits without reading its (large) stdin: its exit
		// status must still be the one reported.
		{name: "exit without reading stdin", req: sandpit.Request{Language: "python", Code: "import sys; sys.exit(3)", Stdin: []byte(strings.Repeat("x", 1<<20))}, status: sandpit.StatusError, exit: 3},
		{name: "python args", req: sandpit.Request{Language: "python", Code: "import sys; print(sys.argv[1:], __name__)", Args: []string{"a", "b c"}}, status: sandpit.StatusSuccess, stdout: "['a', 'b c'] __main__\n"},
		{name: "python json module", req: sandpit.Request{Language: "python", Code: "import json, ctypes; print(json.dumps({'a': 1}))"}, status: sandpit.StatusSuccess, stdout: "{\"a\": 1}\n"},
		{name: "c hello", req: sandpit.Request{Language: "c", Code: "#include <stdio.h>\nint main(void){puts(\"hello c\");return 0;}\n"}, status: sandpit.StatusSuccess, stdout: "hello c\n"},
		{name: "c exit code", req: sandpit.Request{Language: "c", Code: "int main(void){return 7;}\n"}, status: sandpit.StatusError, exit: 7},
		{name: "c syntax error", req: sandpit.Request{Language: "c", Code: "int main(void){ return 0 }\n"}, status: sandpit.StatusCompileError, exit: 1, stderrHas: "error"},
		{name: "cpp hello", req: sandpit.Request{Language: "cpp", Code: "#include <iostream>\nint main(){std::cout << \"hello cpp\" << std::endl;}\n"}, status: sandpit.StatusSuccess, stdout: "hello cpp\n"},
		{name: "cpp syntax error", req: sandpit.Request{Language: "C++", Code: "int main( { }\n"}, status: sandpit.StatusCompileError, exit: 1, stderrHas: "error"},
		{name: "bash", req: sandpit.Request{Language: "bash", Code: "echo \"$((6*7))\"; echo err >&2; exit 4"}, status: sandpit.StatusError, exit: 4, stdout: "42\n", stderrHas: "err"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, tt.req)
			if res.Status != tt.status || res.ExitCode != tt.exit {
				t.Errorf("status, exit = %s, %d; want %s, %d\nstdout: %s\nstderr: %s", res.Status, res.ExitCode, tt.status, tt.exit, res.Stdout, res.Stderr)
			}
			if tt.stdout != "" && res.Stdout != tt.stdout {
				t.Errorf("stdout = %q, want %q", res.Stdout, tt.stdout)
			}
			if !strings.Contains(res.Stderr, tt.stderrHas) {
				t.Errorf("stderr = %q, want it to contain %q", res.Stderr, tt.stderrHas)
			}
			if res.ID == "" || res.DurationMS <= 0 {
				t.Errorf("id %q duration %d ms: want both set", res.ID, res.DurationMS)
			}
		})
	}
}

func TestTimeoutKillsAndCleansUp(t *testing.T) {
	r := newRuntime(t)
	start := time.Now()
	res := run(t, r, sandpit.Request{Language: "python", Code: "while True: pass", Timeout: 2 * time.Second})
	took := time.Since(start)
	if res.Status != sandpit.StatusTimeout {
		t.Fatalf("status = %s, want timeout", res.Status)
	}
	if took < 2*time.Second {
		t.Errorf("returned after %s, before the 2s timeout", took)
	}
	// The loop's CPU time is measured, and the 1-CPU quota bounds it. (How
	// close it gets to the wall time depends on the host's load.)
	cpu := res.Usage.CPUUserMS + res.Usage.CPUSystemMS
	if cpu <= 0 || cpu > res.Usage.WallMS*11/10+100 {
		t.Errorf("cpu %d ms over %d ms wall: want measured and within the 1-CPU quota", cpu, res.Usage.WallMS)
	}
	// assertNothingLeft in cleanup checks containers and snapshots; check ctr too.
	r.Settle()
	out, err := exec.Command("ctr", "--address", testenv.Containerd(t), "-n", testenv.Namespace, "tasks", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr tasks ls: %v: %s", err, out)
	}
	if strings.Contains(string(out), res.ID) {
		t.Errorf("task of run %s still listed:\n%s", res.ID, out)
	}
}

func TestOutputIsCapped(t *testing.T) {
	r := newRuntime(t)
	res := run(t, r, sandpit.Request{Language: "python", Code: "import sys\nsys.stdout.write('x' * 200 * 1024)\nsys.stderr.write('y' * 10)\n"})
	if res.Status != sandpit.StatusSuccess {
		t.Fatalf("status = %s: %s", res.Status, res.Stderr)
	}
	if !res.StdoutTruncated || res.StdoutBytes != 200*1024 {
		t.Errorf("truncated=%v bytes=%d, want true and %d", res.StdoutTruncated, res.StdoutBytes, 200*1024)
	}
	if !strings.Contains(res.Stdout, "output truncated") {
		t.Errorf("stdout lacks the truncation marker: ...%s", res.Stdout[max(0, len(res.Stdout)-100):])
	}
	if got := strings.Count(res.Stdout, "x"); int64(got) != res.Limits.OutputBytes {
		t.Errorf("kept %d bytes, want the cap %d", got, res.Limits.OutputBytes)
	}
	if res.StderrTruncated || res.Stderr != "yyyyyyyyyy" {
		t.Errorf("stderr = %q truncated=%v", res.Stderr, res.StderrTruncated)
	}
}

func TestOutputFloodIsDrained(t *testing.T) {
	r := newRuntime(t)
	// 1 GiB to stdout: the copier must keep draining (or the program would
	// block on a full pipe) while keeping only the cap.
	res := run(t, r, sandpit.Request{Language: "bash", Code: "head -c 1073741824 /dev/zero; echo done >&2", Timeout: 50 * time.Second})
	if res.Status != sandpit.StatusSuccess || !strings.Contains(res.Stderr, "done") {
		t.Fatalf("status %s stderr %q: want success after a drained flood", res.Status, res.Stderr)
	}
	if res.StdoutBytes != 1<<30 || !res.StdoutTruncated {
		t.Errorf("stdout bytes %d truncated %v", res.StdoutBytes, res.StdoutTruncated)
	}
}

func TestMemoryHogIsOOM(t *testing.T) {
	r := newRuntime(t, func(c *runtime.Config) { c.Limits.MemoryBytes = 128 << 20; c.Limits.TmpfsBytes = 16 << 20 })
	res := run(t, r, sandpit.Request{Language: "python", Code: "b = []\nwhile True:\n    b.append(bytearray(16 << 20))\n"})
	if res.Status != sandpit.StatusOOM || !res.Usage.OOMKilled {
		t.Fatalf("status = %s usage %+v, want oom\nstderr: %s", res.Status, res.Usage, res.Stderr)
	}
	if res.Usage.MemoryPeakBytes < 64<<20 {
		t.Errorf("peak memory %d: expected near the 128 MiB limit", res.Usage.MemoryPeakBytes)
	}
}

func TestChildOOMIsDetected(t *testing.T) {
	// Only a child dies; the program itself exits 0. Exit codes alone would miss it.
	r := newRuntime(t, func(c *runtime.Config) { c.Limits.MemoryBytes = 128 << 20; c.Limits.TmpfsBytes = 16 << 20 })
	res := run(t, r, sandpit.Request{Language: "bash", Code: "python3 -c 'x = bytearray(512 << 20)' ; exit 0"})
	if res.Status != sandpit.StatusOOM {
		t.Fatalf("status = %s exit %d, want oom", res.Status, res.ExitCode)
	}
}

func TestSecurityFromInside(t *testing.T) {
	r := newRuntime(t)
	tests := []struct {
		name, lang, code string
		wantOut          string
	}{
		{"no new privs", "bash", "grep NoNewPrivs /proc/self/status", "NoNewPrivs:\t1"},
		{"no effective caps", "bash", "grep CapEff /proc/self/status", "CapEff:\t0000000000000000"},
		{"no bounding caps", "bash", "grep CapBnd /proc/self/status", "CapBnd:\t0000000000000000"},
		{"seccomp filter", "bash", "grep Seccomp: /proc/self/status", "Seccomp:\t2"},
		{"non-root", "bash", "id -u", "1000"},
		{"read-only root", "bash", "touch /usr/x 2>&1; echo rc=$?", "Read-only file system"},
		{"no network", "python", "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n    print('CONNECTED')\nexcept OSError as e:\n    print('blocked', e)\n", "blocked"},
		{"only loopback", "bash", "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '", "lo\n"},
		{"tmp is noexec", "bash", "cp /bin/true /tmp/t && /tmp/t 2>&1; echo rc=$?", "Permission denied"},
		// The shell forks once, before the bomb, and runs builtins only
		// after it: a fork while the pids limit is exhausted makes bash
		// retry with pauses of 1+2+4+8 s, past the timeout when every retry
		// meets a full limit. Calling f itself here would fork the
		// pipeline's second half after its first half has started the
		// bomb (a CI failure: no output, timeout at 15 s).
		{"fork bomb contained", "bash", "f(){ f | f & }; f 2>/dev/null & SECONDS=0; while (( SECONDS < 2 )); do :; done; echo survived", "survived"},
		{"no host env", "bash", "env | grep -c SANDPIT_SECRET_CANARY || true", "0"},
	}
	os.Setenv("SANDPIT_SECRET_CANARY", "leak-me")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, sandpit.Request{Language: tt.lang, Code: tt.code}) // run's generous default
			got := res.Stdout + res.Stderr
			if !strings.Contains(got, tt.wantOut) {
				t.Errorf("output %q does not contain %q (status %s)", got, tt.wantOut, res.Status)
			}
		})
	}
}

func TestSandboxRunsAsMappedHostUID(t *testing.T) {
	m := testenv.IDMap()
	if m == nil {
		t.Skip("user namespace disabled by SANDPIT_TEST_USERNS=0")
	}
	r := newRuntime(t)
	// While the sandbox sleeps, find its process on the host and check its uid.
	// It sleeps until the test has looked (cancelled then): a fixed sleep
	// and a 10 s search missed it on a host slow to start the sandbox.
	done := make(chan *sandpit.Result)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		res, _ := r.Run(ctx, sandpit.Request{Language: "bash", Code: "exec -a sandpit-uid-probe sleep 600", Timeout: 10 * time.Minute})
		done <- res
	}()
	want := fmt.Sprint(m.HostBase + sandpit.SandboxUID)
	found := false
	testenv.Poll(testenv.Patience, func() bool {
		out, _ := exec.Command("ps", "-eo", "uid=,args=").Output()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "sandpit-uid-probe") {
				f := strings.Fields(line)
				if f[0] != want {
					t.Errorf("sandbox process runs as host uid %s, want %s", f[0], want)
				}
				found = true
			}
		}
		return found
	})
	if !found {
		t.Error("sandbox process not seen on the host")
	}
	cancel()
	<-done
}

// crashChildEnv makes the test binary act as a server that starts a long
// run and is then killed with SIGKILL by the test: a real crash.
const crashChildEnv = "SANDPIT_TEST_CRASH_CHILD"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(crashChildEnv); cfg != "" {
		var c runtime.Config
		if err := json.Unmarshal([]byte(cfg), &c); err != nil {
			panic(err)
		}
		r, err := runtime.New(c)
		if err != nil {
			panic(err)
		}
		r.Run(context.Background(), sandpit.Request{Language: "bash", Code: "sleep 120", Timeout: 120 * time.Second})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestJanitorRemovesOrphans(t *testing.T) {
	cfg := testruntime.Config(t)
	addr, instance := cfg.Address, cfg.Instance
	// The crashing server also has a warm pool: its pooled sandboxes and
	// their mount points must go too.
	childCfg := cfg
	childCfg.Pool = runtime.PoolConfig{Size: 1}
	b, _ := json.Marshal(childCfg)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"="+string(b))
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := containerd.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nctx := namespaces.WithNamespace(context.Background(), testenv.Namespace)
	filter := fmt.Sprintf("labels.%q==%q", runtime.LabelInstance, instance)
	running := false
	testenv.Poll(testenv.Patience, func() bool {
		ctrs, _ := c.Containers(nctx, filter)
		for _, ctr := range ctrs {
			if task, err := ctr.Task(nctx, nil); err == nil {
				if st, err := task.Status(nctx); err == nil && st.Status == containerd.Running {
					running = true
				}
			}
		}
		return running
	})
	child.Process.Kill() // SIGKILL: the server dies mid-run
	child.Wait()
	if !running {
		t.Fatal("the crashing server's sandbox never ran")
	}
	// The restarted server sweeps what the dead one left: the running sandbox
	// and its run directory.
	r2, err := runtime.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	n, err := r2.Sweep(context.Background())
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if n < 1 {
		t.Errorf("swept %d sandboxes, want the running one at least", n)
	}
	if left, _ := os.ReadDir(filepath.Join(cfg.StateDir, "runs")); len(left) > 0 {
		t.Errorf("run dirs left: %v", left)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), cfg.StateDir) {
		t.Errorf("mounts under %s left:\n%s", cfg.StateDir, mi)
	}
	assertNothingLeft(t, addr, instance)
}

func TestUnknownLanguageAndMissingDaemon(t *testing.T) {
	// A missing socket is reported at once, never after the dial timeout:
	// an hour here, so that the check needs no bet on the host's speed (a
	// run that waited for the dial would end at the context's deadline).
	r, err := runtime.New(runtime.Config{Address: "/nonexistent/containerd.sock", StateDir: t.TempDir(), Languages: runtime.DefaultLanguages("x"), DialTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(t.Context(), sandpit.Request{Language: "cobol", Code: "x"}); !errors.Is(err, runtime.ErrUnknownLanguage) {
		t.Errorf("unknown language: err = %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	_, err = r.Run(ctx, sandpit.Request{Language: "python", Code: "print(1)"})
	if !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "/nonexistent/containerd.sock") {
		t.Errorf("missing daemon: err = %v, want ErrUnavailable naming the socket", err)
	}
	if ctx.Err() != nil {
		t.Errorf("waited %v (the dial timeout is an hour) to report a missing daemon", testenv.Patience)
	}
}

// TestCancelDuringCreate: a run cancelled at any point of its sandbox's
// creation returns promptly with the cancellation and leaves nothing —
// containerd finishes a creation its client gave up on, so a task made
// after the cancel must still be found and removed (it once ran on, its
// container undeletable).
func TestCancelDuringCreate(t *testing.T) {
	r := newRuntime(t)
	cfg := r.Config()
	if res := run(t, r, sandpit.Request{Language: "bash", Code: "true"}); res.Status != sandpit.StatusSuccess {
		t.Fatalf("first run (image and shim ready): %+v", res)
	}
	for d := time.Duration(0); d <= 60*time.Millisecond; d += 4 * time.Millisecond {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		t0 := time.Now()
		res, err := r.Run(ctx, sandpit.Request{Language: "bash", Code: "sleep 30", Timeout: 40 * time.Second})
		took := time.Since(t0)
		cancel()
		t.Logf("cancelled after %s: returned after %s: err %v", d, took.Round(time.Millisecond), err)
		switch {
		case err == nil && res.Status != sandpit.StatusCancelled:
			t.Errorf("cancelled after %s: status %s, want cancelled or an error", d, res.Status)
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("cancelled after %s: %v, want the context's error", d, err)
		}
		// Cancelled before the program ran: back at once (the old path
		// waited 2 s here to see whether the shim had died). Cancelled
		// while it ran: the kill and the drain of its output come first.
		bound := d + time.Second
		if err == nil {
			bound = d + 10*time.Second
		}
		if took > bound {
			t.Errorf("cancelled after %s, returned only after %s", d, took)
		}
	}
	r.Settle()
	assertNothingLeft(t, cfg.Address, cfg.Instance)
}
