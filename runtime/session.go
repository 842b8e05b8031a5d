package runtime

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/runtime/engine"
)

// Sessions: a sandbox that outlives one call. A session's sandbox is laid
// out like a pooled one, under its own PID 1 (session_init.go), and its
// waiter, instead of one program, runs sandpit's REPL (session.py): it keeps
// one namespace for the session's life and runs the calls sent to it on
// stdin, one at a time. Each call gets the workspace the way a pooled run
// does (a view of its own, attached by mount propagation and merged back
// when the call ends), its output back between end lines (session_stream.go)
// and is measured from the sandbox's cgroup. A session is never shared: its
// name belongs to one server, and a session that ended is never reused.
//
// The server enforces every limit itself: a call's deadline (an interrupt,
// then, after SessionConfig.Grace, the kill), the session's idle and age
// limits, its memory (the cgroup); and the sandbox's PID 1 kills everything
// at the session's age limit plus initGrace, and at once when the server
// goes away (its liveness FIFO reads EOF), whatever the program does.

//go:embed session.py
var sessionPy string

// sessionFile is where the REPL's source is, in the sandbox's source dir.
const sessionFile = "sandpit_session.py"

// SessionConfig bounds sessions. Zero fields take the defaults.
type SessionConfig struct {
	// Max is how many sessions may be open at once (default 4); a negative
	// value turns sessions off.
	Max int
	// Idle ends a session unused for this long (default 10 minutes).
	Idle time.Duration
	// MaxAge ends a session this long after it started, used or not
	// (default 4 hours).
	MaxAge time.Duration
	// Grace is how long an interrupted call (its timeout, or its caller
	// cancelled it) has to stop before its session is killed (default 2 s).
	Grace time.Duration
	// PerTenant is how many of them one tenant may hold (0: Max).
	PerTenant int
	// Ledger, when set, records outside this server which sessions it
	// holds, so that a session a server that is gone held is reported
	// session_lost by the next one (store/ledger: a cluster's nodes share
	// it through the tenants' data dir).
	Ledger SessionLedger
}

// SessionLedger records which server holds each named session of a tenant.
type SessionLedger interface {
	Record(tenant, name string) error
	// Forget drops a record this server made (the session ended and its
	// caller was told).
	Forget(tenant, name string)
	// Lost says why a session this server does not hold is lost ("":
	// another server never held it), and consumes the record.
	Lost(tenant, name string) string
}

// PerTenantLimit is how many sessions one tenant may hold.
func (c SessionConfig) PerTenantLimit() int { return c.perTenant() }

func (c SessionConfig) perTenant() int {
	if c.PerTenant > 0 && c.PerTenant < c.Max {
		return c.PerTenant
	}
	return c.Max
}

// Session defaults and bounds.
const (
	DefaultMaxSessions   = 4
	DefaultSessionIdle   = 10 * time.Minute
	DefaultSessionMaxAge = 4 * time.Hour
	DefaultSessionGrace  = 2 * time.Second
	// MaxSessionsLimit and MaxSessionAge bound the configuration itself.
	MaxSessionsLimit = 64
	MaxSessionAge    = 7 * 24 * time.Hour
	// sessionStartTimeout bounds a session's start-up (its REPL's ready line).
	sessionStartTimeout = 30 * time.Second
	// endedRemembered is how many ended sessions' names (and why they
	// ended) are remembered, for a later call of the same name.
	endedRemembered = 64
	// sessionNamesMax bounds the names a call reports its session holds.
	sessionNamesMax = 50
	// sessionValueMax bounds a call's value (bytes of its repr).
	sessionValueMax = 16 << 10
)

func (c *SessionConfig) defaults() {
	if c.Max == 0 {
		c.Max = DefaultMaxSessions
	}
	if c.Idle <= 0 {
		c.Idle = DefaultSessionIdle
	}
	if c.MaxAge <= 0 {
		c.MaxAge = DefaultSessionMaxAge
	}
	if c.Grace <= 0 {
		c.Grace = DefaultSessionGrace
	}
}

// Validate rejects settings past their bounds.
func (c SessionConfig) Validate() error {
	switch {
	case c.Max > MaxSessionsLimit:
		return fmt.Errorf("at most %d sessions, not %d", MaxSessionsLimit, c.Max)
	case c.MaxAge > MaxSessionAge:
		return fmt.Errorf("session age limit %s is over %s", c.MaxAge, MaxSessionAge)
	case c.Idle > c.MaxAge && c.MaxAge > 0:
		return fmt.Errorf("session idle limit %s is over its age limit %s", c.Idle, c.MaxAge)
	case c.Grace > time.Minute:
		return fmt.Errorf("session interrupt grace %s is over a minute", c.Grace)
	}
	return nil
}

