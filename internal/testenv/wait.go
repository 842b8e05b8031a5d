package testenv

import (
	"testing"
	"time"
)

// Patience is how long a test waits for a state it expects: long enough
// that a shared 2-core CI machine at load 20 reaches it, so that only a
// state that never comes fails the test. A test never bets on a speed.
const Patience = 2 * time.Minute

// Poll calls ok until it reports true or timeout has passed, and reports
// whether it did; ok is called once more at the deadline, so a slow
// machine that reaches the state late still counts. It polls often at
// first (most states come quickly) and backs off to a few times a second.
func Poll(timeout time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(timeout)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return ok()
		}
		time.Sleep(pause)
	}
}

// Eventually waits, up to Patience, until ok reports true, and fails the
// test (naming what it waited for) if it never does.
func Eventually(t testing.TB, what string, ok func() bool) {
	t.Helper()
	if !Poll(Patience, ok) {
		t.Fatalf("waited %v for %s", Patience, what)
	}
}
