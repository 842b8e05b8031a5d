package runtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/runtime"
)

// TestProgramsRunUnderInit checks what running a program as PID 1 of its
// namespace would get wrong: the kernel drops signals PID 1 has no handler
// for, so a failed C assert() (abort, SIGABRT) would die of SIGSEGV and a
// program could not terminate itself with SIGTERM. Cold and pooled runs
// both go through sandpit's init and must behave like a program on a
// normal host.
func TestProgramsRunUnderInit(t *testing.T) {
	// Each child forks a grandchild and exits (and is reaped by the
	// program): the grandchildren become orphans of PID 1, which must reap
	// them when they exit.
	const orphans = `import os, time
for _ in range(5):
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
for _ in range(50):
    time.sleep(0.05)
    z = 0
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[0] == "Z":
                z += 1
        except OSError:
            pass
    if z == 0:
        break
print("zombies", z)`
	runtimes := map[string]*runtime.Runtime{
		"cold": newRuntime(t),
		"warm": newRuntime(t, withPool(1, time.Minute)),
	}
	tests := []struct {
		name   string
		req    sandpit.Request
		status sandpit.Status
		exit   int
		stdout string
		stderr string // a substring
	}{
		{"c assert is SIGABRT", sandpit.Request{Language: "c", Code: "#include <assert.h>\nint main(void) { assert(1 == 2); return 0; }\n"},
			sandpit.StatusError, 134, "", "Assertion `1 == 2' failed"},
		{"cpp uncaught exception is SIGABRT", sandpit.Request{Language: "cpp", Code: "#include <stdexcept>\nint main() { throw std::runtime_error(\"boom\"); }\n"},
			sandpit.StatusError, 134, "", "boom"},
		{"python SIGTERM to itself", sandpit.Request{Language: "python", Code: "import os, signal\nprint('before', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)\nprint('still alive')"},
			sandpit.StatusError, 143, "before\n", ""},
		{"bash kill -TERM $$", sandpit.Request{Language: "bash", Code: "echo before; kill -TERM $$; echo still alive"},
			sandpit.StatusError, 143, "before\n", ""},
		{"not PID 1, parent is init", sandpit.Request{Language: "python", Code: "import os; print(os.getpid() != 1, os.getppid())"},
			sandpit.StatusSuccess, 0, "True 1\n", ""},
		{"exit code passes through", sandpit.Request{Language: "c", Code: "int main(void) { return 42; }"},
			sandpit.StatusError, 42, "", ""},
		{"SIGINT is KeyboardInterrupt", sandpit.Request{Language: "python", Code: "import os, signal, time\ntry:\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(5)\nexcept KeyboardInterrupt:\n    print('interrupted')"},
			sandpit.StatusSuccess, 0, "interrupted\n", ""},
		{"orphans are reaped", sandpit.Request{Language: "python", Code: orphans},
			sandpit.StatusSuccess, 0, "zombies 0\n", ""},
	}
	for name, r := range runtimes {
		t.Run(name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					if name == "warm" {
						waitReady(t, r, tt.req.Language, 1)
					}
					res := run(t, r, tt.req)
					if res.Status != tt.status || res.ExitCode != tt.exit {
						t.Errorf("status/exit = %s/%d, want %s/%d (stderr %q)", res.Status, res.ExitCode, tt.status, tt.exit, res.Stderr)
					}
					if res.Stdout != tt.stdout {
						t.Errorf("stdout = %q, want %q", res.Stdout, tt.stdout)
					}
					if !strings.Contains(res.Stderr, tt.stderr) {
						t.Errorf("stderr = %q, want it to contain %q", res.Stderr, tt.stderr)
					}
				})
			}
		})
	}
	if st := runtimes["warm"].PoolStats()["python"]; st.Claimed == 0 {
		t.Errorf("no warm run was served from the pool: %+v", st)
	}
}

// The environment a program gets is the same cold and pooled. Under
// sandpit's shim the two go through different inits (the loader's built-in
// one, and the script with the waiter), whose environment rules must agree.
func TestInitEnvironmentSame(t *testing.T) {
	cold := newRuntime(t)
	warm := newRuntime(t, withPool(1, time.Minute))
	for _, req := range []sandpit.Request{
		{Language: "python", Code: "import os\nfor k, v in sorted(os.environ.items()): print(k, v)"},
		{Language: "bash", Code: "env | LC_ALL=C sort"},
		{Language: "c", Code: "#include <stdio.h>\nextern char **environ;\nint main(void) { for (char **e = environ; *e; e++) puts(*e); return 0; }"},
	} {
		t.Run(req.Language, func(t *testing.T) {
			waitReady(t, warm, req.Language, 1)
			c, w := run(t, cold, req), run(t, warm, req)
			if c.Status != sandpit.StatusSuccess || w.Status != sandpit.StatusSuccess {
				t.Fatalf("cold %s %q, warm %s %q", c.Status, c.Stderr, w.Status, w.Stderr)
			}
			cs, ws := c.Stdout, w.Stdout
			if req.Language == "c" {
				// Known: a compiled program run by the cold build step has no
				// "_", a pooled one the waiter's (runtime.buildScript).
				cs, ws = dropLine(cs, "_="), dropLine(ws, "_=")
			}
			if cs != ws {
				t.Errorf("environment differs:\ncold:\n%s\nwarm:\n%s", c.Stdout, w.Stdout)
			}
		})
	}
}

func dropLine(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