// Session errors.
var (
	ErrNoSession    = sandpit.Define(sandpit.ErrNotFound, "no such session")
	ErrSessionBusy  = sandpit.Define(sandpit.ErrConflict, "session busy")
	ErrSessionLimit = sandpit.Define(sandpit.ErrResourceExhausted, "too many sessions")
	ErrSessionsOff  = sandpit.Define(sandpit.ErrUnavailable, "sessions are not available")
)

var validSessionName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// sessionLanguages are the languages a session can run (a REPL exists).
var sessionLanguages = []string{"python", "bash"}

// SessionLanguages lists the languages a session can run.
func SessionLanguages() []string { return slices.Clone(sessionLanguages) }

type sessions struct {
	r   *Runtime
	cfg SessionConfig

	mu     sync.Mutex
	open   map[sessKey]*session
	ended  []endedSession // newest last, at most endedRemembered
	closed bool
}

// sessKey names a session: its tenant ("" for a stdio server's one
// client) and the name the tenant gave it.
type sessKey struct{ tenant, name string }

type endedSession struct {
	key sessKey
	why string
	at  time.Time
}

type session struct {
	name    string
	tenant  string
	lang    *LanguageSpec
	started time.Time
	maxAge  time.Time // when it ends regardless of use
	ready   chan struct{}
	err     error // why it did not start; set before ready closes

	w      *warm
	alive  *os.File // the liveness FIFO's only writer (session_init.go)
	out    sessionStream
	errs   sessionStream
	exited chan struct{} // the sandbox's task exited
	exit   engine.Exit
	cg     meter // its cgroup's counters (none until it started)

	frames     chan []byte // to the REPL's stdin, in order
	framesMu   sync.Mutex
	framesDone bool

	call sync.Mutex // one call at a time

	// The workspace views of its calls, kept between calls where the
	// workspace can (sandpit.KeepingWorkspace). Guarded by sessions.mu.
	keeper   sandpit.ViewKeeper
	keeperOf sandpit.Workspace

	// Guarded by sessions.mu.
	lastUsed time.Time
	calls    int64
	running  string
	names    []string
	more     int
	gone     string // why it ended; "" while open
}

func newSessions(r *Runtime, cfg SessionConfig) *sessions {
	cfg.defaults()
	m := &sessions{r: r, cfg: cfg, open: map[sessKey]*session{}}
	if cfg.Max > 0 {
		go m.reap()
	}
	return m
}

// SessionConfig is the session configuration in effect.
func (r *Runtime) SessionConfig() SessionConfig { return r.sess.cfg }

