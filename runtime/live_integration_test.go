package runtime_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/runtime"
)

// Request.Output sees what the program writes while it runs, and exactly
// what the result keeps: pooled or cold, interpreted or compiled, never
// the waiter's own lines.
func TestLiveOutput(t *testing.T) {
	for _, mode := range []struct {
		name string
		mod  func(*runtime.Config)
	}{{"cold", func(*runtime.Config) {}}, {"pooled", withPool(1, time.Minute)}} {
		t.Run(mode.name, func(t *testing.T) {
			r := newRuntime(t, mode.mod)
			if mode.name == "pooled" {
				waitReady(t, r, "python", 1)
			}
			for _, tt := range []struct{ lang, code string }{
				{"python", "import sys, time\nprint('a', flush=True)\ntime.sleep(0.3)\nsys.stderr.write('e\\n')\nprint('b')"},
				{"c", "#include <stdio.h>\nint main(void){puts(\"c1\"); fflush(stdout); fputs(\"ce\\n\", stderr); return 0;}"},
				{"bash", "echo sh1; echo sh2 >&2"},
			} {
				var mu sync.Mutex
				live := map[sandpit.Stream]*strings.Builder{sandpit.Stdout: {}, sandpit.Stderr: {}}
				res := run(t, r, sandpit.Request{Language: tt.lang, Code: tt.code, Output: func(s sandpit.Stream, p []byte) {
					mu.Lock()
					defer mu.Unlock()
					live[s].Write(p)
				}})
				mu.Lock()
				if res.Status != sandpit.StatusSuccess || live[sandpit.Stdout].String() != res.Stdout || live[sandpit.Stderr].String() != res.Stderr {
					t.Errorf("%s: status %s, stdout %q live %q, stderr %q live %q", tt.lang, res.Status, res.Stdout, live[sandpit.Stdout], res.Stderr, live[sandpit.Stderr])
				}
				mu.Unlock()
			}
		})
	}
}
