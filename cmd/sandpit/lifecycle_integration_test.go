package main

// Lifecycle tests: real `sandpit serve` processes on the test containerd,
// killed, signalled, disconnected and run side by side, as MCP hosts and
// operators do. Each case ends by checking that nothing is left: no
// container, task or snapshot labelled with the instance, no mount under
// the state dir, no instance dir.

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/snapshots"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	_ "github.com/mattn/go-sqlite3"

	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/runtime"
)

// serveProc is one `sandpit serve` process and an MCP client on its stdio.
type serveProc struct {
	cmd    *exec.Cmd
	client *client.Client
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr *syncBuffer
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lifecycleStore is a state dir and stores shared by the servers of a test.
type lifecycleStore struct {
	addr, dir, state string
}

func newLifecycleStore(t *testing.T) lifecycleStore {
	dir := t.TempDir()
	s := lifecycleStore{addr: testenv.Containerd(t), dir: dir, state: filepath.Join(dir, "state")}
	// Last (after every server stopped): what killed servers left, as an
	// operator would clean it, so the temp dir holds no mounts.
	t.Cleanup(func() {
		out, err := exec.Command(binPath, "gc", "--address", s.addr, "--no-start", "--state-dir", s.state).CombinedOutput()
		if err != nil {
			t.Errorf("sandpit gc after the test: %v\n%s", err, out)
		}
	})
	return s
}

// owned is the containerd filter of what instance of this store made: its
// name and its state dir (runtime.OwnerFilter). The name alone is shared
// with every other state dir's "default", a live server's among them.
func (s lifecycleStore) owned(instance string) string {
	return runtime.OwnerFilter(instance, filepath.Join(s.state, "instances", instance))
}

// args are serve's arguments on this store; no --instance, as an MCP host
// would launch it.
func (s lifecycleStore) args(extra ...string) []string {
	// --timeout: a run that gives none may take a minute, not 10 s: on a
	// loaded host a cold start alone can take seconds.
	return append([]string{"--address", s.addr, "--no-start", "--build-images=false", "--memory-mb", "256", "--timeout", "1m",
		"--state-dir", s.state,
		"--workspace", filepath.Join(s.dir, "workspace"),
		"--snapshot-dir", filepath.Join(s.dir, "snapshots"),
		"--history-db", filepath.Join(s.dir, "history.db"),
	}, extra...)
}

// start runs `sandpit serve` and initializes a client. It returns how long
// initialize took.
func (s lifecycleStore) start(t *testing.T, extra ...string) (*serveProc, time.Duration) {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"serve"}, s.args(extra...)...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv := &serveProc{cmd: cmd, stdin: stdin, stdout: stdout, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = srv.stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { srv.err = cmd.Wait(); close(srv.exited) }()
	t.Cleanup(func() {
		stdin.Close() // a clean exit: the server releases its sandboxes
		select {
		case <-srv.exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-srv.exited
		}
		if t.Failed() {
			t.Logf("server %d stderr:\n%s", cmd.Process.Pid, srv.stderr.String())
		}
	})
	tr := transport.NewIO(stdout, stdin, io.NopCloser(strings.NewReader("")))
	if err := tr.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv.client = client.NewClient(tr)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	var init mcpgo.InitializeRequest
	init.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcpgo.Implementation{Name: "sandpit-lifecycle", Version: "1"}
	if _, err := srv.client.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize: %v\nstderr:\n%s", err, srv.stderr.String())
	}
	return srv, time.Since(t0)
}

// runAsync calls run_code in the background.
func (srv *serveProc) runAsync(t *testing.T, args map[string]any) <-chan *mcpgo.CallToolResult {
	ch := make(chan *mcpgo.CallToolResult, 1)
	go func() {
		var req mcpgo.CallToolRequest
		req.Params.Name = "run_code"
		req.Params.Arguments = args
		res, err := srv.client.CallTool(context.Background(), req)
		if err != nil {
			res = mcpgo.NewToolResultError("call failed: " + err.Error())
		}
		ch <- res
	}()
	return ch
}