// runSession runs req in its session, starting the session on first use.
func (r *Runtime) runSession(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	lang, err := r.Lookup(req.Language)
	if err != nil {
		return nil, err
	}
	if err := r.validate(req); err != nil {
		return nil, err
	}
	if !validSessionName.MatchString(req.Session) {
		return nil, fmt.Errorf("%w: session name %q: use 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", ErrInvalidRequest, req.Session)
	}
	if !slices.Contains(sessionLanguages, lang.Name) {
		return nil, fmt.Errorf("%w: sessions run %s, not %s (run it without a session: every run starts fresh)", ErrInvalidRequest, strings.Join(sessionLanguages, ", "), lang.Name)
	}
	if r.sess.cfg.Max < 0 || r.cfg.NoInit {
		return nil, sandpit.WithHint(ErrSessionsOff, "run without a session")
	}
	if err := r.admit(ctx, lang, req); err != nil {
		return nil, err
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = sandpit.DefaultTimeout
	}
	var (
		s         *session
		isNew     bool
		prev      string
		tries     int
		startedAt = time.Now()
	)
	if why := r.sess.lostElsewhere(sessKey{req.Tenant, req.Session}); why != "" {
		// Its memory is gone with another server: say so rather than run
		// code that expects it in a new, empty session.
		res := &sandpit.Result{ID: req.ID, Language: lang.Name, Started: startedAt.UTC(), Limits: r.Limits(timeout),
			Status: sandpit.StatusSessionLost, ExitCode: -1,
			Session: &sandpit.SessionResult{Name: req.Session, Lost: true, LostReason: why}}
		if res.ID == "" {
			res.ID = newRunID()
		}
		return res, nil
	}
	for {
		s, isNew, prev, err = r.sess.get(ctx, sessKey{req.Tenant, req.Session}, lang)
		if err != nil {
			return nil, err
		}
		if !s.call.TryLock() {
			return nil, sandpit.Hintf(fmt.Errorf("%w: session %q is running call %s", ErrSessionBusy, s.name, r.sess.runningOf(s)),
				"wait for that call to end (get_run shows it), or use another session")
		}
		if r.sess.goneWhy(s) == "" {
			break
		}
		s.call.Unlock() // it ended (idle, age) between get and the lock: start another
		if tries++; tries > 2 {
			return nil, fmt.Errorf("%w: session %q keeps ending", ErrSessionBusy, req.Session)
		}
	}
	defer s.call.Unlock()

	id := req.ID
	if id == "" {
		id = newRunID()
	}
	res := &sandpit.Result{ID: id, Language: lang.Name, Started: startedAt.UTC(), Limits: r.Limits(timeout)}
	var view sandpit.View
	cwd := "/tmp"
	tOpen := time.Now()
	if req.Workspace != nil {
		if view, err = r.sess.openView(s, req.Workspace, ctx, id); err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
		ws := filepath.Join(s.w.dir, "ws")
		if err := unix.Mount(view.Dir(), ws, "", unix.MS_BIND, ""); err != nil {
			view.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("attach workspace to session: %w", err)
		}
		cwd = sandpit.WorkspaceDir
	}
	if req.Env != "" {
		if err := attachEnv(s.w.dir, req.Env); err != nil {
			if view != nil {
				unix.Unmount(filepath.Join(s.w.dir, "ws"), unix.MNT_DETACH)
				view.Close(context.WithoutCancel(ctx))
			}
			return nil, err
		}
		defer func() {
			if err := detachEnv(s.w.dir); err != nil {
				r.log.Warn("detach package layer from session", "session", s.name, "err", err)
			}
		}()
	}
	res.WorkspaceOpenMS = time.Since(tOpen).Milliseconds()

	call := r.sess.begin(s, id)
	before, _ := s.cg.read()
	s.cg.resetPeak()
	stdout, stderr := newCappedBuffer(r.cfg.OutputBytes), newCappedBuffer(r.cfg.OutputBytes)
	var wOut, wErr func([]byte)
	if fn := req.Output; fn != nil {
		wOut = func(p []byte) { fn(sandpit.Stdout, p) }
		wErr = func(p []byte) { fn(sandpit.Stderr, p) }
	}
	nonce := newRunID()
	dOut := s.out.begin(nonce, stdout, wOut)
	dErr := s.errs.begin(nonce, stderr, wErr)
	kind, code := "code", []byte(req.Code)
	if req.Path != "" {
		kind, code = "path", []byte(req.Path)
	}
	started := time.Now()
	tPrep := started.Sub(startedAt)
	deadline := started.Add(timeout)
	var o outcome
	if ctx.Err() != nil {
		// Cancelled before it was sent (while the session or the view was
		// being set up): nothing of it runs.
		s.out.abandon()
		s.errs.abandon()
		o = outcome{status: sandpit.StatusCancelled, exitCode: 130}
		o.names, o.more = r.sess.namesOf(s)
	} else {
		s.send(callFrame(nonce, cwd, kind, fmt.Sprintf("call %d", call), code, req.Stdin, req.Args))
		o = r.sess.await(ctx, s, nonce, dOut, dErr, deadline)
	}
	tCall := time.Since(started)
	res.Duration = time.Since(started)
	res.DurationMS = res.Duration.Milliseconds()

	after, ok := s.cg.read()
	if ok {
		res.Usage = sandpit.Usage{
			CPUUserMS:       int64(after.CPUUserNS-before.CPUUserNS) / 1e6,
			CPUSystemMS:     int64(after.CPUSysNS-before.CPUSysNS) / 1e6,
			MemoryPeakBytes: after.MemPeak,
			PidsCurrent:     after.Pids,
			OOMKilled:       after.OOMKills > before.OOMKills,
		}
	} else if o.lost != "" {
		// The sandbox is gone with its cgroup; its exit says whether the
		// memory limit killed it.
		res.Usage.OOMKilled = o.oom
	}
	res.Usage.WallMS = res.DurationMS
	res.Stdout, res.StdoutTruncated, res.StdoutBytes = stdout.result()
	res.Stderr, res.StderrTruncated, res.StderrBytes = stderr.result()
	res.Session = &sandpit.SessionResult{Name: s.name, New: isNew, Previous: prev, Call: call}

	if o.lost != "" {
		if res.Usage.OOMKilled && o.exited {
			o.lost = fmt.Sprintf("it ran out of memory (limit %d MiB) and its interpreter was killed", r.cfg.Limits.MemoryBytes>>20)
		}
		names, more := r.sess.end(s, o.lost)
		res.Status, res.ExitCode = sandpit.StatusSessionLost, o.exitCode
		res.Session.Lost, res.Session.LostReason, res.Session.LostNames, res.Session.LostMore = true, o.lost, names, more
	} else {
		res.Status, res.ExitCode = o.status, o.exitCode
		if res.Usage.OOMKilled && res.Status != sandpit.StatusTimeout && res.Status != sandpit.StatusCancelled {
			res.Status = sandpit.StatusOOM
		}
		res.Value, res.ValueTruncated = o.value, o.valueTruncated
		res.Session.Expires = r.sess.finish(s, o.names, o.more)
	}

	if view != nil {
		if err := unix.Unmount(filepath.Join(s.w.dir, "ws"), unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			r.log.Warn("detach workspace from session", "session", s.name, "err", err)
		}
		changes, cerr := view.Close(context.WithoutCancel(ctx))
		if cerr != nil {
			return nil, fmt.Errorf("workspace write-back: %w", cerr)
		}
		res.Files = changes
	}
	r.log.Debug("session call", "session", s.name, "id", id, "prepare", tPrep, "call", tCall, "total", time.Since(startedAt))
	return res, nil
}

