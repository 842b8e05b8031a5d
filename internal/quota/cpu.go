package quota

import (
	"fmt"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// ErrCPUQuota: a tenant used its CPU time for the hour.
var ErrCPUQuota = sandpit.Define(sandpit.ErrResourceExhausted, "CPU quota used up")

// buckets per window: the hour in minutes.
const buckets = 60

// CPU is a budget of CPU time per tenant over a sliding hour, counted in
// minute buckets (so a tenant costs a fixed 60 counters, whatever it runs).
// A run is admitted while the tenant's last hour is under the budget; its
// cost is charged when it ends, so one run can overshoot by what it used.
type CPU struct {
	limit time.Duration
	now   func() time.Time

	mu      sync.Mutex
	tenants map[string]*window
}

type window struct {
	minute [buckets]int64 // unix minute each bucket counts
	used   [buckets]time.Duration
}

// NewCPU returns a budget of limit CPU time per tenant per hour (0: none).
func NewCPU(limit time.Duration) *CPU {
	return &CPU{limit: limit, now: time.Now, tenants: map[string]*window{}}
}

// Admit refuses a run of tenant's when its last hour used the budget, and
// says when enough of it frees for another.
func (c *CPU) Admit(tenant string) error {
	if c == nil || c.limit <= 0 {
		return nil
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.tenants[tenant]
	if w == nil {
		return nil
	}
	used := w.sum(now)
	if used < c.limit {
		return nil
	}
	// Buckets age out oldest first: find when used drops below limit.
	cur := now.Unix() / 60
	left := used
	free := now
	for m := cur - buckets + 1; m <= cur; m++ {
		i := m % buckets
		if w.minute[i] == m {
			left -= w.used[i]
		}
		if left < c.limit {
			free = time.Unix((m+buckets)*60, 0)
			break
		}
	}
	return sandpit.Hintf(fmt.Errorf("%w: your runs used %s of CPU time in the last hour; the limit is %s", ErrCPUQuota, used.Round(time.Millisecond), c.limit),
		"wait until %s UTC, when part of it frees", free.UTC().Format("15:04"))
}

// Charge adds cost to tenant's hour.
func (c *CPU) Charge(tenant string, cost time.Duration) {
	if c == nil || c.limit <= 0 || cost <= 0 {
		return
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.tenants[tenant]
	if w == nil {
		w = &window{}
		c.tenants[tenant] = w
	}
	m := now.Unix() / 60
	i := m % buckets
	if w.minute[i] != m {
		w.minute[i], w.used[i] = m, 0
	}
	w.used[i] += cost
}

// Used reports tenant's CPU time in the last hour.
func (c *CPU) Used(tenant string) time.Duration {
	if c == nil {
		return 0
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.tenants[tenant]; w != nil {
		return w.sum(now)
	}
	return 0
}

// Limit is the budget per hour (0: none).
func (c *CPU) Limit() time.Duration {
	if c == nil {
		return 0
	}
	return c.limit
}

func (w *window) sum(now time.Time) time.Duration {
	cur := now.Unix() / 60
	var d time.Duration
	for i := range w.minute {
		if m := w.minute[i]; m > cur-buckets && m <= cur {
			d += w.used[i]
		}
	}
	return d
}
