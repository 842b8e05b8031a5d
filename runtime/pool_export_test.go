package runtime

import "time"

// SetPoolShrinkAfter changes how long the pool serving lang waits without a
// miss before its target shrinks. A test holds it still (a huge value) while
// it watches a burst grow the pool, however slowly the machine makes the
// sandboxes, then sets it short to watch the pool shrink.
func SetPoolShrinkAfter(r *Runtime, lang string, d time.Duration) {
	p := r.pooled[lang]
	p.mu.Lock()
	defer p.mu.Unlock()
	p.shrinkAfter = d
}
