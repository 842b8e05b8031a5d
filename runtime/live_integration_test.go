package runtime_test

import (
	"context"
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

// Request.WatchUsage reads a run's CPU time and memory while it runs,
// pooled or cold: a program that spins until it is stopped is stopped by
// the watcher once it has seen 200 ms of its CPU time; a run the watcher
// never sees growing ends by its timeout instead, and fails the test.
func TestWatchUsage(t *testing.T) {
	for _, mode := range []struct {
		name string
		mod  func(*runtime.Config)
	}{{"cold", func(*runtime.Config) {}}, {"pooled", withPool(1, time.Minute)}} {
		t.Run(mode.name, func(t *testing.T) {
			r := newRuntime(t, mode.mod)
			if mode.name == "pooled" {
				waitReady(t, r, "python", 1)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			seen := make(chan sandpit.Usage, 1)
			watch := func(read func() sandpit.Usage) {
				go func() {
					for ctx.Err() == nil {
						if u := read(); u.CPUUserMS+u.CPUSystemMS >= 200 && u.MemoryPeakBytes > 0 {
							seen <- u
							cancel()
							return
						}
						time.Sleep(50 * time.Millisecond)
					}
				}()
			}
			res, err := r.Run(ctx, sandpit.Request{Language: "python", Code: "while True:\n    pass", Timeout: 2 * time.Minute, WatchUsage: watch})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != sandpit.StatusCancelled {
				t.Fatalf("the spinning run ended %s, not cancelled by its watcher (usage %+v)", res.Status, res.Usage)
			}
			u := <-seen
			if got, total := u.CPUUserMS+u.CPUSystemMS, res.Usage.CPUUserMS+res.Usage.CPUSystemMS; total > 0 && got > total+50 {
				t.Errorf("CPU seen while running %d ms, more than the result's %d ms", got, total)
			}
		})
	}
}