// waitExit waits for the server process to end, failing after limit, or
// testenv.Patience if that is longer: a loaded host is slow, not broken.
func (srv *serveProc) waitExit(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	limit = max(limit, testenv.Patience)
	t0 := time.Now()
	select {
	case <-srv.exited:
		return time.Since(t0)
	case <-time.After(limit):
		t.Fatalf("server %d still running %s later\nstderr:\n%s", srv.cmd.Process.Pid, limit, srv.stderr.String())
		return 0
	}
}

// instanceOf is the instance a server took, from its log line.
func (srv *serveProc) instanceOf(t *testing.T) string {
	t.Helper()
	// The log reaches us through a pipe copied by os/exec: it may trail
	// the protocol a little.
	for deadline := time.Now().Add(testenv.Patience); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, line := range strings.Split(srv.stderr.String(), "\n") {
			if strings.Contains(line, "sandpit serving MCP") {
				if _, after, ok := strings.Cut(line, "instance="); ok {
					return strings.Fields(after)[0]
				}
			}
		}
	}
	t.Fatalf("no instance in the server's log:\n%s", srv.stderr.String())
	return ""
}

// waitRunning waits until a sandbox of instance is running a task.
func waitRunning(t *testing.T, s lifecycleStore, instance string) {
	t.Helper()
	deadline := time.Now().Add(testenv.Patience)
	for time.Now().Before(deadline) {
		if n := runningTasks(t, s, instance); n > 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no running sandbox of instance %s", instance)
}

// runningTasks counts instance's sandboxes that run a program: an idle
// pooled sandbox has two processes (the init and the waiter), one that runs
// a request under the init script three or more (the init, the program, the
// init's timer); a cold one under sandpit's shim two, of which one is the
// loader's built-in init (no timer process). It tells that a program
// started, not that one ended: under the script the count dips for a moment
// every second, when the init's timer ends and the next starts; liveTasks
// tells when a sandbox is gone.
func runningTasks(t *testing.T, s lifecycleStore, instance string) int {
	t.Helper()
	c, ctx := containerdClient(t, s.addr)
	defer c.Close()
	ctrs, err := c.Containers(ctx, s.owned(instance))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ctr := range ctrs {
		task, err := ctr.Task(ctx, nil)
		if err != nil {
			continue
		}
		st, err := task.Status(ctx)
		if err != nil || st.Status != containerd.Running {
			continue
		}
		pids, err := task.Pids(ctx)
		if err != nil {
			continue
		}
		if len(pids) >= 3 || len(pids) == 2 && slices.ContainsFunc(pids, func(p containerd.ProcessInfo) bool {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.Pid))
			return strings.HasPrefix(string(cmd), "/proc/self/fd/3\x00seccomp-exec\x00--init\x00")
		}) {
			n++
		}
	}
	return n
}

