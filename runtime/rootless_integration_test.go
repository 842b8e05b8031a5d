package runtime_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/runtime"
)

// TestRootlessRefusesUnenforceableLimits: on a host where rootless runc
// cannot create cgroups (cgroup v1 or hybrid, like CI's), a rootless runtime
// refuses to run code unless the operator opts in.
func TestRootlessRefusesUnenforceableLimits(t *testing.T) {
	if ok, reason := runtime.RootlessCgroups(testenv.Containerd(t)); ok {
		t.Skipf("this host can enforce limits rootless (%s); the refusal cannot be observed", reason)
	}
	r := newRuntime(t, func(c *runtime.Config) { c.Rootless = true })
	_, err := r.Run(t.Context(), sandpit.Request{Language: "python", Code: "print(1)"})
	if !errors.Is(err, runtime.ErrLimitsUnenforceable) || !strings.Contains(sandpit.Describe(err), "--allow-unenforced-limits") {
		t.Fatalf("err = %v, want ErrLimitsUnenforceable with the opt-in named", err)
	}
}

// TestUnenforcedLimitsFallback runs the opt-in fallback (no cgroup limits,
// rlimits instead) against the test containerd, and checks that the result
// says what was not enforced and that the rlimit fallbacks hold.
func TestUnenforcedLimitsFallback(t *testing.T) {
	if ok, _ := runtime.RootlessCgroups(testenv.Containerd(t)); ok {
		t.Skip("this host can enforce limits rootless: no fallback is used")
	}
	r := newRuntime(t, func(c *runtime.Config) {
		c.Rootless, c.AllowUnenforcedLimits = true, true
		c.Limits.MemoryBytes = 256 << 20
	})
	tests := []struct {
		name, lang, code, want string
	}{
		{"runs", "python", "print('hello')", "hello"},
		{"address space capped", "python", "try:\n    x = bytearray(400 << 20)\n    print('UNSAFE allocated')\nexcept MemoryError:\n    print('blocked MemoryError')\n", "blocked MemoryError"},
		{"process count capped", "python", `import os, time, errno
n = 0
try:
    for n in range(1, 1000):
        if os.fork() == 0:
            time.sleep(20); os._exit(0)
except OSError as e:
    print("blocked after", n, errno.errorcode[e.errno])
`, "blocked after"},
		{"cpu rlimit set", "bash", "ulimit -t", "120"},
		{"c still compiles", "c", "#include <stdio.h>\nint main(void){puts(\"built\");}\n", "built"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, sandpit.Request{Language: tt.lang, Code: tt.code})
			if !strings.Contains(res.Stdout, tt.want) || strings.Contains(res.Stdout, "UNSAFE") {
				t.Errorf("stdout %q stderr %q status %s, want %q", res.Stdout, res.Stderr, res.Status, tt.want)
			}
			if len(res.Limits.Unenforced) != 3 {
				t.Errorf("result lists unenforced limits %q, want memory, pids and cpu", res.Limits.Unenforced)
			}
		})
	}
}