// callFrame is a call as session.py reads it: a header line of hex
// fields, then the code (or the path) and the stdin.
func callFrame(nonce, cwd, kind, name string, code, stdin []byte, args []string) []byte {
	h := waiterHeader("call", nonce, append([]string{cwd, kind, name, strconv.Itoa(len(code)), strconv.Itoa(len(stdin))}, args...))
	return append(append(h, code...), stdin...)
}

// send queues a frame for the REPL's stdin. Frames are written in order by
// one goroutine, so a call that blocks the pipe (a REPL that stopped
// reading) never blocks the caller: its deadline still ends it.
func (s *session) send(frame []byte) {
	s.framesMu.Lock()
	defer s.framesMu.Unlock()
	if s.framesDone {
		return
	}
	select {
	case s.frames <- frame:
	default: // the queue is full: the REPL stopped reading; the deadline ends it
	}
}

func (s *session) closeFrames() {
	s.framesMu.Lock()
	defer s.framesMu.Unlock()
	if !s.framesDone {
		s.framesDone = true
		close(s.frames)
	}
}

// outcome is how a call ended.
type outcome struct {
	status         sandpit.Status
	exitCode       int
	value          string
	valueTruncated bool
	names          []string
	more           int
	lost           string // why the session ended; "" when it lives on
	exited         bool   // lost because its sandbox exited
	oom            bool
}

// sessionPayload is the REPL's end line, as untrusted as the program.
type sessionPayload struct {
	Status         string   `json:"status"`
	Exit           int      `json:"exit"`
	Value          string   `json:"value"`
	ValueTruncated bool     `json:"value_truncated"`
	Names          []string `json:"names"`
	More           int      `json:"more"`
}

// await waits for the call's end lines on both streams. At the deadline,
// or when ctx is cancelled, it interrupts the call (KeyboardInterrupt); a
// call that has not ended Grace later, a sandbox that exits, a broken end
// line or the session's age limit end the session.
func (m *sessions) await(ctx context.Context, s *session, nonce string, dOut, dErr <-chan sessionEnd, deadline time.Time) outcome {
	limit := deadline
	ageLimited := s.maxAge.Before(deadline)
	if ageLimited {
		limit = s.maxAge
	}
	timer := time.NewTimer(time.Until(limit))
	defer timer.Stop()
	var (
		out, errs   *sessionEnd
		interrupted sandpit.Status
		graceC      <-chan time.Time
		done        = ctx.Done()
	)
	interrupt := func(why sandpit.Status) {
		interrupted = why
		s.send(waiterHeader("int", nonce, nil))
		graceC = time.After(m.cfg.Grace)
		done = nil
	}
	for out == nil || errs == nil {
		select {
		case e := <-dOut:
			out = &e
			if e.broken {
				return m.lostOutcome(s, "its interpreter broke sandpit's protocol (an end line over the size limit)")
			}
		case e := <-dErr:
			errs = &e
		case <-s.exited:
			return m.lostOutcome(s, "")
		case <-timer.C:
			if ageLimited {
				return m.lostOutcome(s, fmt.Sprintf("it reached the session age limit (%s)", m.cfg.MaxAge))
			}
			interrupt(sandpit.StatusTimeout)
		case <-done:
			interrupt(sandpit.StatusCancelled)
		case <-graceC:
			why := "its call timed out"
			if interrupted == sandpit.StatusCancelled {
				why = "its call was cancelled"
			}
			return m.lostOutcome(s, fmt.Sprintf("%s and did not stop within %s of an interrupt (KeyboardInterrupt)", why, m.cfg.Grace))
		}
	}
	var p sessionPayload
	if err := json.Unmarshal(out.payload, &p); err != nil {
		return m.lostOutcome(s, "its interpreter broke sandpit's protocol (an unreadable end line)")
	}
	o := outcome{exitCode: p.Exit, more: max(p.More, 0)}
	o.value, o.valueTruncated = clipUTF8(p.Value, sessionValueMax)
	o.valueTruncated = o.valueTruncated || p.ValueTruncated
	for _, n := range p.Names {
		if len(o.names) == sessionNamesMax {
			o.more++
			continue
		}
		n, _ = clipUTF8(n, 128)
		o.names = append(o.names, n)
	}
	switch p.Status {
	case "ok":
		o.status, o.exitCode = sandpit.StatusSuccess, 0
	case "exit":
		o.status = sandpit.StatusSuccess
		if o.exitCode != 0 {
			o.status = sandpit.StatusError
		}
	case "interrupted":
		o.status = interrupted
		if o.status == "" {
			o.status = sandpit.StatusError // the program raised KeyboardInterrupt itself
		}
	default:
		o.status = sandpit.StatusError
		if o.exitCode == 0 {
			o.exitCode = 1
		}
	}
	return o
}