func containerdClient(t *testing.T, addr string) (*containerd.Client, context.Context) {
	t.Helper()
	c, err := containerd.New(addr, containerd.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c, namespaces.WithNamespace(context.Background(), testenv.Namespace)
}

// leftovers lists what instance left: containers, snapshots, mounts under
// the state dir, and the instance dir.
func leftovers(t *testing.T, s lifecycleStore, instance string) []string {
	t.Helper()
	c, ctx := containerdClient(t, s.addr)
	defer c.Close()
	var out []string
	filter := s.owned(instance)
	ctrs, err := c.Containers(ctx, filter)
	if err != nil {
		t.Fatal(err)
	}
	for _, ctr := range ctrs {
		out = append(out, "container "+ctr.ID())
	}
	err = c.SnapshotService("overlayfs").Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		out = append(out, "snapshot "+info.Name)
		return nil
	}, filter)
	if err != nil {
		t.Fatal(err)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], filepath.Join(s.state, "instances", instance)+"/") {
				out = append(out, "mount "+f[4])
			}
		}
	}
	if _, err := os.Stat(filepath.Join(s.state, "instances", instance)); err == nil {
		out = append(out, "instance dir "+instance)
	}
	// A sandbox's processes whose containerd record is gone: every one
	// has its run's source bound from the instance's dir (a parked init,
	// created and never started, watches no liveness FIFO).
	// Only processes in another mount namespace: the host's own mountinfo
	// lists the live server's views.
	self, _ := os.Readlink("/proc/self/ns/mnt")
	procs, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
	for _, p := range procs {
		if ns, err := os.Readlink(filepath.Join(filepath.Dir(p), "ns", "mnt")); err != nil || ns == self {
			continue
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), filepath.Join(s.state, "instances", instance)+"/") {
			comm, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "comm"))
			out = append(out, fmt.Sprintf("process %s (%s)", filepath.Base(filepath.Dir(p)), strings.TrimSpace(string(comm))))
		}
	}
	return out
}

// assertNothingLeft waits (the janitor works in the background) until
// instance left nothing, failing after limit, or testenv.Patience if that
// is longer: a loaded host is slow, not broken.
func assertNothingLeft(t *testing.T, s lifecycleStore, instance string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(max(limit, testenv.Patience))
	var left []string
	for {
		left = leftovers(t, s, instance)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("instance %s left %d things: %v", instance, len(left), left)
	}
}

