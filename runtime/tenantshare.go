package runtime

import (
	"sync"
	"time"
)

// tenantActivity is which tenants ran something lately and how many runs
// each has in flight, so the warm pool can be shared fairly: a tenant that
// already has a run going leaves the last started sandbox to a tenant that
// has none, while another tenant was active within shareWindow. One tenant
// running flat out then pays its own cold starts instead of every other
// tenant paying them (issue 25: one tenant flooding cannot starve another).
// A stdio server's one client (tenant "") is never held back.
type tenantActivity struct {
	mu       sync.Mutex
	inflight map[string]int
	lastSeen map[string]time.Time
}

// shareWindow is how recently another tenant must have run for a busy
// tenant to leave it the last warm sandbox.
const shareWindow = time.Minute

// begin counts a run of tenant in flight and says whether it should leave
// the last started sandbox to others; end must follow.
func (a *tenantActivity) begin(tenant string, now time.Time) (yield bool) {
	if tenant == "" {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inflight == nil {
		a.inflight, a.lastSeen = map[string]int{}, map[string]time.Time{}
	}
	a.inflight[tenant]++
	a.lastSeen[tenant] = now
	if a.inflight[tenant] < 2 {
		return false
	}
	for t, seen := range a.lastSeen {
		switch {
		case t == tenant:
		case a.inflight[t] > 0 || now.Sub(seen) < shareWindow:
			yield = true
		default:
			delete(a.lastSeen, t) // bounded by the tenants active in the window
		}
	}
	return yield
}

func (a *tenantActivity) end(tenant string) {
	if tenant == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inflight[tenant]--; a.inflight[tenant] <= 0 {
		delete(a.inflight, tenant)
	}
}