// lostOutcome is a call whose session ends: why, or, when empty, what its
// sandbox's exit says.
func (m *sessions) lostOutcome(s *session, why string) outcome {
	o := outcome{status: sandpit.StatusSessionLost, exitCode: 137, lost: why}
	select {
	case <-s.exited:
		o.exitCode = s.exit.Code
		o.exited = why == ""
		if why == "" {
			if g := m.goneWhy(s); g != "" {
				o.lost = g
			} else if o.exitCode == 137 {
				o.lost = "its interpreter was killed (exit 137: out of memory, or every process of the sandbox killed)"
				o.oom = true // refined from the cgroup by the caller when it can read it
			} else {
				o.lost = fmt.Sprintf("its interpreter exited (code %d; os._exit, or a crash)", o.exitCode)
			}
		}
	default:
	}
	if o.oom {
		o.oom = false
		if k, ok := s.cg.read(); ok && k.OOMKills > 0 {
			o.oom = true
		}
	}
	return o
}

// clipUTF8 cuts s to at most n bytes at a rune boundary, and makes it valid
// UTF-8.
func clipUTF8(s string, n int) (string, bool) {
	cut := false
	if len(s) > n {
		s, cut = s[:n], true
		for len(s) > 0 {
			r, size := utf8.DecodeLastRuneInString(s)
			if r != utf8.RuneError || size > 1 {
				break
			}
			s = s[:len(s)-1]
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD"), cut
}

// get returns the open session name, or starts it.
func (m *sessions) get(ctx context.Context, key sessKey, lang *LanguageSpec) (s *session, isNew bool, prev string, err error) {
	name := key.name
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, false, "", sandpit.WithHint(ErrSessionsOff, "the server is shutting down")
	}
	if s = m.open[key]; s != nil {
		m.mu.Unlock()
		// A ready session wins over a cancelled context (select would pick
		// at random): the call then ends as cancelled, not as an error.
		select {
		case <-s.ready:
		default:
			select {
			case <-s.ready:
			case <-ctx.Done():
				return nil, false, "", fmt.Errorf("session %q: %w", name, ctx.Err())
			}
		}
		if s.err != nil {
			return nil, false, "", s.err
		}
		if s.lang.Name != lang.Name {
			return nil, false, "", fmt.Errorf("%w: session %q runs %s, not %s: give language %s, or another session name", ErrInvalidRequest, name, s.lang.Name, lang.Name, s.lang.Name)
		}
		return s, false, "", nil
	}
	if mine := m.openNames(key.tenant); len(mine) >= m.cfg.perTenant() || len(m.open) >= m.cfg.Max {
		m.mu.Unlock()
		if len(mine) >= m.cfg.perTenant() {
			return nil, false, "", sandpit.Hintf(fmt.Errorf("%w: %d sessions are open (the limit): %s", ErrSessionLimit, len(mine), strings.Join(mine, ", ")),
				"close one with close_session, or run without a session")
		}
		// The server's limit, reached by others' sessions: their names
		// are not this caller's to see.
		return nil, false, "", sandpit.Hintf(fmt.Errorf("%w: the server's %d sessions are all in use (yours: %d)", ErrSessionLimit, m.cfg.Max, len(mine)),
			"try again later, or run without a session")
	}
	now := time.Now()
	s = &session{name: name, tenant: key.tenant, lang: lang, started: now, maxAge: now.Add(m.cfg.MaxAge), lastUsed: now,
		ready: make(chan struct{}), exited: make(chan struct{}), frames: make(chan []byte, 8)}
	m.open[key] = s
	prev = m.previous(key)
	m.mu.Unlock()

	if err := m.start(ctx, s); err != nil {
		m.mu.Lock()
		delete(m.open, key)
		m.mu.Unlock()
		s.err = err
		close(s.ready)
		return nil, false, "", err
	}
	close(s.ready)
	if l := m.cfg.Ledger; l != nil {
		if err := l.Record(key.tenant, name); err != nil {
			m.r.log.Warn("session not recorded: were this server lost, the next would start it afresh without saying so", "session", name, "err", err)
		}
	}
	m.r.log.Info("session started", "session", name, "tenant", key.tenant, "sandbox", s.w.sb.id)
	return s, true, prev, nil
}

// lostElsewhere says why key's session is lost when this server does not
// hold it and the ledger says another server did.
func (m *sessions) lostElsewhere(key sessKey) string {
	if m.cfg.Ledger == nil {
		return ""
	}
	m.mu.Lock()
	_, open := m.open[key]
	m.mu.Unlock()
	if open {
		return ""
	}
	return m.cfg.Ledger.Lost(key.tenant, key.name)
}

// openNames lists tenant's open sessions by name. m.mu is held.
func (m *sessions) openNames(tenant string) []string {
	var names []string
	for k := range m.open {
		if k.tenant == tenant {
			names = append(names, k.name)
		}
	}
	slices.Sort(names)
	return names
}

// start makes s's sandbox and waits for its REPL's ready line. A session
// does not take a pooled sandbox: its PID 1 is the session init, which
// watches the server's liveness (session_init.go).
func (m *sessions) start(ctx context.Context, s *session) (retErr error) {
	r := m.r
	w, alive, err := r.newSessionSandbox(ctx, s.lang.Image)
	if err != nil {
		if errors.Is(err, errNoInit) {
			return sandpit.WithHint(ErrSessionsOff, "the image has no python3 for sandpit's init")
		}
		if lost, err := r.eng.Lost(err); lost {
			return err
		}
		return fmt.Errorf("start session: %w", err)
	}
	s.w, s.alive = w, alive
	s.cg = meter{w.sb.h.Meter()}
	defer func() {
		if retErr != nil {
			s.closeFrames()
			r.background(func() { r.destroyWarm(w); alive.Close() })
		}
	}()
	if err := os.WriteFile(filepath.Join(w.dir, "src", sessionFile), []byte(sessionPy), 0o644); err != nil {
		return fmt.Errorf("session source: %w", err)
	}
	go func() {
		// The one reader of the sandbox's exit: await and the listing
		// look at exited.
		st := <-w.sb.exitC
		s.exit = st
		w.sb.finish()
		close(s.exited)
	}()
	go func() {
		for f := range s.frames {
			if _, err := w.sb.stdin.Writer().Write(f); err != nil {
				return
			}
		}
	}()
	w.sb.stdout.divert(&s.out)
	w.sb.stderr.divert(&s.errs)
	nonce := newRunID()
	boot, bootErr := newCappedBuffer(4096), newCappedBuffer(4096)
	dOut, dErr := s.out.begin(nonce, boot, nil), s.errs.begin(nonce, bootErr, nil)
	header := waiterHeader("python", "/tmp", []string{sandpit.SourceDir + "/" + sessionFile, nonce, s.lang.Name})
	s.send(append(deadlineLine(s.maxAge), header...))
	timer := time.NewTimer(sessionStartTimeout)
	defer timer.Stop()
	for n := 0; n < 2; {
		select {
		case <-dOut:
			n++
		case <-dErr:
			n++
		case <-s.exited:
			msg, _, _ := bootErr.result()
			return fmt.Errorf("session did not start: its interpreter exited (code %d): %.500s", s.exit.Code, msg)
		case <-timer.C:
			return fmt.Errorf("session did not start within %s", sessionStartTimeout)
		case <-ctx.Done():
			return fmt.Errorf("session start: %w", ctx.Err())
		}
	}
	return nil
}

// begin marks a call of s running and returns its number.
func (m *sessions) begin(s *session, id string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	s.calls++
	s.running = id
	s.lastUsed = time.Now()
	return s.calls
}

// finish marks s idle after a call, with the names its namespace holds,
// and returns when it expires unless used again.
func (m *sessions) finish(s *session, names []string, more int) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	s.running = ""
	s.lastUsed = time.Now()
	s.names, s.more = names, more
	return m.expiresLocked(s)
}