func runOK(t *testing.T, srv *serveProc, code string) {
	t.Helper()
	ch := srv.runAsync(t, map[string]any{"language": "python", "code": code})
	select {
	case res := <-ch:
		if r := runResult(t, res); r.Status != "success" {
			t.Fatalf("run: %+v", r)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("run_code did not answer")
	}
}

// A server killed with leftovers (in-flight runs, pooled sandboxes, run
// dirs, views) must not stop the next one from answering at once, and the
// next one's janitor removes all of it — also of instances no one reuses.
func TestLifecycleRestartAfterKill(t *testing.T) {
	s := newLifecycleStore(t)
	a, _ := s.start(t)
	b, _ := s.start(t)
	ia, ib := a.instanceOf(t), b.instanceOf(t)
	if ia == ib {
		t.Fatalf("two servers took the same instance %s", ia)
	}
	for _, srv := range []*serveProc{a, b} {
		srv.runAsync(t, map[string]any{"language": "python", "code": "import time\nprint('started', flush=True)\ntime.sleep(60)", "timeout_seconds": 60})
	}
	waitRunning(t, s, ia)
	waitRunning(t, s, ib)
	a.cmd.Process.Kill()
	b.cmd.Process.Kill()
	a.waitExit(t, 10*time.Second)
	b.waitExit(t, 10*time.Second)
	before := append(leftovers(t, s, ia), leftovers(t, s, ib)...)
	if len(before) < 4 {
		t.Fatalf("the killed servers left only %v: the test cannot see a janitor work", before)
	}

	c, took := s.start(t)
	t.Logf("initialize after a kill -9 with %d leftovers: %s", len(before), took)
	if took > testenv.Patience {
		t.Errorf("initialize took %s after a crash (a stuck janitor?)", took)
	}
	runOK(t, c, "print('after the crash')")
	// The new server may reuse a dead instance's name (and its dir): what
	// must go is every thing the dead ones left.
	ic := c.instanceOf(t)
	deadline := time.Now().Add(testenv.Patience)
	for {
		now := map[string]bool{}
		for _, l := range append(leftovers(t, s, ia), leftovers(t, s, ib)...) {
			now[l] = true
		}
		var still []string
		for _, l := range before {
			if now[l] && l != "instance dir "+ic {
				still = append(still, l)
			}
		}
		if len(still) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after the restart, still left by the killed servers: %v", testenv.Patience, still)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Two servers launched the same way (same state dir, workspace and
// stores, no --instance) both answer, and neither disturbs the other's runs:
// not at start-up (janitor), not while running.
func TestLifecycleTwoServers(t *testing.T) {
	s := newLifecycleStore(t)
	a, _ := s.start(t)
	long := a.runAsync(t, map[string]any{"language": "python", "code": "import time\ntime.sleep(3)\nprint('a done')", "timeout_seconds": 30})
	waitRunning(t, s, a.instanceOf(t))
	b, _ := s.start(t) // its janitor runs now, beside a's live run
	runOK(t, b, "print('b')")
	select {
	case res := <-long:
		if r := runResult(t, res); r.Status != "success" || r.Stdout != "a done\n" {
			t.Errorf("a's run beside b: status %s, stdout %q, stderr %q", r.Status, r.Stdout, r.Stderr)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("a's run did not finish")
	}
	runOK(t, a, "print('a again')")
}

// `sandpit run` and `sandpit gc` beside a live server: both work, neither
// touches the server's run; gc refuses the live instance by name.
func TestLifecycleRunAndGCBesideServer(t *testing.T) {
	s := newLifecycleStore(t)
	a, _ := s.start(t)
	ia := a.instanceOf(t)
	long := a.runAsync(t, map[string]any{"language": "python", "code": "import time\ntime.sleep(3)\nprint('a done')", "timeout_seconds": 30})
	waitRunning(t, s, ia)

	flags := []string{"--address", s.addr, "--no-start", "--state-dir", s.state}
	out, err := exec.Command(binPath, append(append([]string{"run"}, flags...), "-l", "python", "print(40+2)")...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "42") {
		t.Errorf("sandpit run beside a server: %v\n%s", err, out)
	}
	out, err = exec.Command(binPath, append([]string{"gc"}, flags...)...).CombinedOutput()
	if err != nil {
		t.Errorf("sandpit gc beside a server: %v\n%s", err, out)
	}
	out, err = exec.Command(binPath, append(append([]string{"gc"}, flags...), "--instance", ia)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), fmt.Sprintf("pid %d", a.cmd.Process.Pid)) {
		t.Errorf("sandpit gc --instance %s (live): err %v, want a refusal naming pid %d\n%s", ia, err, a.cmd.Process.Pid, out)
	}
	select {
	case res := <-long:
		if r := runResult(t, res); r.Status != "success" || r.Stdout != "a done\n" {
			t.Errorf("the server's run beside run and gc: status %s, stdout %q, stderr %q", r.Status, r.Stdout, r.Stderr)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the server's run did not finish")
	}
}

// A client that goes away mid-run (its end of the pipes closes) makes the
// server release everything and exit.
func TestLifecycleClientDisconnect(t *testing.T) {
	s := newLifecycleStore(t)
	a, _ := s.start(t)
	ia := a.instanceOf(t)
	a.runAsync(t, map[string]any{"language": "python", "code": "import time\ntime.sleep(40)", "timeout_seconds": 60})
	waitRunning(t, s, ia)
	a.stdin.Close()
	a.stdout.Close()
	took := a.waitExit(t, 30*time.Second)
	t.Logf("exit after the client went away: %s", took)
	assertNothingLeft(t, s, ia, 10*time.Second)
}

// SIGTERM mid-run: the run is killed and recorded as cancelled with its
// output so far, everything is released, and the server exits 0. A second
// signal is not needed.
func TestLifecycleSIGTERM(t *testing.T) {
	s := newLifecycleStore(t)
	a, _ := s.start(t)
	ia := a.instanceOf(t)
	a.runAsync(t, map[string]any{"language": "python", "code": "import time\nprint('partial', flush=True)\nopen('/proc/self/comm', 'w').write('sandpit-printed')\ntime.sleep(40)", "timeout_seconds": 60})
	waitRunning(t, s, ia)
	testenv.WaitProcessNamed(t, "sandpit-printed")
	a.cmd.Process.Signal(syscall.SIGTERM)
	took := a.waitExit(t, 30*time.Second)
	t.Logf("exit after SIGTERM mid-run: %s", took)
	if a.err != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", a.err)
	}
	assertNothingLeft(t, s, ia, 10*time.Second)

	db, err := sql.Open("sqlite3", filepath.Join(s.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var status, stdout string
	if err := db.QueryRow(`SELECT status, stdout_head FROM runs ORDER BY started_ns DESC LIMIT 1`).Scan(&status, &stdout); err != nil {
		t.Fatalf("the cancelled run is not in the history: %v", err)
	}
	if status != "cancelled" || !strings.Contains(stdout, "partial") {
		t.Errorf("history: status %q, stdout %q; want cancelled with the output so far", status, stdout)
	}
}

// A client that closes stdin and then signals (mcp-go's Close sends SIGTERM
// 2 s after it closes stdin): the signal during the release must not kill
// the server with its sandboxes left; it finishes releasing and exits 0.
func TestLifecycleSIGTERMWhileReleasing(t *testing.T) {
	s := newLifecycleStore(t)
	a, _ := s.start(t, "--pool=2")
	ia := a.instanceOf(t)
	a.runAsync(t, map[string]any{"language": "python", "code": "import time\ntime.sleep(40)", "timeout_seconds": 60})
	waitRunning(t, s, ia)
	a.stdin.Close()
	if !testenv.Poll(testenv.Patience, func() bool { return strings.Contains(a.stderr.String(), "stdio closed; releasing sandboxes") }) {
		t.Fatalf("the server never began releasing:\n%s", a.stderr.String())
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.waitExit(t, 30*time.Second)
	if a.err != nil {
		t.Errorf("a SIGTERM while releasing: exit %v, want status 0 with everything released", a.err)
	}
	assertNothingLeft(t, s, ia, 10*time.Second)
}

// After kill -9 of its server, a run still dies at its own deadline: the
// sandbox's init enforces it.
func TestLifecycleRunDiesWithoutServer(t *testing.T) {
	s := newLifecycleStore(t)
	for _, pool := range []string{"--pool=0", "--pool=2"} {
		t.Run(pool, func(t *testing.T) {
			a, _ := s.start(t, pool)
			ia := a.instanceOf(t)
			a.runAsync(t, map[string]any{"language": "python", "code": "while True: pass", "timeout_seconds": 3})
			waitRunning(t, s, ia)
			t0 := time.Now() // it runs by now; a slow host may have taken long to start it
			a.cmd.Process.Kill()
			a.waitExit(t, 10*time.Second)
			// The loop never ends by itself: any bound tells a run that
			// died at its deadline from one that did not, and a generous
			// one makes no bet on the host's speed.
			testenv.Poll(testenv.Patience, func() bool { return liveTasks(t, s, ia) == 0 })
			gone := time.Since(t0)
			t.Logf("the run ended %s after it was seen running (timeout 3 s, server killed)", gone.Round(10*time.Millisecond))
			if liveTasks(t, s, ia) > 0 {
				t.Fatalf("the run is still running %s after its 3 s timeout, its server dead", gone)
			}
		})
	}
}

// Files that runs and file tools create in a workspace belong to the
// workspace directory's owner on the host, never to the sandbox's mapped
// uid; a run can still change the owner's files.
func TestLifecycleWorkspaceOwnership(t *testing.T) {
	s := newLifecycleStore(t)
	ws := filepath.Join(s.dir, "workspace")
	if err := os.MkdirAll(filepath.Join(ws, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "data", "in.csv"), []byte("a\n1\n"), 0o644)
	const uid, gid = 4242, 4343
	for _, p := range []string{ws, filepath.Join(ws, "data"), filepath.Join(ws, "data", "in.csv")} {
		if err := os.Lchown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := s.start(t)
	code := "open('data/in.csv', 'a').write('2\\n')\nimport os\nos.makedirs('out/deep', exist_ok=True)\nopen('out/deep/r.txt', 'w').write('ok')\nprint(os.getuid(), os.stat('data/in.csv').st_uid)"
	ch := a.runAsync(t, map[string]any{"language": "python", "code": code})
	var r struct {
		Status, Stdout, Stderr string
	}
	select {
	case res := <-ch:
		got := runResult(t, res)
		r.Status, r.Stdout, r.Stderr = string(got.Status), got.Stdout, got.Stderr
	case <-time.After(90 * time.Second):
		t.Fatal("run_code did not answer")
	}
	if r.Status != "success" {
		t.Fatalf("run: %s %q %q", r.Status, r.Stdout, r.Stderr)
	}
	if r.Stdout != "1000 1000\n" {
		t.Errorf("inside, uid and the owner's file's uid = %q, want the sandbox user's for both", r.Stdout)
	}
	if res := call(t, a.client, "write_file", map[string]any{"path": "notes/n.txt", "content": "hi"}); res.IsError {
		t.Fatalf("write_file: %s", text(res))
	}
	for _, rel := range []string{".", "data/in.csv", "out", "out/deep", "out/deep/r.txt", "notes", "notes/n.txt"} {
		fi, err := os.Lstat(filepath.Join(ws, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != uid || st.Gid != gid {
			t.Errorf("%s is owned by %d:%d on the host, want the workspace owner %d:%d", rel, st.Uid, st.Gid, uid, gid)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "data", "in.csv")); string(b) != "a\n1\n2\n" {
		t.Errorf("in.csv = %q", b)
	}
}

// kill -9 at random points of a busy server — pool fill, runs writing files,
// their merges, file writes, snapshots and restores — then a restart: it
// answers at once, what the dead server left goes, and the workspace holds
// no half-done work (no temporary or staging entries, every file whole).
func TestLifecycleKillAtRandomPoints(t *testing.T) {
	s := newLifecycleStore(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	ws := filepath.Join(s.dir, "workspace")
	for round := 0; round < 4; round++ {
		a, _ := s.start(t)
		ia := a.instanceOf(t)
		// Some work of every kind, at once.
		a.runAsync(t, map[string]any{"language": "python", "code": fmt.Sprintf("import os\nos.makedirs('r%d', exist_ok=True)\nfor i in range(200):\n    open(f'r%d/f{i}.txt', 'w').write('x' * 4096)", round, round)})
		go callNoFail(a.client, "write_file", map[string]any{"path": fmt.Sprintf("w%d.txt", round), "content": strings.Repeat("y", 1<<20)})
		go func() {
			res := callNoFail(a.client, "create_state_snapshot", map[string]any{"description": "round"})
			if id := snapshotID(res); id != "" {
				callNoFail(a.client, "restore_state_snapshot", map[string]any{"snapshot_id": id})
			}
		}()
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		a.cmd.Process.Kill()
		a.waitExit(t, 10*time.Second)
		before := leftovers(t, s, ia)

		b, took := s.start(t)
		t.Logf("round %d: killed after a random delay; restart answered in %s", round, took)
		if took > testenv.Patience {
			t.Errorf("initialize took %s after a kill", took)
		}
		runOK(t, b, "print('alive')")
		// What the killed server left goes (its name may be b's now).
		for deadline := time.Now().Add(testenv.Patience); ; time.Sleep(200 * time.Millisecond) {
			now := map[string]bool{}
			for _, l := range leftovers(t, s, ia) {
				now[l] = true
			}
			var still []string
			for _, l := range before {
				if now[l] && !strings.HasPrefix(l, "instance dir") {
					still = append(still, l)
				}
			}
			if len(still) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %v after the restart, still left by the killed server: %v", round, testenv.Patience, still)
			}
		}
		ents, err := os.ReadDir(ws)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".sandpit-") {
				t.Errorf("round %d: %s left in the workspace", round, e.Name())
			}
		}
		filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".txt") {
				if fi, _ := d.Info(); fi != nil && fi.Size() != 4096 && fi.Size() != 1<<20 {
					t.Errorf("round %d: %s is %d bytes: a torn file", round, p, fi.Size())
				}
			}
			return nil
		})
		b.stdin.Close()
		b.waitExit(t, 30*time.Second)
	}
}

func callNoFail(c *client.Client, tool string, args map[string]any) *mcpgo.CallToolResult {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var req mcpgo.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return nil
	}
	return res
}

func snapshotID(res *mcpgo.CallToolResult) string {
	if res == nil || res.IsError {
		return ""
	}
	m, _ := res.StructuredContent.(map[string]any)
	id, _ := m["snapshot_id"].(string)
	return id
}

// Pooled sandboxes waiting for a request end by themselves when their
// server dies: their init watches the server's liveness FIFO (stdin cannot
// tell: the runc shim keeps its own writer on it).
func TestLifecycleIdlePoolDiesWithServer(t *testing.T) {
	s := newLifecycleStore(t)
	a, _ := s.start(t, "--pool=2")
	ia := a.instanceOf(t)
	testenv.Eventually(t, "the pool to fill", func() bool { return liveTasks(t, s, ia) >= 2 })
	a.cmd.Process.Kill()
	a.waitExit(t, 10*time.Second)
	t0 := time.Now()
	// Left alone they wait forever: any bound tells, and a generous one
	// makes no bet on the host's speed.
	if !testenv.Poll(testenv.Patience, func() bool { return liveTasks(t, s, ia) == 0 }) {
		t.Fatalf("%d pooled sandboxes still running %v after their server died", liveTasks(t, s, ia), testenv.Patience)
	}
	t.Logf("pooled sandboxes ended %s after their server's kill -9", time.Since(t0).Round(time.Millisecond))
}

// liveTasks counts instance's sandboxes whose task is running.
func liveTasks(t *testing.T, s lifecycleStore, instance string) int {
	t.Helper()
	c, ctx := containerdClient(t, s.addr)
	defer c.Close()
	ctrs, err := c.Containers(ctx, s.owned(instance))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ctr := range ctrs {
		if task, err := ctr.Task(ctx, nil); err == nil {
			if st, err := task.Status(ctx); err == nil && st.Status == containerd.Running {
				n++
			}
		}
	}
	return n
}

// A server that is frozen (SIGSTOP) still holds the liveness FIFO: then
// the init's own deadline ends the run, at the timeout plus 2 s.
func TestLifecycleRunDiesWithFrozenServer(t *testing.T) {
	s := newLifecycleStore(t)
	a, _ := s.start(t, "--pool=0")
	ia := a.instanceOf(t)
	t0 := time.Now()
	a.runAsync(t, map[string]any{"language": "python", "code": "while True: pass", "timeout_seconds": 3})
	waitRunning(t, s, ia)
	a.cmd.Process.Signal(syscall.SIGSTOP)
	defer a.cmd.Process.Signal(syscall.SIGCONT)
	// The loop never ends by itself: a generous bound still tells, with
	// no bet on how long the host took to start it.
	testenv.Poll(testenv.Patience, func() bool { return liveTasks(t, s, ia) == 0 })
	gone := time.Since(t0)
	t.Logf("with its server frozen, the run ended %s after it started (timeout 3 s)", gone.Round(10*time.Millisecond))
	if liveTasks(t, s, ia) > 0 {
		t.Fatalf("the run is still running %s after its 3 s timeout, its server frozen", gone)
	}
	if gone < 3*time.Second {
		t.Errorf("the run ended after %s, before its timeout", gone)
	}
}
