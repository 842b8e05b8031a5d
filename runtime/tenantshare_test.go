package runtime

import (
	"testing"
	"time"
)

func TestTenantActivityYield(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	var a tenantActivity
	// Alone: a tenant's concurrent runs never yield.
	for range 2 {
		if a.begin("a", t0) {
			t.Fatal("a alone yielded")
		}
	}
	// b ran a moment ago: a's next concurrent run leaves b the last one.
	if a.begin("b", t0) {
		t.Fatal("b's first run yielded")
	}
	a.end("b")
	if !a.begin("a", t0.Add(time.Second)) {
		t.Fatal("a's third run beside b (active 1 s ago) did not yield")
	}
	// b's single run never yields, however busy a is.
	if a.begin("b", t0.Add(2*time.Second)) {
		t.Fatal("b's one run yielded to busy a")
	}
	a.end("b")
	// A minute on, b is gone: a stops yielding, and b is forgotten.
	if a.begin("a", t0.Add(2*time.Minute)) {
		t.Fatal("a yielded to a tenant idle for two minutes")
	}
	if _, ok := a.lastSeen["b"]; ok {
		t.Fatal("an idle tenant is kept")
	}
	for range 4 {
		a.end("a")
	}
	if len(a.inflight) != 0 {
		t.Fatalf("in flight left: %v", a.inflight)
	}
	// The stdio client is never held back and never counted.
	for range 2 {
		if a.begin("", t0) || len(a.inflight) != 0 {
			t.Fatal("tenant \"\" counted")
		}
	}
}
