package querydb

import (
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// peak is what a call cost the process: the Go heap's growth (sampled) and
// the resident set's growth (from VmHWM, reset before the call), which also
// counts SQLite's C heap.
type peak struct{ heap, rss int64 }

func (p peak) String() string {
	return "Go heap +" + strconv.FormatInt(p.heap>>20, 10) + " MiB, RSS +" + strconv.FormatInt(p.rss>>20, 10) + " MiB"
}

// measure runs f and reports its peak memory growth. Tests that use it must
// not run in parallel with others in the package.
func measure(t testing.TB, f func()) peak {
	t.Helper()
	goruntime.GC()
	var base goruntime.MemStats
	goruntime.ReadMemStats(&base)
	// Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
	resetHWM := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	rss0 := statusKB(t, "VmRSS")
	var top atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var m goruntime.MemStats
		for {
			goruntime.ReadMemStats(&m)
			if m.HeapAlloc > top.Load() {
				top.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-done
	p := peak{heap: max(0, int64(top.Load())-int64(base.HeapAlloc))}
	if resetHWM {
		p.rss = max(0, statusKB(t, "VmHWM")-rss0) << 10
	}
	return p
}

// statusKB reads a kB field of /proc/self/status.
func statusKB(t testing.TB, field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}