func (m *sessions) expiresLocked(s *session) time.Time {
	e := s.lastUsed.Add(m.cfg.Idle)
	if s.maxAge.Before(e) {
		e = s.maxAge
	}
	return e
}

// namesOf returns the names s held at the end of its last call.
func (m *sessions) namesOf(s *session) ([]string, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return s.names, s.more
}

func (m *sessions) runningOf(s *session) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.running == "" {
		return "(starting)"
	}
	return s.running
}

func (m *sessions) goneWhy(s *session) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return s.gone
}

// end ends s for the reason why: it leaves the list at once and its sandbox
// is destroyed in the background. It returns the names s held.
func (m *sessions) end(s *session, why string) ([]string, int) {
	m.mu.Lock()
	if s.gone != "" {
		names, more := s.names, s.more
		m.mu.Unlock()
		return names, more
	}
	s.gone = why
	s.running = ""
	if key := (sessKey{s.tenant, s.name}); m.open[key] == s {
		delete(m.open, key)
	}
	m.ended = append(m.ended, endedSession{key: sessKey{s.tenant, s.name}, why: why, at: time.Now()})
	if len(m.ended) > endedRemembered {
		m.ended = slices.Delete(m.ended, 0, len(m.ended)-endedRemembered)
	}
	names, more := s.names, s.more
	keeper := s.keeper
	s.keeper, s.keeperOf = nil, nil
	m.mu.Unlock()
	if keeper != nil {
		keeper.Release()
	}
	if l := m.cfg.Ledger; l != nil && why != whyShutdown {
		// A server that stops keeps its records: the next one says the
		// sessions are lost.
		l.Forget(s.tenant, s.name)
	}
	m.r.log.Info("session ended", "session", s.name, "tenant", s.tenant, "why", why)
	s.out.abandon()
	s.errs.abandon()
	s.closeFrames()
	if s.w != nil {
		m.r.background(func() {
			m.r.destroyWarm(s.w)
			s.alive.Close()
			s.cg.close()
		})
	}
	return names, more
}

