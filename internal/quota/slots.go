// Package quota shares one server's capacity among its tenants: run slots
// handed out fairly (no tenant holds more than its cap, and waiting tenants
// take turns, so one tenant flooding the server cannot starve another) and
// a CPU-time budget per tenant over a sliding hour. It knows tenants only
// by name and runs only by their cost; it runs nothing itself.
package quota

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/sandpit-dev/sandpit"
)

// ErrBusy: a tenant already has as many runs waiting as it may queue.
var ErrBusy = sandpit.Define(sandpit.ErrResourceExhausted, "too many runs waiting")

// Slots bounds the runs in flight: Capacity in all, PerTenant for any one
// tenant, and MaxWaiting queued per tenant beyond those. A freed slot goes
// to the next tenant in turn that has a run waiting and is under its cap
// (round robin over tenants, first come first served within one).
type Slots struct {
	capacity, perTenant, maxWaiting int

	mu    sync.Mutex
	inUse int
	held  map[string]int
	queue map[string]*list.List // of *waiter
	turn  *list.List            // tenants with waiters, in turn order
	where map[string]*list.Element
}

type waiter struct {
	ready   chan struct{}
	granted bool
}

// NewSlots returns slots for capacity runs, at most perTenant of one
// tenant's (0: capacity), maxWaiting of a tenant's queued (0: 64).
func NewSlots(capacity, perTenant, maxWaiting int) *Slots {
	if capacity < 1 {
		capacity = 1
	}
	if perTenant <= 0 || perTenant > capacity {
		perTenant = capacity
	}
	if maxWaiting <= 0 {
		maxWaiting = 64
	}
	return &Slots{capacity: capacity, perTenant: perTenant, maxWaiting: maxWaiting,
		held: map[string]int{}, queue: map[string]*list.List{}, turn: list.New(), where: map[string]*list.Element{}}
}

// Acquire waits for a slot for tenant, or for ctx. The release it returns
// must be called exactly once when the run is over.
func (s *Slots) Acquire(ctx context.Context, tenant string) (release func(), err error) {
	s.mu.Lock()
	if s.inUse < s.capacity && s.held[tenant] < s.perTenant && s.queue[tenant] == nil {
		s.take(tenant)
		s.mu.Unlock()
		return s.releaser(tenant), nil
	}
	q := s.queue[tenant]
	if q == nil {
		q = list.New()
		s.queue[tenant] = q
		s.where[tenant] = s.turn.PushBack(tenant)
	}
	if q.Len() >= s.maxWaiting {
		s.mu.Unlock()
		return nil, sandpit.Hintf(fmt.Errorf("%w: %d of your runs are already waiting for a slot", ErrBusy, s.maxWaiting),
			"wait for some to finish before sending more")
	}
	w := &waiter{ready: make(chan struct{})}
	e := q.PushBack(w)
	s.mu.Unlock()

	select {
	case <-w.ready:
		return s.releaser(tenant), nil
	case <-ctx.Done():
		s.mu.Lock()
		if w.granted { // granted as ctx ended: hand it on
			s.mu.Unlock()
			s.releaser(tenant)()
			return nil, ctx.Err()
		}
		q.Remove(e)
		s.dropIfEmpty(tenant)
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

func (s *Slots) take(tenant string) {
	s.inUse++
	s.held[tenant]++
}

func (s *Slots) releaser(tenant string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.inUse--
			if s.held[tenant]--; s.held[tenant] == 0 {
				delete(s.held, tenant)
			}
			s.grant()
		})
	}
}

// grant hands free slots to waiters, one tenant's turn at a time. s.mu is held.
func (s *Slots) grant() {
	for s.inUse < s.capacity {
		var next *list.Element
		for e := s.turn.Front(); e != nil; e = e.Next() {
			if s.held[e.Value.(string)] < s.perTenant {
				next = e
				break
			}
		}
		if next == nil {
			return // every waiting tenant is at its cap
		}
		tenant := next.Value.(string)
		q := s.queue[tenant]
		w := q.Remove(q.Front()).(*waiter)
		w.granted = true
		s.take(tenant)
		close(w.ready)
		// Its turn is used: to the back of the line, or out of it.
		if !s.dropIfEmpty(tenant) {
			s.turn.MoveToBack(next)
		}
	}
}

// dropIfEmpty takes tenant out of the turn order when nothing of its
// waits. s.mu is held.
func (s *Slots) dropIfEmpty(tenant string) bool {
	if q := s.queue[tenant]; q != nil && q.Len() == 0 {
		s.turn.Remove(s.where[tenant])
		delete(s.where, tenant)
		delete(s.queue, tenant)
		return true
	}
	return false
}

// Usage is a tenant's share now.
type Usage struct {
	Running, Waiting int
}

// Usage reports tenant's runs holding a slot and waiting for one.
func (s *Slots) Usage(tenant string) Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := Usage{Running: s.held[tenant]}
	if q := s.queue[tenant]; q != nil {
		u.Waiting = q.Len()
	}
	return u
}
