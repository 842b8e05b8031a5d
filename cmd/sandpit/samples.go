package main

import (
	"context"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/dash"
	"github.com/sandpit-dev/sandpit/runtime"
)

// Sampling for the dashboard's charts over time: the warm pool's size and
// hit rate, and each tenant's sessions' memory, every sampleEvery over the
// last sampleKeep.
const (
	sampleEvery = 10 * time.Second
	sampleKeep  = 360 // an hour
	// sampleTenants bounds the tenants a sample keeps session memory of.
	sampleTenants = 1000
)

type sample struct {
	at              time.Time
	ready, target   int
	claimed, misses int64 // totals since the start
	sessionMem      map[string]uint64
}

// sampler keeps the newest samples, a bounded ring.
type sampler struct {
	rt *runtime.Runtime

	mu      sync.Mutex
	samples []sample
}

func newSampler(rt *runtime.Runtime) *sampler { return &sampler{rt: rt} }

// run samples until ctx is done.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		s.take(time.Now().UTC())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) take(now time.Time) {
	sm := sample{at: now, sessionMem: map[string]uint64{}}
	for _, p := range s.rt.PoolStats() {
		sm.ready += p.Ready
		sm.target += p.Target
		sm.claimed += p.Claimed
		sm.misses += p.Misses
	}
	for _, si := range s.rt.AllSessions() {
		if _, ok := sm.sessionMem[si.Tenant]; ok || len(sm.sessionMem) < sampleTenants {
			sm.sessionMem[si.Tenant] += si.MemoryBytes
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, sm)
	if over := len(s.samples) - sampleKeep; over > 0 {
		s.samples = append(s.samples[:0], s.samples[over:]...)
	}
}

// Pool is the warm pool over the samples: ready and wanted sandboxes, and
// the share of runs that found one ready since the sample before.
func (s *sampler) Pool() []dash.PoolSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]dash.PoolSample, 0, len(s.samples))
	for i, sm := range s.samples {
		ps := dash.PoolSample{Time: sm.at, Ready: sm.ready, Target: sm.target, HitRate: -1}
		if i > 0 {
			prev := s.samples[i-1]
			hits, misses := sm.claimed-prev.claimed, sm.misses-prev.misses
			if hits+misses > 0 {
				ps.HitRate = float64(hits) / float64(hits+misses)
			}
		}
		out = append(out, ps)
	}
	return out
}

// SessionMemory is tenant's sessions' memory over the samples.
func (s *sampler) SessionMemory(tenant string) []dash.MemorySample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]dash.MemorySample, 0, len(s.samples))
	for _, sm := range s.samples {
		out = append(out, dash.MemorySample{Time: sm.at, Bytes: sm.sessionMem[tenant]})
	}
	return out
}
