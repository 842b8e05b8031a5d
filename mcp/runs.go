package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
)

// Runs are the runs in flight: run_code calls in progress and background
// runs. Each is known by its id from the moment it starts, so get_run and
// sandbox://runs/{id} show its output so far and cancel_run stops it;
// subscribers of sandbox://runs/{id} get notifications/resources/updated
// when it ends. Background runs belong to Runs, not to the call that
// started them: Close cancels them (they are recorded as cancelled) and
// waits for them.
type Runs struct {
	maxBackground int
	ctx           context.Context // parent of background runs
	cancel        context.CancelFunc
	wg            sync.WaitGroup

	// onSettle, when set (tests), is called when a call starts waiting
	// for cancelled runs to end.
	onSettle func()

	mu         sync.Mutex
	live       map[string]*liveRun
	background int
	closed     bool

	subMu sync.Mutex
	subs  map[string]map[string]subscriber // resource URI -> subscribers by key
	srv   *server.MCPServer                // set by NewServer, for notifications
}

// DefaultMaxBackground is how many background runs may be in flight at
// once unless configured; MaxBackgroundLimit bounds the setting.
const (
	DefaultMaxBackground = 4
	MaxBackgroundLimit   = 64
)

// NewRuns makes the registry of runs in flight, with at most
// maxBackground background runs at once (0: DefaultMaxBackground; negative:
// no background runs).
func NewRuns(maxBackground int) *Runs {
	if maxBackground == 0 {
		maxBackground = DefaultMaxBackground
	}
	maxBackground = min(maxBackground, MaxBackgroundLimit)
	ctx, cancel := context.WithCancel(context.Background())
	return &Runs{maxBackground: maxBackground, ctx: ctx, cancel: cancel, live: map[string]*liveRun{}, subs: map[string]map[string]subscriber{}}
}

// Close cancels the background runs and waits until they are recorded.
func (rs *Runs) Close() {
	rs.mu.Lock()
	rs.closed = true
	rs.mu.Unlock()
	rs.cancel()
	rs.wg.Wait()
}

// liveRun is one run in flight and what it has written so far.
type liveRun struct {
	id         string
	req        sandpit.Request
	started    time.Time
	background bool
	ctx        context.Context // the run's: done once it is told to stop
	cancel     context.CancelCauseFunc
	done       chan struct{}
	stopped    atomic.Int64 // when ctx ended, in Unix nanoseconds; 0 while it runs

	mu             sync.Mutex
	usage          func() sandpit.Usage // set by the runtime once the sandbox exists
	stdout, stderr liveStream
	tail           lineTail // both streams, in arrival order, for progress messages
	seq            int64    // bumped by every write
	res            *sandpit.Result
	err            error
}

// liveHeadBytes and liveTailBytes bound what a run in flight keeps of each
// stream for get_run: its first and its last bytes.
const (
	liveHeadBytes = 1 << 10
	liveTailBytes = 4 << 10
)

// liveStream keeps a stream's first and last bytes and counts the rest.
type liveStream struct {
	head  []byte
	tail  []byte
	total int64
}

func (s *liveStream) write(p []byte) {
	s.total += int64(len(p))
	if room := liveHeadBytes - len(s.head); room > 0 {
		s.head = append(s.head, p[:min(room, len(p))]...)
	}
	s.tail = append(s.tail, p...)
	if over := len(s.tail) - liveTailBytes; over > 0 {
		s.tail = append(s.tail[:0], s.tail[over:]...)
	}
}

// lineTail keeps the newest lines of output (at most progressLines lines
// and progressBytes bytes) for progress messages.
type lineTail struct{ buf []byte }

const (
	progressLines = 5
	progressBytes = 1 << 10
)

func (t *lineTail) write(p []byte) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 4*progressBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
}

