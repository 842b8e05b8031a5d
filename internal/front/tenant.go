package front

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"sync"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
)

// tenant is what the front holds for one tenant: its bounds, and — built
// on its first request that passed authentication and scope checks — its
// MCP server and the two transports over it. Each tenant has its own
// transports, so a session id is looked up only among its own tenant's.
type tenant struct {
	name string
	f    *Front

	// streams is a semaphore of MaxStreamsPerTenant slots.
	streams chan struct{}

	sessMu   sync.Mutex
	reserved int // sessions being created (an initialize or /sse in flight)
	consumed int // reservations already counted as live (ids.Generate ran)
	sseOpen  int // open legacy SSE streams
	ids      *sessionIDs
	sse      sync.Map // legacy SSE session id -> *sseConn

	mu        sync.Mutex // held while building
	built     bool
	closed    bool
	streaming *server.StreamableHTTPServer
	legacy    *server.SSEServer
}

// tenantFor returns the tenant entry named name, making it (cheaply:
// nothing is built) if it is new.
func (f *Front) tenantFor(name string) *tenant {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tenants[name]
	if !ok {
		t = &tenant{
			name:    name,
			f:       f,
			streams: make(chan struct{}, f.cfg.Limits.MaxStreamsPerTenant),
			ids:     &sessionIDs{live: map[string]struct{}{}},
		}
		// A new id turns an initialize's reservation into a live session
		// at once, under the lock the cap is checked under: otherwise both
		// count until the initialize returns, and a concurrent initialize
		// is refused below the cap.
		t.ids.admit = func(add func()) {
			t.sessMu.Lock()
			defer t.sessMu.Unlock()
			add()
			if t.reserved > 0 {
				t.reserved--
				t.consumed++
			}
		}
		f.tenants[name] = t
	}
	return t
}

// errClosed: the front is shutting down.
var errClosed = sandpit.Define(sandpit.ErrUnavailable, "server is shutting down")

// build makes the tenant's transports, once. A failure is not kept: the
// next request asks the source again.
func (t *tenant) build(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errClosed
	}
	if t.built {
		return nil
	}
	srv, err := t.f.cfg.Tenants.Server(ctx, t.name)
	if err != nil {
		return fmt.Errorf("tenant %s: %w", t.name, err)
	}
	if srv == nil {
		return fmt.Errorf("tenant %s: the tenant source gave no server", t.name)
	}
	// mcp-go runs a legacy SSE message's call on a context detached from
	// every request (the answer goes out on the SSE stream), so nothing
	// would ever cancel it: this ties it to its stream.
	srv.Use(t.sseCalls)
	log := t.f.log.With("tenant", t.name)
	t.streaming = server.NewStreamableHTTPServer(srv,
		server.WithEndpointPath("/mcp"),
		server.WithSessionIdManager(t.ids),
		server.WithSessionIdleTTL(t.f.cfg.SessionIdle),
		// The front checks Host itself, against the configured public
		// name as well as loopback ones; mcp-go's check (loopback
		// connection => loopback Host) would refuse a proxy on the same
		// host that keeps the public Host header.
		server.WithDisableLocalhostProtection(true),
		server.WithStreamableHTTPLogger(log),
	)
	t.legacy = server.NewSSEServer(srv,
		server.WithSSEEndpoint("/sse"),
		server.WithMessageEndpoint("/message"),
		server.WithSSEDisableLocalhostProtection(true),
		// Restrict CORS to the allowed origins instead of mcp-go's
		// default "Access-Control-Allow-Origin: *" on the stream.
		server.WithSSECORS(server.WithCORSAllowedOrigins(t.f.originList()...)),
		server.WithSessionIDGenerator(t.newSSESession),
		server.WithSSEContextFunc(t.sseContext),
	)
	t.built = true
	return nil
}

// close stops the tenant's transports: session sweeper, listening streams.
func (t *tenant) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if !t.built {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.f.cfg.Limits.ShutdownTimeout)
	defer cancel()
	t.streaming.Shutdown(ctx) // no http.Server of its own: closes sessions, stops the sweeper
	t.legacy.CloseSessions()
}

// acquireStream takes one of the tenant's stream slots, or reports that
// they are all taken.
func (t *tenant) acquireStream() bool {
	select {
	case t.streams <- struct{}{}:
		return true
	default:
		return false
	}
}

func (t *tenant) releaseStream() { <-t.streams }

