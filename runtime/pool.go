package runtime

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/runtime/engine"
)

// A warm pool keeps sandboxes created and started ahead of requests, each
// running a small waiter (waiter.py) that blocks on its stdin. A request
// claims one, writes its source into the sandbox's (read-only bound) source
// directory from the host, attaches the workspace through mount propagation,
// and sends a one-line header: the waiter then becomes the program (and, for
// C and C++, compiles it first). The waiter is the same for every language,
// so there is one pool per image, shared by the languages built on it. Every
// pooled sandbox serves exactly one request and is destroyed afterwards; the
// pool refills in the background.

// PoolConfig sizes the warm pool.
type PoolConfig struct {
	// Size is how many started sandboxes to keep ready per image when
	// requests are sparse; 0 disables the pool.
	Size int
	// MaxSize caps the started sandboxes kept under a burst: each request
	// that finds none ready doubles the target, up to MaxSize, and it
	// shrinks back by one every ShrinkAfter without such a miss. Default
	// 4 × Size; at most Size disables growing.
	MaxSize int
	// Created is how many more to keep created but not started: a request
	// that finds no started one takes one of these and pays only its start
	// (the program's interpreter starts then), not its creation; and a
	// started one is refilled by starting one of these. Default 0.
	Created int
	// ShrinkAfter is how long without a miss before the target shrinks by
	// one (default 30 s).
	ShrinkAfter time.Duration
	// IdleTimeout destroys ready sandboxes nobody claimed for this long, and
	// stops refilling until the next request.
	IdleTimeout time.Duration
	// Languages that may use the pool; empty means all.
	Languages []string
}

// PoolStats counts what the pool did, for tests and metrics. Every created
// sandbox ends up in exactly one of Claimed, Expired or Discarded.
type PoolStats struct {
	Created   int64 `json:"created"`
	Claimed   int64 `json:"claimed"`
	Expired   int64 `json:"expired"`   // idle too long, or beyond a shrinking target
	Discarded int64 `json:"discarded"` // failed to start, or dropped at Close
	Ready     int   `json:"ready"`     // started and waiting
	Parked    int   `json:"parked"`    // created, not started
	Target    int   `json:"target"`    // started ones wanted now (Size … MaxSize)
	Misses    int64 `json:"misses"`    // requests that found none started
}

type pool struct {
	r           *Runtime
	image       string
	size        int // the floor of target
	maxSize     int
	parkedSize  int
	shrinkAfter time.Duration
	idle        time.Duration

	mu       sync.Mutex
	ready    []*warm // started
	parked   []*warm // created, not started
	filling  int     // started ones on their way (made or promoted)
	parking  int     // parked ones on their way
	target   int
	lastMiss time.Time
	lastUse  time.Time
	closed   bool
	failures int // consecutive creation failures, for back-off

	created, claimed, expired, discarded, misses atomic.Int64
}

// warm is one pooled sandbox, started and waiting, or created and parked
// (started when claimed).
type warm struct {
	sb       *sandbox
	liveness *os.File // the liveness FIFO's only writer (init.go)
	dir      string   // per-sandbox host dir: src/, ws/ (shared mount point), fifo/
	created  time.Time
	parked   bool // not started yet; whoever claims it starts it
	used     atomic.Bool
}

func (r *Runtime) startPools() {
	pc := r.cfg.Pool
	if pc.Size <= 0 || r.cfg.NoInit {
		return
	}
	allowed := map[string]bool{}
	for _, n := range pc.Languages {
		allowed[strings.ToLower(n)] = true
	}
	idle := pc.IdleTimeout
	if idle <= 0 {
		idle = 5 * time.Minute
	}
	for i := range r.cfg.Languages {
		l := &r.cfg.Languages[i]
		if len(allowed) > 0 && !allowed[l.Name] {
			continue
		}
		if p, ok := r.pools[l.Image]; ok {
			r.pooled[l.Name] = p
			continue
		}
		maxSize := pc.MaxSize
		if maxSize == 0 {
			maxSize = 4 * pc.Size
		}
		shrink := pc.ShrinkAfter
		if shrink <= 0 {
			shrink = 30 * time.Second
		}
		p := &pool{r: r, image: l.Image, size: pc.Size, maxSize: max(maxSize, pc.Size), parkedSize: max(pc.Created, 0),
			shrinkAfter: shrink, idle: idle, lastUse: time.Now(), target: pc.Size}
		r.pools[l.Image] = p
		r.pooled[l.Name] = p
		p.refill()
		go p.expireLoop(max(min(idle, shrink)/4, 50*time.Millisecond))
	}
}