// lines is the newest complete or partial lines, valid UTF-8.
func (t *lineTail) lines() string {
	s := strings.TrimRight(strings.ToValidUTF8(string(t.buf), "\uFFFD"), "\n")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	parts := strings.Split(s, "\n")
	if len(parts) > progressLines {
		parts = parts[len(parts)-progressLines:]
	}
	s = strings.Join(parts, "\n")
	if len(s) > progressBytes {
		s = s[len(s)-progressBytes:]
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	return s
}

func (l *liveRun) output(s sandpit.Stream, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == sandpit.Stderr {
		l.stderr.write(p)
	} else {
		l.stdout.write(p)
	}
	l.tail.write(p)
	l.seq++
}

func newRunID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// start registers req (given an id) as in flight under ctx and wires its
// live output. A call already cancelled starts no run: a call that came
// after the cancellation may have looked for runs to wait for already
// (settle), and would not see this one.
func (rs *Runs) start(ctx context.Context, req *sandpit.Request, background bool, cancel context.CancelCauseFunc) (*liveRun, error) {
	req.ID = newRunID()
	l := &liveRun{id: req.ID, req: *req, started: time.Now(), background: background, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	l.req.Output, l.req.Workspace, l.req.WatchUsage = nil, nil, nil
	prevWatch := req.WatchUsage
	req.WatchUsage = func(read func() sandpit.Usage) {
		l.mu.Lock()
		l.usage = read
		l.mu.Unlock()
		if prevWatch != nil {
			prevWatch(read)
		}
	}
	prev := req.Output
	req.Output = func(s sandpit.Stream, p []byte) {
		l.output(s, p)
		if prev != nil {
			prev(s, p)
		}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if background {
		switch {
		case rs.closed:
			return nil, argErrorf("the server is shutting down: no new background runs")
		case rs.maxBackground < 0:
			return nil, argErrorf("background runs are off on this server: run without background")
		case rs.background >= rs.maxBackground:
			return nil, sandpit.Hintf(sandpit.Newf(sandpit.ErrResourceExhausted, "%d background runs are in flight (the limit)", rs.background),
				"wait for one to end (get_run shows them), cancel one with cancel_run, or run in the foreground")
		}
		rs.background++
	}
	rs.live[l.id] = l
	context.AfterFunc(ctx, func() { l.stopped.Store(time.Now().UnixNano()) })
	return l, nil
}

// settle waits until every run told to stop (by cancel_run, the client's
// notifications/cancelled, or Close) has ended: its sandbox gone, its
// workspace changes merged, its record written. A cancelled call's client
// does not wait for that; the calls it sends next must not see the
// workspace or the history without the run's changes, and then with them.
// A run that has not ended cancelWait after it was told to stop is waited
// for no longer (it is stuck; cancel_run gives up on it as long). Returns
// early when ctx ends.
func (rs *Runs) settle(ctx context.Context) {
	rs.mu.Lock()
	var stopping []*liveRun
	for _, l := range rs.live {
		if l.ctx.Err() != nil {
			stopping = append(stopping, l)
		}
	}
	rs.mu.Unlock()
	if len(stopping) > 0 && rs.onSettle != nil {
		rs.onSettle()
	}
	for _, l := range stopping {
		since := time.Now()
		if ns := l.stopped.Load(); ns != 0 {
			since = time.Unix(0, ns)
		}
		wait := time.NewTimer(time.Until(since.Add(cancelWait)))
		select {
		case <-l.done:
		case <-wait.C:
		case <-ctx.Done():
		}
		wait.Stop()
		if ctx.Err() != nil {
			return
		}
	}
}

// finish records l's outcome, forgets it and tells subscribers.
func (rs *Runs) finish(l *liveRun, res *sandpit.Result, err error) {
	l.mu.Lock()
	l.res, l.err = res, err
	l.mu.Unlock()
	close(l.done)
	rs.mu.Lock()
	delete(rs.live, l.id)
	if l.background {
		rs.background--
	}
	rs.mu.Unlock()
	rs.updated(runURI(l.id))
}

// get returns the run id if it is in flight. Ids are matched exactly: "<id> "
// names no run.
func (rs *Runs) get(id string) *liveRun {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.live[id]
}

// runForeground runs req as a call's run: in flight under the call's
// context, which the client's notifications/cancelled or cancel_run ends.
func (rs *Runs) runForeground(ctx context.Context, r Runner, req sandpit.Request, progress func(*liveRun) func()) (*sandpit.Result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l, err := rs.start(ctx, &req, false, cancel)
	if err != nil {
		return nil, err
	}
	stop := progress(l)
	res, err := r.Run(ctx, req)
	stop()
	rs.finish(l, res, err)
	return res, err
}

// runBackground starts req in the background and returns its id at once.
func (rs *Runs) runBackground(r Runner, req sandpit.Request) (string, error) {
	ctx, cancel := context.WithCancelCause(rs.ctx)
	l, err := rs.start(ctx, &req, true, cancel)
	if err != nil {
		cancel(nil)
		return "", err
	}
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		defer cancel(nil)
		res, err := r.Run(ctx, req)
		rs.finish(l, res, err)
	}()
	return l.id, nil
}

// cancelRun cancels the run id in flight and waits (at most wait) for its
// outcome.
func (rs *Runs) cancelRun(ctx context.Context, id string, wait time.Duration) (*liveRun, error) {
	return rs.cancelBy(ctx, id, wait, nil)
}

// cancelBy is cancelRun with a cause: who cancelled it, when not the
// run's own caller.
func (rs *Runs) cancelBy(ctx context.Context, id string, wait time.Duration, cause error) (*liveRun, error) {
	l := rs.get(id)
	if l == nil {
		return nil, nil
	}
	l.cancel(cause)
	select {
	case <-l.done:
	case <-time.After(wait):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return l, nil
}

func runURI(id string) string { return "sandbox://runs/" + id }

// LiveRun describes a run in flight, for a person watching.
type LiveRun struct {
	ID         string
	Language   string
	Session    string // the session it runs in; empty for a fresh sandbox
	Path       string // the workspace file it runs, if not code
	Code       string // its first PreviewChars bytes
	Started    time.Time
	Background bool
	Stopping   bool // told to stop, not ended yet
	// StdoutBytes and StderrBytes count what it wrote so far; Tail is the
	// newest lines of both.
	StdoutBytes, StderrBytes int64
	Tail                     string
	// Usage is its sandbox's CPU time and peak memory so far (zero before
	// the sandbox exists, for a session call, or where unreadable).
	Usage sandpit.Usage
}

// PreviewChars bounds LiveRun.Code.
const PreviewChars = 200

// Live lists the runs in flight, oldest first.
func (rs *Runs) Live() []LiveRun {
	rs.mu.Lock()
	ls := make([]*liveRun, 0, len(rs.live))
	for _, l := range rs.live {
		ls = append(ls, l)
	}
	rs.mu.Unlock()
	out := make([]LiveRun, 0, len(ls))
	for _, l := range ls {
		l.mu.Lock()
		read := l.usage
		lr := LiveRun{
			ID: l.id, Language: l.req.Language, Session: l.req.Session, Path: l.req.Path,
			Code: clipRunes(l.req.Code, PreviewChars), Started: l.started, Background: l.background,
			Stopping:    l.ctx.Err() != nil,
			StdoutBytes: l.stdout.total, StderrBytes: l.stderr.total, Tail: l.tail.lines(),
		}
		l.mu.Unlock()
		if read != nil {
			lr.Usage = read() // cgroup files: outside the lock
		}
		out = append(out, lr)
	}
	slices.SortFunc(out, func(a, b LiveRun) int { return a.Started.Compare(b.Started) })
	return out
}

// ErrCancelledByPerson is the cause of a run cancelled with CancelByPerson:
// its history record says cancelled_by "person".
var ErrCancelledByPerson = errors.New("cancelled by a person")

// CancelByPerson stops run id in flight, as cancel_run does, recording
// that a person (not the agent) cancelled it, and waits up to wait for it
// to end. It reports whether the run was in flight; ended reports whether
// it has ended since.
func (rs *Runs) CancelByPerson(ctx context.Context, id string, wait time.Duration) (found, ended bool, err error) {
	l, err := rs.cancelBy(ctx, id, wait, ErrCancelledByPerson)
	if err != nil || l == nil {
		return false, false, err
	}
	select {
	case <-l.done:
		return true, true, nil
	default:
		return true, false, nil
	}
}

// clipRunes is s's first n bytes, cut at a rune boundary.
func clipRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Subscriptions to sandbox://runs/{id}, in both protocol eras: a legacy
// client sends resources/subscribe (mcp-go's stdio session keeps no
// subscriptions of its own, so hooks record them here); a client of
// protocol 2026-07-28 names the URIs in a subscriptions/listen request, and
// gets the update on that stream, tagged with its id, while it is open.
type subscriber struct {
	session server.ClientSession
	listen  any // the subscriptions/listen request's id; nil: resources/subscribe
}

// maxSubscriptions bounds the resource URIs subscribed to at once.
const maxSubscriptions = 10000

func subKey(session server.ClientSession, listen any) string {
	if listen == nil {
		return session.SessionID()
	}
	return fmt.Sprintf("%s/%v", session.SessionID(), listen)
}

func (rs *Runs) subscribe(sub subscriber, uri string) {
	rs.subMu.Lock()
	defer rs.subMu.Unlock()
	if rs.subs[uri] == nil {
		if len(rs.subs) >= maxSubscriptions {
			return
		}
		rs.subs[uri] = map[string]subscriber{}
	}
	rs.subs[uri][subKey(sub.session, sub.listen)] = sub
}

func (rs *Runs) unsubscribe(sub subscriber, uri string) {
	rs.subMu.Lock()
	defer rs.subMu.Unlock()
	delete(rs.subs[uri], subKey(sub.session, sub.listen))
	if len(rs.subs[uri]) == 0 {
		delete(rs.subs, uri)
	}
}

// updated sends notifications/resources/updated for uri to its
// subscribers. A notification that would block (a client not reading) is
// dropped, as mcp-go drops its own.
func (rs *Runs) updated(uri string) {
	rs.subMu.Lock()
	var subs []subscriber
	for _, s := range rs.subs[uri] {
		subs = append(subs, s)
	}
	srv := rs.srv
	rs.subMu.Unlock()
	for _, s := range subs {
		if s.listen == nil {
			if srv != nil {
				srv.SendNotificationToSpecificClient(s.session.SessionID(), string(mcpgo.MethodNotificationResourceUpdated), map[string]any{"uri": uri})
			}
			continue
		}
		n := mcpgo.JSONRPCNotification{JSONRPC: mcpgo.JSONRPC_VERSION, Notification: mcpgo.Notification{
			Method: string(mcpgo.MethodNotificationResourceUpdated),
			Params: mcpgo.NotificationParams{
				Meta:             map[string]any{mcpgo.MetaKeySubscriptionID: s.listen},
				AdditionalFields: map[string]any{"uri": uri},
			},
		}}
		select {
		case s.session.NotificationChannel() <- n:
		default:
		}
	}
}

// hooks registers the subscription tracking on srv's hooks.
func (rs *Runs) hooks(h *server.Hooks) {
	h.AddAfterSubscribe(func(ctx context.Context, _ any, req *mcpgo.SubscribeRequest, _ *mcpgo.EmptyResult) {
		if s := server.ClientSessionFromContext(ctx); s != nil {
			rs.subscribe(subscriber{session: s}, req.Params.URI)
		}
	})
	h.AddAfterUnsubscribe(func(ctx context.Context, _ any, req *mcpgo.UnsubscribeRequest, _ *mcpgo.EmptyResult) {
		if s := server.ClientSessionFromContext(ctx); s != nil {
			rs.unsubscribe(subscriber{session: s}, req.Params.URI)
		}
	})
	listened := func(ctx context.Context, id any, req *mcpgo.SubscriptionsListenRequest, on bool) {
		s := server.ClientSessionFromContext(ctx)
		if s == nil || req == nil || id == nil {
			return
		}
		for _, uri := range req.Params.Notifications.ResourceSubscriptions {
			if on {
				rs.subscribe(subscriber{session: s, listen: id}, uri)
			} else {
				rs.unsubscribe(subscriber{session: s, listen: id}, uri)
			}
		}
	}
	h.AddBeforeSubscriptionsListen(func(ctx context.Context, id any, req *mcpgo.SubscriptionsListenRequest) {
		listened(ctx, id, req, true)
	})
	h.AddAfterSubscriptionsListen(func(ctx context.Context, id any, req *mcpgo.SubscriptionsListenRequest, _ *mcpgo.SubscriptionsListenResult) {
		listened(ctx, id, req, false)
	})
	// A request that reads or changes the workspace or the history (a tool
	// call, a resource read, a prompt built from a run) first waits for
	// the runs told to stop to end.
	h.AddBeforeAny(func(ctx context.Context, _ any, method mcpgo.MCPMethod, _ any) {
		switch method {
		case mcpgo.MethodToolsCall, mcpgo.MethodResourcesRead, mcpgo.MethodPromptsGet:
			rs.settle(ctx)
		}
	})
	h.AddOnError(func(ctx context.Context, id any, method mcpgo.MCPMethod, msg any, _ error) {
		if req, ok := msg.(*mcpgo.SubscriptionsListenRequest); ok && method == mcpgo.MethodSubscriptionsListen {
			listened(ctx, id, req, false)
		}
	})
}

// record is what get_run and sandbox://runs/{id} show of a run in flight.
func (l *liveRun) record() RunRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := RunRecord{
		RunSummary: RunSummary{
			ID: l.id, Started: l.started.UTC().Format(time.RFC3339Nano), Language: l.req.Language,
			Status: "running", DurationMS: time.Since(l.started).Milliseconds(),
			StdoutBytes: l.stdout.total, StderrBytes: l.stderr.total,
			CodeBytes: int64(len(l.req.Code)), Path: l.req.Path,
		},
		Code: l.req.Code, StdinBytes: int64(len(l.req.Stdin)),
		StdoutHead: strings.ToValidUTF8(string(l.stdout.head), "\uFFFD"),
		StderrHead: strings.ToValidUTF8(string(l.stderr.head), "\uFFFD"),
		Session:    l.req.Session,
		Background: l.background,
	}
	if l.stdout.total > int64(len(l.stdout.head)) {
		r.StdoutTail = validTail(l.stdout.tail)
	}
	if l.stderr.total > int64(len(l.stderr.head)) {
		r.StderrTail = validTail(l.stderr.tail)
	}
	return r
}

func validTail(b []byte) string {
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// formatLive is the readable text of a run in flight.
func formatLive(r RunRecord) string {
	var b strings.Builder
	kind := "run"
	if r.Background {
		kind = "background run"
	}
	fmt.Fprintf(&b, "%s %s: %s, running for %d ms (started %s)", kind, r.ID, textName(r.Language), r.DurationMS, r.Started)
	if r.Session != "" {
		fmt.Fprintf(&b, " in session %s", textName(r.Session))
	}
	b.WriteString("\n")
	head := func(name, h, tail string, total int64) {
		if total == 0 {
			return
		}
		fmt.Fprintf(&b, "--- %s so far (%d bytes; first %d) ---\n", name, total, len(h))
		writeFenced(&b, h)
		if tail != "" {
			fmt.Fprintf(&b, "--- %s, last %d bytes ---\n", name, len(tail))
			writeFenced(&b, tail)
		}
	}
	head("stdout", r.StdoutHead, r.StdoutTail, r.StdoutBytes)
	head("stderr", r.StderrHead, r.StderrTail, r.StderrBytes)
	b.WriteString("cancel_run stops it; get_run shows its result once it ends\n")
	return b.String()
}
