package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// WaitProcessNamed waits, up to Patience, for a host process whose name
// (comm) is name. A sandboxed program signals that it got somewhere by
// writing its own /proc/self/comm (at most 15 bytes), so a test can act on
// that instead of on a pause that a loaded host outlasts.
func WaitProcessNamed(t testing.TB, name string) {
	t.Helper()
	for deadline := time.Now().Add(Patience); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		comms, _ := filepath.Glob("/proc/[0-9]*/comm")
		for _, p := range comms {
			if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == name {
				return
			}
		}
	}
	t.Fatalf("no process named %s within %v", name, Patience)
}