// reserveSession reserves room for one more live session, or reports that
// the tenant has MaxSessionsPerTenant. The reservation is held while the
// session is created (so concurrent ones cannot overshoot) and released
// by the returned func, once.
func (t *tenant) reserveSession() (release func(), ok bool) {
	t.sessMu.Lock()
	defer t.sessMu.Unlock()
	if t.ids.count()+t.sseOpen+t.reserved >= t.f.cfg.Limits.MaxSessionsPerTenant {
		return nil, false
	}
	t.reserved++
	return sync.OnceFunc(func() {
		t.sessMu.Lock()
		// One reservation ends: one that became a session (any one: they
		// are alike), or else this one.
		if t.consumed > 0 {
			t.consumed--
		} else {
			t.reserved--
		}
		t.sessMu.Unlock()
	}), true
}

// liveSessions counts the tenant's live sessions.
func (t *tenant) liveSessions() int {
	t.sessMu.Lock()
	defer t.sessMu.Unlock()
	return t.ids.count() + t.sseOpen
}

// sessionIDs is a tenant's Streamable HTTP session ids: made by initialize,
// forgotten on DELETE or when idle past SessionIdle (mcp-go's sweeper calls
// Terminate). An id not here — never made, another tenant's, forgotten —
// is answered 404 by mcp-go. Unlike mcp-go's InsecureStatefulSessionIdManager
// it keeps no tombstones, so it holds at most the live sessions.
type sessionIDs struct {
	mu   sync.Mutex
	live map[string]struct{}
	// admit, when set, runs add (which records a new id) under the
	// tenant's session accounting.
	admit func(add func())
}

var errUnknownSession = errors.New("unknown session")

func (s *sessionIDs) Generate() string {
	id := "mcp-session-" + rand.Text() // 128 random bits
	add := func() {
		s.mu.Lock()
		s.live[id] = struct{}{}
		s.mu.Unlock()
	}
	if s.admit != nil {
		s.admit(add)
	} else {
		add()
	}
	return id
}

func (s *sessionIDs) Validate(id string) (isTerminated bool, err error) {
	if !s.known(id) {
		return false, errUnknownSession
	}
	return false, nil
}

func (s *sessionIDs) Terminate(id string) (isNotAllowed bool, err error) {
	s.mu.Lock()
	delete(s.live, id)
	s.mu.Unlock()
	return false, nil
}

func (s *sessionIDs) known(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.live[id]
	return ok
}

func (s *sessionIDs) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// sseConn is one open legacy SSE stream: done closes when it ends.
type sseConn struct {
	id      string
	done    chan struct{}
	release func() // the session reservation, released once the stream counts
}

type sseConnKey struct{}

// newSSESession names a new SSE stream (mcp-go's session id generator):
// the stream now counts among the tenant's sessions.
func (t *tenant) newSSESession(ctx context.Context, _ *http.Request) (string, error) {
	c, ok := ctx.Value(sseConnKey{}).(*sseConn)
	if !ok {
		return "", errors.New("SSE stream opened outside the front")
	}
	c.id = rand.Text()
	t.sessMu.Lock()
	t.sseOpen++
	t.sessMu.Unlock()
	c.release()
	t.sse.Store(c.id, c)
	return c.id, nil
}

// endSSE forgets a stream that ended.
func (t *tenant) endSSE(c *sseConn) {
	close(c.done)
	if c.id == "" {
		return
	}
	t.sse.Delete(c.id)
	t.sessMu.Lock()
	t.sseOpen--
	t.sessMu.Unlock()
}

type sseCallKey struct{}

// sseContext marks a legacy message's context with its stream, for
// sseCalls.
func (t *tenant) sseContext(ctx context.Context, r *http.Request) context.Context {
	if c, ok := t.sse.Load(r.URL.Query().Get("sessionId")); ok {
		ctx = context.WithValue(ctx, sseCallKey{}, c.(*sseConn))
	}
	return ctx
}

// sseCalls is a tool middleware for calls that came as legacy SSE
// messages: mcp-go answers the POST at once and runs the call on a context
// nothing cancels, so here the call holds one of the tenant's stream slots
// and its context ends when its SSE stream does (client gone, shutdown).
// Other calls pass through untouched: their POST holds the slot and their
// request's context is cancelled when the client disconnects.
func (t *tenant) sseCalls(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		c, ok := ctx.Value(sseCallKey{}).(*sseConn)
		if !ok {
			return next(ctx, req)
		}
		if !t.acquireStream() {
			return mcpgo.NewToolResultError(fmt.Sprintf("too many calls in flight for this tenant (limit %d): wait for one to finish", cap(t.streams))), nil
		}
		defer t.releaseStream()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-c.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		return next(ctx, req)
	}
}

func contextWithSSEConn(ctx context.Context, c *sseConn) context.Context {
	return context.WithValue(ctx, sseConnKey{}, c)
}