// claim returns a started sandbox, else a parked one (the caller starts
// it), or nil when the pool has neither (the caller then runs cold). The
// caller calls refill once its run is over: making a sandbox costs tens of
// milliseconds of CPU, which on a small host would otherwise be taken from
// the very run that claimed one — except under a burst: a request that
// finds no started sandbox doubles the target and refills at once, since
// the next requests are already coming.
//
// With yield, the claimer leaves the last started sandbox to another
// tenant (tenantshare.go): it takes a parked one or none.
func (p *pool) claim(yield bool) *warm {
	p.mu.Lock()
	p.lastUse = time.Now()
	var w *warm
	if !yield || len(p.ready) > 1 {
		w = p.pop(&p.ready)
	}
	miss := w == nil
	if miss {
		w = p.pop(&p.parked)
		p.misses.Add(1)
		p.lastMiss = time.Now()
		p.target = min(p.maxSize, max(2*p.target, p.target+1))
	}
	p.mu.Unlock()
	if miss {
		p.refill()
	}
	if w != nil && !w.used.CompareAndSwap(false, true) {
		panic("warm pool: sandbox claimed twice") // a bug, never a runtime condition
	}
	if w != nil {
		p.claimed.Add(1)
	}
	return w
}

// pop takes the newest live sandbox of a tier; p.mu is held.
func (p *pool) pop(tier *[]*warm) *warm {
	for len(*tier) > 0 {
		n := len(*tier)
		w := (*tier)[n-1]
		*tier = (*tier)[:n-1]
		if w.alive() {
			return w
		}
		// Its waiter died (killed from outside, containerd or the shim
		// restarted): never hand it out.
		p.r.log.Warn("warm pool: discarding a sandbox that exited while waiting", "id", w.sb.id)
		p.r.background(func() { p.discard(w) })
	}
	return nil
}

// alive reports whether the waiter is still waiting. A dead one's exit
// status is consumed, which is fine: it is only ever discarded.
func (w *warm) alive() bool {
	select {
	case <-w.sb.exitC:
		return false
	default:
		return true
	}
}

// refill brings started sandboxes up to the target (starting parked ones
// first: their creation is paid already) and parked ones up to their size.
func (p *pool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || time.Since(p.lastUse) > p.idle {
		return
	}
	for len(p.ready)+p.filling < p.target {
		p.filling++
		if w := p.pop(&p.parked); w != nil {
			p.r.background(func() { p.promote(w) })
		} else {
			p.r.background(func() { p.fillOne(false) })
		}
	}
	for len(p.parked)+p.parking < p.parkedSize {
		p.parking++
		p.r.background(func() { p.fillOne(true) })
	}
}

// fillOne makes one sandbox, started or parked.
func (p *pool) fillOne(park bool) {
	// Back off after failures (containerd down, image missing) so a broken
	// host is not hammered; requests still run cold and report the error.
	p.mu.Lock()
	delay := time.Duration(min(p.failures, 6)) * 500 * time.Millisecond
	p.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	w, err := p.r.newWarm(context.Background(), p.image, !park)
	p.mu.Lock()
	if park {
		p.parking--
	} else {
		p.filling--
	}
	if errors.Is(err, errNoInit) {
		// For good: the image cannot run the waiter. Requests run cold.
		p.closed = true
		p.mu.Unlock()
		p.r.log.Info("warm pool off: the image has no python3 for sandpit's init (runs start cold)", "image", p.image)
		return
	}
	if err != nil {
		p.failures++
		p.mu.Unlock()
		p.r.log.Debug("warm pool: cannot start a sandbox", "image", p.image, "err", err)
		return
	}
	p.created.Add(1)
	p.failures = 0
	p.keep(w)
}

