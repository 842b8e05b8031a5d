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
