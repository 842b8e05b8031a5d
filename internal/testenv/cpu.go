package testenv

import (
	"syscall"
	"testing"
	"time"
)

// CPUTime is the CPU time this process has used so far, user and system,
// all threads. A test that bounds how much work a call does compares this
// before and after, not the wall clock: a loaded host stretches the wall
// clock many times over, the work a call does hardly at all.
func CPUTime(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