// promote starts a parked sandbox for the started tier.
func (p *pool) promote(w *warm) {
	err := p.r.startWarm(context.Background(), w)
	p.mu.Lock()
	p.filling--
	if err != nil {
		p.mu.Unlock()
		p.r.log.Debug("warm pool: cannot start a parked sandbox", "id", w.sb.id, "err", err)
		p.discard(w)
		return
	}
	p.keep(w)
	// The parked tier lost one.
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.parked)+p.parking < p.parkedSize && !p.closed {
		p.parking++
		p.r.background(func() { p.fillOne(true) })
	}
}

// keep adds a new sandbox to its tier; p.mu is held and released.
func (p *pool) keep(w *warm) {
	if p.closed {
		p.mu.Unlock()
		p.discard(w)
		return
	}
	if w.parked {
		p.parked = append(p.parked, w)
	} else {
		p.ready = append(p.ready, w)
	}
	p.mu.Unlock()
}

func (p *pool) discard(w *warm) {
	p.discarded.Add(1)
	p.r.destroyWarm(w)
}

// expireLoop destroys sandboxes idle for longer than the idle timeout, and
// shrinks a target grown by a burst once misses stop. It looks every
// period, which the caller derives from the configured timeouts: the
// pool's fields are read under p.mu only (tests change shrinkAfter).
func (p *pool) expireLoop(period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for range tick.C {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		var old []*warm
		for _, tier := range []*[]*warm{&p.ready, &p.parked} {
			var keep []*warm
			for _, w := range *tier {
				if time.Since(w.created) > p.idle {
					old = append(old, w)
				} else {
					keep = append(keep, w)
				}
			}
			*tier = keep
		}
		if p.target > p.size && time.Since(p.lastMiss) > p.shrinkAfter {
			p.target--
			p.lastMiss = time.Now() // one step per ShrinkAfter
			if len(p.ready) > p.target {
				old = append(old, p.ready[0]) // the oldest
				p.ready = p.ready[1:]
			}
		}
		p.mu.Unlock()
		for _, w := range old {
			p.expired.Add(1)
			p.r.background(func() { p.r.destroyWarm(w) })
		}
		if len(old) > 0 {
			p.refill() // only refills if a request came within the idle timeout
		}
	}
}

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	all := append(p.ready, p.parked...)
	p.ready, p.parked = nil, nil
	p.mu.Unlock()
	for _, w := range all {
		p.discard(w)
	}
}

// flush discards every pooled sandbox (their client or shim is gone) and
// refills.
func (p *pool) flush() {
	p.mu.Lock()
	all := append(p.ready, p.parked...)
	p.ready, p.parked = nil, nil
	p.mu.Unlock()
	for _, w := range all {
		p.r.background(func() { p.discard(w) })
	}
	p.refill()
}

func (p *pool) stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{Created: p.created.Load(), Claimed: p.claimed.Load(), Expired: p.expired.Load(), Discarded: p.discarded.Load(),
		Ready: len(p.ready), Parked: len(p.parked), Target: p.target, Misses: p.misses.Load()}
}

// PoolStats reports the pool each pooled language uses (languages on one
// image share a pool, and so its figures).
func (r *Runtime) PoolStats() map[string]PoolStats {
	out := map[string]PoolStats{}
	for name, p := range r.pooled {
		out[name] = p.stats()
	}
	return out
}

