package quota

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// waitFor waits until n runs of tenant wait.
func waitFor(t *testing.T, s *Slots, tenant string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for s.Usage(tenant).Waiting != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d waiting, want %d", tenant, s.Usage(tenant).Waiting, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSlotsPerTenantCap(t *testing.T) {
	s := NewSlots(2, 1, 0)
	relA, err := s.Acquire(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	// a is at its cap: its second waits, while b is served at once.
	got := make(chan func(), 1)
	go func() {
		r, err := s.Acquire(context.Background(), "a")
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	waitFor(t, s, "a", 1)
	relB, err := s.Acquire(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("a's second run got a slot while its first held one")
	default:
	}
	relA()
	(<-got)()
	relB()
	if u := s.Usage("a"); u != (Usage{}) || s.inUse != 0 {
		t.Fatalf("after all released: %+v inUse %d", u, s.inUse)
	}
}

// One tenant with many runs queued and another with one: the other's run
// is served within one turn, not after the whole queue (issue 25: one
// tenant flooding cannot starve another).
func TestSlotsTakeTurns(t *testing.T) {
	s := NewSlots(1, 1, 0)
	hold, _ := s.Acquire(t.Context(), "flood")
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	start := func(tenant string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel, err := s.Acquire(context.Background(), tenant)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, tenant)
			mu.Unlock()
			rel()
		}()
	}
	for i := range 8 {
		start("flood")
		waitFor(t, s, "flood", i+1)
	}
	start("quiet")
	waitFor(t, s, "quiet", 1)
	hold()
	wg.Wait()
	pos := -1
	for i, tn := range order {
		if tn == "quiet" {
			pos = i
		}
	}
	if pos < 0 || pos > 1 {
		t.Fatalf("quiet served at position %d of %v: it waited behind the flood", pos, order)
	}
}

func TestSlotsBoundedQueue(t *testing.T) {
	s := NewSlots(1, 1, 2)
	rel, _ := s.Acquire(t.Context(), "a")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for i := range 2 {
		go s.Acquire(ctx, "a") //nolint:errcheck // cancelled below
		waitFor(t, s, "a", i+1)
	}
	_, err := s.Acquire(ctx, "a")
	if !errors.Is(err, ErrBusy) || !errors.Is(err, sandpit.ErrResourceExhausted) {
		t.Fatalf("third waiter: %v", err)
	}
	// Another tenant's queue is its own.
	go s.Acquire(ctx, "b") //nolint:errcheck
	waitFor(t, s, "b", 1)
	cancel()
	waitFor(t, s, "a", 0)
	waitFor(t, s, "b", 0)
	rel()
	if s.inUse != 0 || len(s.queue) != 0 || s.turn.Len() != 0 {
		t.Fatalf("left: inUse %d queues %d turn %d", s.inUse, len(s.queue), s.turn.Len())
	}
}

// A waiter whose context ends gives up its place; a slot granted to it as
// it gave up goes on to the next.
func TestSlotsCancelledWaiter(t *testing.T) {
	for range 200 {
		s := NewSlots(1, 1, 0)
		rel, _ := s.Acquire(t.Context(), "a")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			r, err := s.Acquire(ctx, "b")
			if err == nil {
				r()
			}
			done <- err
		}()
		waitFor(t, s, "b", 1)
		go cancel()
		rel() // races with the cancel
		<-done
		r, err := s.Acquire(t.Context(), "c")
		if err != nil {
			t.Fatal(err)
		}
		r()
		if s.inUse != 0 || len(s.held) != 0 {
			t.Fatalf("slots leaked: inUse %d held %v", s.inUse, s.held)
		}
	}
}

func TestCPUBudget(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC)
	c := NewCPU(time.Minute)
	c.now = func() time.Time { return now }
	if err := c.Admit("a"); err != nil {
		t.Fatal(err)
	}
	c.Charge("a", 50*time.Second)
	now = now.Add(10 * time.Minute)
	if err := c.Admit("a"); err != nil {
		t.Fatalf("50 s of 60: %v", err)
	}
	c.Charge("a", 20*time.Second)
	err := c.Admit("a")
	if !errors.Is(err, ErrCPUQuota) || !strings.Contains(err.Error(), "1m10s") {
		t.Fatalf("70 s of 60: %v", err)
	}
	// The 50 s of 10:00 age out at 11:00; then 20 s remain.
	if h := sandpit.HintOf(err); !strings.Contains(h, "11:00") {
		t.Fatalf("hint %q should say 11:00", h)
	}
	if err := c.Admit("b"); err != nil {
		t.Fatalf("b's budget is its own: %v", err)
	}
	now = time.Date(2026, 12, 2, 11, 0, 1, 0, time.UTC)
	if err := c.Admit("a"); err != nil || c.Used("a") != 20*time.Second {
		t.Fatalf("an hour on: %v, used %s", err, c.Used("a"))
	}
	now = now.Add(time.Hour)
	if c.Used("a") != 0 {
		t.Fatalf("two hours on: used %s", c.Used("a"))
	}
}