// openView opens the workspace view of a call of s: through the session's
// keeper, which may hand back the view of its last call (see
// store/workspace/keep.go), where the workspace keeps views.
func (m *sessions) openView(s *session, ws sandpit.Workspace, ctx context.Context, id string) (sandpit.View, error) {
	kw, ok := ws.(sandpit.KeepingWorkspace)
	if !ok {
		return ws.Open(ctx, id)
	}
	m.mu.Lock()
	if s.gone != "" {
		m.mu.Unlock()
		// Its sandbox is being destroyed, perhaps not yet: the view must
		// not become the workspace's spare for the next run (review L3).
		// A released keeper keeps nothing.
		k := kw.NewKeeper()
		k.Release()
		return k.Open(ctx, id)
	}
	var old sandpit.ViewKeeper
	if s.keeper == nil || s.keeperOf != ws {
		old = s.keeper
		s.keeper, s.keeperOf = kw.NewKeeper(), ws
	}
	k := s.keeper
	m.mu.Unlock()
	if old != nil {
		old.Release()
	}
	return k.Open(ctx, id)
}

// previous says why the last session called name ended, if one did.
func (m *sessions) previous(key sessKey) string {
	for i := len(m.ended) - 1; i >= 0; i-- {
		if e := m.ended[i]; e.key == key {
			return fmt.Sprintf("a session of this name ended %s ago: %s; what it held is not in this one", time.Since(e.at).Round(time.Second), e.why)
		}
	}
	return ""
}

// reap ends sessions idle past their limit, or past their age limit, until
// the runtime closes. A session in a call is left to that call (whose
// deadline is clipped to the age limit).
func (m *sessions) reap() {
	tick := time.NewTicker(min(max(m.cfg.Idle/8, 50*time.Millisecond), 5*time.Second))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-m.r.closing:
			return
		}
		now := time.Now()
		type victim struct {
			s   *session
			why string
		}
		var vs []victim
		m.mu.Lock()
		for _, s := range m.open {
			select {
			case <-s.ready:
			default:
				continue // starting
			}
			switch {
			case s.running != "":
			case !now.Before(s.maxAge):
				vs = append(vs, victim{s, fmt.Sprintf("it reached the session age limit (%s)", m.cfg.MaxAge)})
			case now.Sub(s.lastUsed) >= m.cfg.Idle:
				vs = append(vs, victim{s, fmt.Sprintf("it was idle for %s (the idle limit)", m.cfg.Idle)})
			}
		}
		m.mu.Unlock()
		for _, v := range vs {
			if v.s.call.TryLock() { // not if a call just took it
				m.end(v.s, v.why)
				v.s.call.Unlock()
			}
		}
	}
}

// closeAll ends every session (the runtime is closing).
// whyShutdown ends every session when the server stops.
const whyShutdown = "the server shut down"

func (m *sessions) closeAll() {
	m.mu.Lock()
	m.closed = true
	all := make([]*session, 0, len(m.open))
	for _, s := range m.open {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		<-s.ready
		m.end(s, whyShutdown)
	}
}

// Sessions lists the open sessions of the server's one client (tenant "")
// with their sandboxes' memory and CPU, by name.
func (r *Runtime) Sessions() []sandpit.SessionInfo {
	return r.sessionsOf(func(t string) bool { return t == "" })
}