// newWarm creates one pooled sandbox, and starts it unless it is to be
// parked.
func (r *Runtime) newWarm(ctx context.Context, image string, start bool) (_ *warm, retErr error) {
	if _, err := r.image(ctx, image); err != nil {
		return nil, err
	}
	if !r.hasInit(image) {
		return nil, errNoInit
	}
	id := "warm-" + newRunID()
	dir := filepath.Join(r.cfg.StateDir, "runs", id)
	w := &warm{dir: dir, created: time.Now()}
	r.setLive(id, true)
	defer func() {
		if retErr != nil {
			r.destroyWarm(w)
		}
	}()
	for _, d := range []string{"src", "fifo"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return w, err
		}
	}
	var err2 error
	if w.liveness, err2 = makeAlive(filepath.Join(dir, "src")); err2 != nil {
		return w, err2
	}
	// ws/ and env/ become shared mount points: see envmount.go.
	points, err := attachPoints(dir)
	if err != nil {
		return w, err
	}
	sb, err := r.create(ctx, image, id, dir, r.initSpec(dir, waiterProcess, points...), engine.LateStdin(), r.cfg.OutputBytes+markerBytes)
	if err != nil {
		return w, err
	}
	w.sb = sb
	if !start {
		w.parked = true
		return w, nil
	}
	if err := r.start(ctx, sb); err != nil {
		return w, err
	}
	return w, nil
}

// startWarm starts a parked sandbox.
func (r *Runtime) startWarm(ctx context.Context, w *warm) error {
	if err := r.start(ctx, w.sb); err != nil {
		return err
	}
	w.parked = false
	return nil
}

// destroyWarm deletes a pooled sandbox and its host dir.
func (r *Runtime) destroyWarm(w *warm) {
	ctx := context.Background()
	if w.sb != nil {
		r.destroy(ctx, w.sb)
	}
	if w.liveness != nil {
		w.liveness.Close()
	}
	// ws/ may still carry the workspace view: never removed recursively.
	if err := removeRunDir(w.dir); err != nil {
		r.log.Warn("pooled sandbox dir left in place; the janitor retries", "err", err)
	}
	r.setLive(filepath.Base(w.dir), false)
}

// runWarm serves req with the pooled sandbox w. The program sees what a cold
// run would: its source at the same path, /workspace, argv, stdin, cwd.
func (r *Runtime) runWarm(ctx context.Context, w *warm, lang *LanguageSpec, req sandpit.Request, view sandpit.View, deadline time.Time) (*stepOutput, error) {
	if req.Path == "" {
		// The source dir is bound read-only into the sandbox; the host writes it.
		if err := os.WriteFile(filepath.Join(w.dir, "src", lang.File), []byte(req.Code), 0o644); err != nil {
			return nil, fmt.Errorf("warm sandbox source: %w", err)
		}
	}
	cwd := "/tmp"
	if view != nil {
		ws := filepath.Join(w.dir, "ws")
		if err := unix.Mount(view.Dir(), ws, "", unix.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("attach workspace to warm sandbox: %w", err)
		}
		cwd = sandpit.WorkspaceDir
	}
	if req.Env != "" {
		if err := attachEnv(w.dir, req.Env); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		// Cancelled while the workspace was being opened: start nothing.
		return nil, fmt.Errorf("run cancelled before it started: %w", err)
	}
	if w.parked {
		// Only its start is left to pay.
		if err := r.startWarm(ctx, w); err != nil {
			return nil, fmt.Errorf("%w: %v", errWarmLost, err)
		}
	}
	mode, header := initRequest(lang, req, cwd)
	watchOutput(w.sb, req.Output, mode)
	r.watchUsage(w.sb, req.WatchUsage)
	w.sb.stdin.Send(deadlineLine(deadline), header, req.Stdin)
	out, err := r.await(ctx, w.sb, deadline)
	if err != nil {
		return out, err
	}
	if !r.finishInit(out, mode) {
		// The waiter never took the request (it died while waiting, or
		// its task was gone): nothing of the program ran.
		stderr, _, _ := out.stderr.result()
		return nil, fmt.Errorf("%w (status %s, exit %d, stderr %.300q)", errWarmLost, out.status, out.exitCode, stderr)
	}
	return out, nil
}

// detachWorkspace undoes runWarm's workspace mount before the view
// closes. A package layer stays until the sandbox is destroyed (in the
// background: removeRunDir unmounts it), off the request's path.
func detachWorkspace(w *warm) error {
	ws := filepath.Join(w.dir, "ws")
	if err := unix.Unmount(ws, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return err
	}
	return nil
}
