package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/runtime"
)

func withSessions(sc runtime.SessionConfig) func(*runtime.Config) {
	return func(c *runtime.Config) { c.Sessions = sc }
}

func sessionRun(t *testing.T, r *runtime.Runtime, session, code string, timeout time.Duration) *sandpit.Result {
	t.Helper()
	if timeout == 0 {
		timeout = time.Minute
	}
	res, err := r.Run(t.Context(), sandpit.Request{Language: "python", Session: session, Code: code, Timeout: timeout})
	if err != nil {
		t.Fatalf("session %s: %v", session, err)
	}
	return res
}

// A session keeps its namespace between calls, returns the last
// expression's value like a notebook cell, and reports errors without
// losing its state.
func TestSessionKeepsState(t *testing.T) {
	r := newRuntime(t, withPool(1, time.Minute))
	res := sessionRun(t, r, "a", "x = 41\nimport json", 0)
	if res.Status != sandpit.StatusSuccess || !res.Session.New || res.Session.Call != 1 || res.Value != "" {
		t.Fatalf("first call: %+v session %+v", res, res.Session)
	}
	res = sessionRun(t, r, "a", "x += 1\nprint('x is', x)\njson.dumps({'x': x})", 0)
	if res.Status != sandpit.StatusSuccess || res.Stdout != "x is 42\n" || res.Value != `'{"x": 42}'` || res.Session.New || res.Session.Call != 2 {
		t.Fatalf("second call: status %s stdout %q value %q session %+v stderr %q", res.Status, res.Stdout, res.Value, res.Session, res.Stderr)
	}
	res = sessionRun(t, r, "a", "def f():\n    return undefined_name\nf()", 0)
	if res.Status != sandpit.StatusError || !strings.Contains(res.Stderr, "NameError") || !strings.Contains(res.Stderr, "line 2, in f") || strings.Contains(res.Stderr, "sandpit_session") {
		t.Fatalf("error call: status %s stderr %q", res.Status, res.Stderr)
	}
	res = sessionRun(t, r, "a", "x", 0)
	if res.Status != sandpit.StatusSuccess || res.Value != "42" || res.Session.Call != 4 {
		t.Fatalf("after an error: status %s value %q", res.Status, res.Value)
	}
	infos := r.Sessions()
	if len(infos) != 1 || infos[0].Name != "a" || infos[0].Calls != 4 || infos[0].MemoryBytes == 0 || !strings.Contains(strings.Join(infos[0].Names, " "), "x") {
		t.Fatalf("Sessions: %+v", infos)
	}
	t.Logf("idle session memory: %d KiB", infos[0].MemoryBytes>>10)
	if _, err := r.CloseSession(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	res = sessionRun(t, r, "a", "'x' in globals()", 0)
	if !res.Session.New || res.Value != "False" || !strings.Contains(res.Session.Previous, "closed") {
		t.Fatalf("after close: value %q session %+v", res.Value, res.Session)
	}
}

// Two sessions are two sandboxes: neither sees the other's variables or
// /tmp.
func TestSessionIsolation(t *testing.T) {
	r := newRuntime(t)
	sessionRun(t, r, "one", "secret = 'one'\nopen('/tmp/mark', 'w').write('one')", 0)
	res := sessionRun(t, r, "two", "import os\n('secret' in globals(), os.path.exists('/tmp/mark'))", 0)
	if res.Value != "(False, False)" {
		t.Fatalf("session two sees session one: %q %q", res.Value, res.Stderr)
	}
}

// A call past its timeout is interrupted (KeyboardInterrupt) and the
// session lives on; one that ignores the interrupt loses its session.
//
// The grace and the timeout are generous: with a 1 s grace and a 2 s
// timeout, a loaded host's interpreter could miss either, and the check
// of the ignored interrupt only waits the grace longer.
func TestSessionTimeout(t *testing.T) {
	r := newRuntime(t, withSessions(runtime.SessionConfig{Grace: 20 * time.Second}))
	sessionRun(t, r, "t", "kept = 1", 0)
	res := sessionRun(t, r, "t", "import time\nprint('before', flush=True)\ntime.sleep(600)", 10*time.Second)
	if res.Status != sandpit.StatusTimeout || !strings.Contains(res.Stderr, "KeyboardInterrupt") || res.Stdout != "before\n" {
		t.Fatalf("timeout: status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
	}
	if res := sessionRun(t, r, "t", "kept", 0); res.Value != "1" || res.Session.New {
		t.Fatalf("after the interrupt: %q %+v", res.Value, res.Session)
	}
	res = sessionRun(t, r, "t", "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(600)", 10*time.Second)
	if res.Status != sandpit.StatusSessionLost || !res.Session.Lost || !strings.Contains(res.Session.LostReason, "did not stop") || !contains(res.Session.LostNames, "kept") {
		t.Fatalf("ignored interrupt: status %s session %+v", res.Status, res.Session)
	}
	if res := sessionRun(t, r, "t", "'kept' in globals()", 0); res.Value != "False" || !res.Session.New {
		t.Fatalf("after the loss: %q %+v", res.Value, res.Session)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// A session whose interpreter runs out of memory is lost, and says so.
func TestSessionOOM(t *testing.T) {
	r := newRuntime(t, func(c *runtime.Config) { c.Limits.MemoryBytes = 128 << 20 })
	sessionRun(t, r, "m", "data = list(range(10))", 0)
	res := sessionRun(t, r, "m", "x = []\nwhile True: x.append(bytearray(16 << 20))", 0)
	if res.Status != sandpit.StatusSessionLost || !res.Usage.OOMKilled || !strings.Contains(res.Session.LostReason, "ran out of memory") || !contains(res.Session.LostNames, "data") {
		t.Fatalf("oom: status %s usage %+v session %+v stderr %q", res.Status, res.Usage, res.Session, res.Stderr)
	}
}

// An idle session ends by itself.
func TestSessionIdleExpiry(t *testing.T) {
	r := newRuntime(t, withSessions(runtime.SessionConfig{Idle: time.Second}))
	sessionRun(t, r, "i", "v = 1", 0)
	testenv.Poll(testenv.Patience, func() bool { return len(r.Sessions()) == 0 })
	if n := len(r.Sessions()); n != 0 {
		t.Fatalf("%d sessions still open", n)
	}
	res := sessionRun(t, r, "i", "'v' in globals()", 0)
	if res.Value != "False" || !strings.Contains(res.Session.Previous, "idle") {
		t.Fatalf("after expiry: %q %+v", res.Value, res.Session)
	}
}

// Cancelling a session call interrupts it; the session lives on. Its
// output is seen live.
func TestSessionCancelAndLiveOutput(t *testing.T) {
	r := newRuntime(t)
	sessionRun(t, r, "c", "n = 0", 0)
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var live strings.Builder
	got := make(chan struct{})
	var once sync.Once
	req := sandpit.Request{Language: "python", Session: "c", Timeout: time.Minute,
		Code: "import time\nfor i in range(1000):\n    n += 1\n    print('tick', i)\n    time.sleep(0.1)",
		Output: func(s sandpit.Stream, p []byte) {
			mu.Lock()
			live.Write(p)
			mu.Unlock()
			once.Do(func() { close(got) })
		}}
	var res *sandpit.Result
	var err error
	done := make(chan struct{})
	go func() { res, err = r.Run(ctx, req); close(done) }()
	select {
	case <-got:
	case <-time.After(testenv.Patience):
		t.Fatal("no live output")
	}
	t0 := time.Now()
	cancel()
	<-done
	t.Logf("cancel to result: %s", time.Since(t0))
	if err != nil || res.Status != sandpit.StatusCancelled {
		t.Fatalf("cancelled call: %v %+v", err, res)
	}
	mu.Lock()
	if !strings.HasPrefix(res.Stdout, "tick 0\n") || !strings.HasPrefix(live.String(), "tick 0\n") {
		t.Errorf("stdout %q, live %q", res.Stdout, live.String())
	}
	mu.Unlock()
	if res := sessionRun(t, r, "c", "n > 0", 0); res.Value != "True" {
		t.Fatalf("after cancel: %q %q", res.Value, res.Stderr)
	}
}

// A call to a session that is running another is refused at once; a
// session runs only the languages with a REPL; a call's stdin and args are
// its own.
func TestSessionBusyLanguageAndStdin(t *testing.T) {
	r := newRuntime(t)
	sessionRun(t, r, "b", "import time", 0)
	done := make(chan *sandpit.Result)
	// Busy for 10 s: the second call below must come while it runs,
	// which 3 s did not promise on a loaded host.
	go func() {
		res, _ := r.Run(t.Context(), sandpit.Request{Language: "python", Session: "b", Code: "time.sleep(10)", Timeout: time.Minute})
		done <- res
	}()
	testenv.Eventually(t, "the first call to start", func() bool {
		s := r.Sessions()
		return len(s) == 1 && s[0].Running != ""
	})
	_, err := r.Run(t.Context(), sandpit.Request{Language: "python", Session: "b", Code: "1", Timeout: time.Minute})
	if !errors.Is(err, runtime.ErrSessionBusy) || !errors.Is(err, sandpit.ErrConflict) {
		t.Fatalf("a second call: %v", err)
	}
	if res := <-done; res.Status != sandpit.StatusSuccess {
		t.Fatalf("the first call: %+v", res)
	}
	if _, err := r.Run(t.Context(), sandpit.Request{Language: "c", Session: "b", Code: "int main(){}"}); !errors.Is(err, sandpit.ErrInvalidArgument) {
		t.Fatalf("a C session: %v", err)
	}
	res, err := r.Run(t.Context(), sandpit.Request{Language: "python", Session: "b", Timeout: time.Minute,
		Code: "import sys\n(input(), sys.argv[1:])", Stdin: []byte("typed\n"), Args: []string{"a", "b c"}})
	if err != nil || res.Value != "('typed', ['a', 'b c'])" {
		t.Fatalf("stdin and args: %v %+v", err, res)
	}
}

// A session ends at its age limit, in a call or not.
func TestSessionMaxAge(t *testing.T) {
	r := newRuntime(t, withSessions(runtime.SessionConfig{MaxAge: 4 * time.Second, Idle: 4 * time.Second}))
	sessionRun(t, r, "old", "v = 1", 0)
	res := sessionRun(t, r, "old", "import time\ntime.sleep(60)", 0)
	if res.Status != sandpit.StatusSessionLost || !strings.Contains(res.Session.LostReason, "age limit") {
		t.Fatalf("past the age limit: %s %+v", res.Status, res.Session)
	}
}

// The REPL runs the program's code, so its end lines are as untrusted as
// the program: code that finds its call's nonce and forges an end line gets
// its own forged result back, and nothing else; one that sends an end line
// past the bound loses its session. The server stays bounded and answers.
func TestSessionForgedEndLines(t *testing.T) {
	r := newRuntime(t)
	const findNonce = "import os, sys, time\nf = sys._getframe()\nwhile 'nonce' not in f.f_locals:\n    f = f.f_back\nn = f.f_locals['nonce']\n"
	res := sessionRun(t, r, "f", findNonce+"os.write(2, b'\\x00sandpit:end:' + n + b':\\n')\nos.write(1, b'\\x00sandpit:end:' + n + b':{\"status\": \"ok\", \"value\": \"forged\", \"names\": [\""+strings.Repeat("y", 300)+"\"]}\\n')\ntime.sleep(2)", 0)
	if res.Status != sandpit.StatusSuccess || res.Value != "forged" {
		t.Fatalf("forged end: %+v", res)
	}
	// The forging call is still sleeping: the next waits behind it.
	if res := sessionRun(t, r, "f", "'after'", 30*time.Second); res.Value != "'after'" {
		t.Fatalf("after a forged end: %+v", res)
	}
	res = sessionRun(t, r, "f", findNonce+"os.write(1, b'\\x00sandpit:end:' + n + b':' + b'x' * 400000 + b'\\n')\ntime.sleep(30)", 0)
	if res.Status != sandpit.StatusSessionLost || !strings.Contains(res.Session.LostReason, "protocol") {
		t.Fatalf("oversized end line: %+v %+v", res, res.Session)
	}
}

// Nothing in a session's sandbox can keep it alive past its server: the
// liveness FIFO cannot be opened for writing, and PID 1 (its reader)
// cannot be stopped or killed from inside. (A signal it handles, SIGTERM,
// ends it, and with it the session: harm to itself only.)
func TestSessionLivenessGuard(t *testing.T) {
	r := newRuntime(t)
	res := sessionRun(t, r, "g", `import os, signal
out = []
try:
    os.open('/sandpit/src/alive', os.O_WRONLY | os.O_NONBLOCK)
    out.append('UNSAFE: opened for writing')
except PermissionError:
    out.append('write refused')
try:
    os.chmod('/sandpit/src/alive', 0o666)
    out.append('UNSAFE: chmod')
except OSError:
    out.append('chmod refused')
for sig in (signal.SIGSTOP, signal.SIGKILL):
    try:
        os.kill(1, sig)
    except OSError as e:
        out.append(str(e))
open('/proc/1/status').read().count('State:\tS') or out.append('UNSAFE: PID 1 not sleeping')
out`, 0)
	if res.Status != sandpit.StatusSuccess || strings.Contains(res.Value, "UNSAFE") || !strings.Contains(res.Value, "write refused") || !strings.Contains(res.Value, "chmod refused") {
		t.Fatalf("liveness guard: %+v", res)
	}
	if res := sessionRun(t, r, "g", "'alive'", 0); res.Value != "'alive'" {
		t.Fatalf("the session after signals to PID 1: %+v", res)
	}
}

// A bash session keeps its variables, functions and directory; a call past
// its timeout is interrupted and the shell lives on.
func TestSessionBash(t *testing.T) {
	// A grace and a timeout a loaded host's shell cannot miss.
	r := newRuntime(t, withSessions(runtime.SessionConfig{Grace: 20 * time.Second}))
	run := func(code string, timeout time.Duration, stdin string) *sandpit.Result {
		t.Helper()
		res, err := r.Run(t.Context(), sandpit.Request{Language: "bash", Session: "sh", Code: code, Timeout: timeout, Stdin: []byte(stdin)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run("count=1\ngreet() { echo \"hi $1\"; }\nmkdir -p /tmp/d && cd /tmp/d", time.Minute, ""); res.Status != sandpit.StatusSuccess {
		t.Fatalf("first call: %+v", res)
	}
	res := run("count=$((count + 1))\ngreet \"$count\"\npwd\nread line; echo \"read $line\"", time.Minute, "typed\n")
	if res.Status != sandpit.StatusSuccess || res.Stdout != "hi 2\n/tmp/d\nread typed\n" {
		t.Fatalf("second call: %+v", res)
	}
	if res := run("false", time.Minute, ""); res.Status != sandpit.StatusError || res.ExitCode != 1 {
		t.Fatalf("a failing call: %+v", res)
	}
	res = run("echo before\nsleep 600\necho NOT-REACHED", 10*time.Second, "")
	if res.Status != sandpit.StatusTimeout || res.Stdout != "before\n" {
		t.Fatalf("timeout: %+v", res)
	}
	if res := run("echo $count", time.Minute, ""); res.Stdout != "2\n" {
		t.Fatalf("after the interrupt: %+v", res)
	}
	infos := r.Sessions()
	if len(infos) != 1 || !contains(infos[0].Names, "count") || contains(infos[0].Names, "BASH_VERSION") {
		t.Fatalf("names: %+v", infos)
	}
}

// A cancel that lands before the call reaches the user's code (even before
// the call is sent) stops the call, never the session.
//
// The grace is the longest allowed: a cancel that was lost waits it out and
// loses the session; a loaded host's interpreter must not (2 s by default).
func TestSessionCancelEarly(t *testing.T) {
	r := newRuntime(t, withSessions(runtime.SessionConfig{Grace: time.Minute}))
	sessionRun(t, r, "e", "kept = 1\nimport time", 0)
	for i := 0; i < 8; i++ {
		ctx, cancel := context.WithCancel(t.Context())
		if i == 0 {
			cancel()
		} else {
			time.AfterFunc(time.Duration(i-1)*time.Millisecond, cancel)
		}
		res, err := r.Run(ctx, sandpit.Request{Language: "python", Session: "e", Code: "time.sleep(30)", Timeout: time.Minute})
		cancel()
		if err != nil {
			t.Fatalf("cancel after %d ms: %v", i-1, err)
		}
		if res.Status != sandpit.StatusCancelled {
			t.Fatalf("cancel after %d ms: %s %+v", i-1, res.Status, res.Session)
		}
	}
	if res := sessionRun(t, r, "e", "kept", 0); res.Value != "1" || res.Session.New {
		t.Fatalf("the session after early cancels: %+v", res)
	}
}

// Cancels at 0–4 ms, 300 times in one session: each ends the call as
// cancelled and the session lives on. One SIGINT could be lost when it
// landed just before the program's time.sleep entered its system call
// (the handler ran only when the sleep returned): the session was lost
// after the grace, 1 to 3 times in 1000 calls on a loaded host.
//
// The grace is the longest allowed, as in TestSessionCancelEarly.
func TestSessionCancelSoak(t *testing.T) {
	r := newRuntime(t, withSessions(runtime.SessionConfig{Grace: time.Minute}))
	sessionRun(t, r, "soak", "kept = 1\nimport time", 0)
	for i := range 300 {
		ctx, cancel := context.WithCancel(t.Context())
		after := time.Duration(i%40) * 100 * time.Microsecond
		time.AfterFunc(after, cancel)
		res, err := r.Run(ctx, sandpit.Request{Language: "python", Session: "soak", Code: "time.sleep(30)", Timeout: time.Minute})
		cancel()
		if err != nil {
			t.Fatalf("call %d, cancelled after %s: %v", i, after, err)
		}
		if res.Status != sandpit.StatusCancelled {
			t.Fatalf("call %d, cancelled after %s: %s %+v", i, after, res.Status, res.Session)
		}
	}
	if res := sessionRun(t, r, "soak", "kept", 0); res.Value != "1" || res.Session.New {
		t.Fatalf("the session after 300 cancels: %+v", res)
	}
}

// A session call's usage is its own: the CPU it burned and (cgroup v1,
// where the peak can be reset) the memory it peaked at, read from the
// session's cgroup before and after the call.
func TestSessionCallUsage(t *testing.T) {
	r := newRuntime(t, withPool(1, time.Minute))
	sessionRun(t, r, "u", "x = 0", 0)
	busy := sessionRun(t, r, "u", "b = b'x' * (64 << 20)\ns = sum(range(3 * 10**7))", 0)
	if busy.Status != sandpit.StatusSuccess {
		t.Fatalf("busy call: %+v", busy)
	}
	if cpu := busy.Usage.CPUUserMS + busy.Usage.CPUSystemMS; cpu < 50 {
		t.Errorf("busy call used %d ms of CPU, want ≥ 50 (usage %+v)", cpu, busy.Usage)
	}
	if busy.Usage.MemoryPeakBytes < 64<<20 {
		t.Errorf("busy call peaked at %d bytes, want ≥ 64 MiB", busy.Usage.MemoryPeakBytes)
	}
	idle := sessionRun(t, r, "u", "x += 1", 0)
	if cpu := idle.Usage.CPUUserMS + idle.Usage.CPUSystemMS; cpu >= 50 {
		t.Errorf("an idle call after a busy one used %d ms of CPU: the busy call's counted again", cpu)
	}
	if idle.Usage.PidsCurrent == 0 {
		t.Errorf("idle call: no processes counted (usage %+v)", idle.Usage)
	}
}

// Under --cgroup-parent a session's cgroup is <parent>/<id>, and its calls'
// usage is read from there (it was read from /<namespace>/<id>: zero).
func TestSessionCallUsageUnderCgroupParent(t *testing.T) {
	parent := fmt.Sprintf("sandpit-test-parent-%d", os.Getpid())
	t.Cleanup(func() {
		for _, m := range host.CgroupMounts() {
			os.Remove(filepath.Join(m.Point, parent))
		}
	})
	r := newRuntime(t, func(c *runtime.Config) { c.CgroupParent = parent })
	sessionRun(t, r, "p", "x = 0", 0)
	busy := sessionRun(t, r, "p", "s = sum(range(3 * 10**7))", 0)
	if cpu := busy.Usage.CPUUserMS + busy.Usage.CPUSystemMS; cpu < 50 {
		t.Errorf("busy call under a cgroup parent used %d ms of CPU, want ≥ 50 (usage %+v)", cpu, busy.Usage)
	}
	infos := r.Sessions()
	if len(infos) != 1 || infos[0].MemoryBytes == 0 {
		t.Errorf("Sessions under a cgroup parent: %+v", infos)
	}
}

// A session belongs to its tenant: another tenant's session of the same
// name is another sandbox, is not listed, cannot be closed, and the limit
// one tenant reaches is its own (issue 25).
func TestSessionTenants(t *testing.T) {
	r := newRuntime(t, withSessions(runtime.SessionConfig{Max: 3, PerTenant: 2}))
	a, b := r.ForTenant("alice"), r.ForTenant("bob")
	run := func(tn *runtime.Tenant, session, code string) (*sandpit.Result, error) {
		return tn.Run(t.Context(), sandpit.Request{Language: "python", Session: session, Code: code, Timeout: time.Minute})
	}
	res, err := run(a, "s", "secret = 'alice'")
	if err != nil || !res.Session.New {
		t.Fatalf("alice's first call: %v %+v", err, res)
	}
	res, err = run(b, "s", "'secret' in globals()")
	if err != nil || !res.Session.New || res.Value != "False" || res.Session.Previous != "" {
		t.Fatalf("bob's session s must be his own and new: %v %+v", err, res)
	}
	if got := b.Sessions(); len(got) != 1 || got[0].Name != "s" || got[0].Tenant != "bob" {
		t.Fatalf("bob's sessions: %+v", got)
	}
	if got := r.Sessions(); len(got) != 0 {
		t.Fatalf("the stdio client's sessions list tenants' sessions: %+v", got)
	}
	if got := r.AllSessions(); len(got) != 2 || got[0].Tenant != "alice" || got[1].Tenant != "bob" {
		t.Fatalf("all sessions: %+v", got)
	}
	// bob closes his s; alice's s lives on with its state.
	if _, err := b.CloseSession(t.Context(), "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CloseSession(t.Context(), "s"); !errors.Is(err, runtime.ErrNoSession) || strings.Contains(err.Error(), "alice") {
		t.Fatalf("bob closing s again: %v", err)
	}
	if res, err := run(a, "s", "secret"); err != nil || res.Session.New || res.Value != "'alice'" {
		t.Fatalf("alice's session after bob's close: %v %+v", err, res)
	}
	// Per tenant: alice's second is allowed, her third is not, and the
	// error names only hers.
	if _, err := run(a, "t", "1"); err != nil {
		t.Fatal(err)
	}
	_, err = run(a, "u", "1")
	if !errors.Is(err, runtime.ErrSessionLimit) || !strings.Contains(err.Error(), "s, t") {
		t.Fatalf("alice's third session: %v", err)
	}
	// bob's first fits (3 open of the server's 3); his second hits the
	// server's limit, and does not learn alice's names.
	if _, err := run(b, "x", "1"); err != nil {
		t.Fatal(err)
	}
	_, err = run(b, "y", "1")
	if !errors.Is(err, runtime.ErrSessionLimit) || strings.Contains(err.Error(), "t,") || strings.Contains(err.Error(), "alice") {
		t.Fatalf("bob past the server's limit: %v", err)
	}
}