// AllSessions lists every tenant's open sessions, by tenant and name: the
// operator's view.
func (r *Runtime) AllSessions() []sandpit.SessionInfo {
	return r.sessionsOf(func(string) bool { return true })
}

func (r *Runtime) sessionsOf(match func(tenant string) bool) []sandpit.SessionInfo {
	m := r.sess
	m.mu.Lock()
	var all []*session
	for k, s := range m.open {
		if !match(k.tenant) {
			continue
		}
		select {
		case <-s.ready:
			all = append(all, s)
		default:
		}
	}
	m.mu.Unlock()
	out := make([]sandpit.SessionInfo, 0, len(all))
	for _, s := range all {
		out = append(out, r.sessionInfo(s))
	}
	slices.SortFunc(out, func(a, b sandpit.SessionInfo) int {
		return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Name, b.Name))
	})
	return out
}

func (r *Runtime) sessionInfo(s *session) sandpit.SessionInfo {
	m := r.sess
	m.mu.Lock()
	info := sandpit.SessionInfo{Name: s.name, Tenant: s.tenant, Language: s.lang.Name, Started: s.started.UTC(), LastUsed: s.lastUsed.UTC(),
		Calls: s.calls, Running: s.running, Expires: m.expiresLocked(s).UTC(), MaxAgeAt: s.maxAge.UTC(),
		Names: slices.Clone(s.names), More: s.more}
	m.mu.Unlock()
	if k, ok := s.cg.read(); ok {
		info.MemoryBytes, info.MemoryPeakBytes = k.MemCurrent, k.MemPeak
		info.CPUUserMS, info.CPUSystemMS = int64(k.CPUUserNS/1e6), int64(k.CPUSysNS/1e6)
	}
	return info
}

// CloseSession ends the session name and reports what it was. A call in
// progress ends with status session_lost.
func (r *Runtime) CloseSession(ctx context.Context, name string) (sandpit.SessionInfo, error) {
	return r.closeSession(ctx, sessKey{"", name})
}

func (r *Runtime) closeSession(ctx context.Context, key sessKey) (sandpit.SessionInfo, error) {
	name := key.name
	m := r.sess
	m.mu.Lock()
	s := m.open[key]
	names := m.openNames(key.tenant)
	m.mu.Unlock()
	if s == nil {
		open := "none are open"
		if len(names) > 0 {
			open = "open: " + strings.Join(names, ", ")
		}
		return sandpit.SessionInfo{}, fmt.Errorf("%w %q (%s)", ErrNoSession, name, open)
	}
	select {
	case <-s.ready:
	case <-ctx.Done():
		return sandpit.SessionInfo{}, ctx.Err()
	}
	if s.err != nil {
		return sandpit.SessionInfo{}, fmt.Errorf("%w %q (it failed to start)", ErrNoSession, name)
	}
	info := r.sessionInfo(s)
	m.end(s, "it was closed (close_session)")
	return info, nil
}

// Tenant is the runtime as one tenant sees it: its runs carry the tenant,
// and the sessions it lists, names and closes are its own. It implements
// the MCP layer's Runner and SessionManager.
type Tenant struct {
	r    *Runtime
	name string
}

// ForTenant returns the runtime as tenant name sees it.
func (r *Runtime) ForTenant(name string) *Tenant { return &Tenant{r: r, name: name} }

// Run runs req as the tenant's.
func (t *Tenant) Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	req.Tenant = t.name
	return t.r.Run(ctx, req)
}

// Languages lists the languages, as Runtime.Languages.
func (t *Tenant) Languages() []sandpit.Language { return t.r.Languages() }

// Sessions lists the tenant's open sessions, by name.
func (t *Tenant) Sessions() []sandpit.SessionInfo {
	return t.r.sessionsOf(func(tenant string) bool { return tenant == t.name })
}

// CloseSession ends the tenant's session name; another tenant's session of
// that name is not found, as one that never existed.
func (t *Tenant) CloseSession(ctx context.Context, name string) (sandpit.SessionInfo, error) {
	return t.r.closeSession(ctx, sessKey{t.name, name})
}

// meter reads a session sandbox's counters through the engine's Meter; a
// sandbox without a cgroup of its own has none, and reads fail.
type meter struct{ m engine.Meter }

func (m meter) read() (engine.Counters, bool) {
	if m.m == nil {
		return engine.Counters{}, false
	}
	return m.m.Read()
}

func (m meter) resetPeak() {
	if m.m != nil {
		m.m.ResetPeak()
	}
}

func (m meter) close() {
	if m.m != nil {
		m.m.Close()
	}
}
