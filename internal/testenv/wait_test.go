package testenv

import (
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	n := 0
	if !Poll(time.Minute, func() bool { n++; return n == 5 }) {
		t.Fatal("Poll gave up on a condition that came true")
	}
	if n != 5 {
		t.Fatalf("Poll called ok %d times after it held, want it to stop at 5", n)
	}
	calls := 0
	if Poll(10*time.Millisecond, func() bool { calls++; return false }) {
		t.Fatal("Poll reported a condition that never held")
	}
	if calls < 2 {
		t.Fatalf("Poll did not look again at the deadline: %d calls", calls)
	}
}

func TestCPUTime(t *testing.T) {
	before := CPUTime(t)
	time.Sleep(50 * time.Millisecond)
	if slept := CPUTime(t) - before; slept >= 50*time.Millisecond {
		t.Errorf("sleeping 50 ms counted %v of CPU", slept)
	}
	// Spinning counts, however little of the CPU the host gives us.
	spin := func() bool {
		for start := time.Now(); time.Since(start) < 10*time.Millisecond; {
		}
		return CPUTime(t)-before >= 20*time.Millisecond
	}
	if !Poll(Patience, spin) {
		t.Errorf("spinning for %v counted %v of CPU", Patience, CPUTime(t)-before)
	}
}
