package front

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/mcp"
)

const (
	pathMCP      = "/mcp"
	pathSSE      = "/sse"
	pathMessage  = "/message"
	pathMetadata = server.WellKnownProtectedResourcePath
)

// ServeHTTP checks, in this order, each step cheap and bounded before the
// next: Host; route; Origin; no token in the query; the credential; the
// body (bounded in bytes and time); the scope the call needs; the
// tenant's stream and session bounds. Only then is the tenant's server
// built (once) and the request handed to its transport.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !f.hostAllowed(r.Host) {
		// DNS rebinding: a page of evil.example resolved to this address
		// sends Host evil.example.
		f.refuse(w, http.StatusForbidden, "host not allowed", fmt.Sprintf("Host %q is not a name of this server", clip(r.Host)))
		return
	}
	switch r.URL.Path {
	case pathMetadata, pathMetadata + pathMCP:
		// Public and meant for cross-origin discovery: no Origin check.
		f.metadata.ServeHTTP(w, r)
		return
	case pathMCP, pathSSE, pathMessage:
	default:
		if f.cfg.Pages == nil {
			http.NotFound(w, r)
			return
		}
	}
	if o := r.Header.Get("Origin"); o != "" && !f.origins[strings.ToLower(o)] {
		f.refuse(w, http.StatusForbidden, "origin not allowed", fmt.Sprintf("Origin %q may not call this server", clip(o)))
		return
	}
	switch r.URL.Path {
	case pathMCP, pathSSE, pathMessage:
	default:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(f.cfg.Limits.BodyTimeout))
		}
		f.cfg.Pages.ServeHTTP(w, r)
		return
	}
	if queryHasToken(r.URL.RawQuery) {
		// RFC 6750 §2.3 allows it, and it ends up in logs and histories.
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_request", error_description="send the token in the Authorization header, not the query", `+f.challenge[len("Bearer "):])
		f.refuse(w, http.StatusBadRequest, "invalid_request", "access tokens in the query string are refused: send Authorization: Bearer <token>")
		return
	}
	p, ok := f.authenticate(w, r)
	if !ok {
		return
	}
	if !auth.ValidTenant(p.Tenant) {
		f.log.Error("authenticator gave an invalid tenant name", "via", p.Via)
		f.refuse(w, http.StatusForbidden, "invalid tenant", "the credential names no valid tenant")
		return
	}
	t := f.tenantFor(p.Tenant)
	if !t.acquireStream() {
		w.Header().Set("Retry-After", "1")
		f.refuse(w, http.StatusTooManyRequests, "too_many_streams", fmt.Sprintf("tenant has %d requests or streams open (the limit): close one or wait", cap(t.streams)))
		return
	}
	defer t.releaseStream()

	var msg message
	if r.Method == http.MethodPost {
		body, release, ok := f.readBody(w, r)
		if !ok {
			return
		}
		defer release()
		m, batch, ok := peek(body)
		switch {
		case !ok:
			jsonRPCError(w, http.StatusBadRequest, nil, mcpgo.PARSE_ERROR, "the body is not one JSON-RPC message (a JSON object)")
			return
		case batch:
			// JSON-RPC batches left MCP in 2025-06-18, and mcp-go answers
			// one with a parse error anyway; refusing them here also
			// means each call's scope is checked on its own.
			jsonRPCError(w, http.StatusBadRequest, nil, mcpgo.INVALID_REQUEST, "JSON-RPC batches are not supported: send one message per request")
			return
		}
		msg = m
		if need := neededScope(msg); need != "" && !holds(p, need) {
			f.insufficientScope(w, msg, need)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	r = r.WithContext(auth.WithPrincipal(r.Context(), p))
	if f.cfg.Forward != nil {
		f.cfg.Forward.ServeHTTP(w, r)
		return
	}

	switch r.URL.Path {
	case pathMCP:
		f.serveStreamable(w, r, t, msg)
	case pathSSE:
		f.serveSSE(w, r, t)
	case pathMessage:
		f.serveMessage(w, r, t)
	}
}

func (f *Front) serveStreamable(w http.ResponseWriter, r *http.Request, t *tenant, msg message) {
	modern := mcpgo.IsModernProtocol(r.Header.Get(mcpgo.HeaderProtocolVersion))
	sid := r.Header.Get(server.HeaderKeySessionID)
	switch {
	case r.Method == http.MethodPost && msg.Method == string(mcpgo.MethodInitialize) && !modern:
		release, ok := t.reserveSession()
		if !ok {
			f.tooManySessions(w, t)
			return
		}
		defer release()
	case (r.Method == http.MethodGet || r.Method == http.MethodDelete) && !modern:
		// mcp-go takes any id on GET (and makes an id up when there is
		// none), and DELETE of an unknown id succeeds: here, as for a
		// POST, an id this tenant did not make is unknown.
		if sid == "" {
			f.refuse(w, http.StatusBadRequest, "missing session", "Mcp-Session-Id is required: initialize first")
			return
		}
		if !t.ids.known(sid) {
			f.refuse(w, http.StatusNotFound, "unknown session", "no such session: initialize again")
			return
		}
	}
	if !f.buildTenant(w, r, t) {
		return
	}
	t.streaming.ServeHTTP(w, r)
}

func (f *Front) serveSSE(w http.ResponseWriter, r *http.Request, t *tenant) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		f.refuse(w, http.StatusMethodNotAllowed, "method not allowed", "GET opens a legacy SSE stream")
		return
	}
	release, ok := t.reserveSession()
	if !ok {
		f.tooManySessions(w, t)
		return
	}
	defer release()
	if !f.buildTenant(w, r, t) {
		return
	}
	c := &sseConn{done: make(chan struct{}), release: release}
	defer t.endSSE(c)
	r = r.WithContext(contextWithSSEConn(r.Context(), c))
	t.legacy.SSEHandler().ServeHTTP(w, r)
}

func (f *Front) serveMessage(w http.ResponseWriter, r *http.Request, t *tenant) {
	// The stream must be this tenant's: another tenant's id is unknown
	// here, as is one that ended.
	if _, ok := t.sse.Load(r.URL.Query().Get("sessionId")); !ok {
		f.refuse(w, http.StatusNotFound, "unknown session", "no such SSE session: open /sse again")
		return
	}
	if !f.buildTenant(w, r, t) {
		return
	}
	t.legacy.MessageHandler().ServeHTTP(w, r)
}

// buildTenant builds t's server on its first use, answering the classed
// error of a failure.
func (f *Front) buildTenant(w http.ResponseWriter, r *http.Request, t *tenant) bool {
	err := t.build(r.Context())
	if err == nil {
		return true
	}
	status, code := http.StatusInternalServerError, "internal error"
	msg := "the tenant's server could not be started"
	switch sandpit.ClassOf(err) {
	case sandpit.ErrResourceExhausted:
		status, code, msg = http.StatusTooManyRequests, "resource exhausted", err.Error()
		w.Header().Set("Retry-After", "5")
	case sandpit.ErrUnavailable:
		status, code, msg = http.StatusServiceUnavailable, "unavailable", err.Error()
		w.Header().Set("Retry-After", "5")
	case sandpit.ErrInvalidArgument, sandpit.ErrNotFound:
		status, code, msg = http.StatusForbidden, "tenant refused", err.Error()
	case sandpit.ErrConflict:
		status, code, msg = http.StatusConflict, "conflict", err.Error()
	default:
		f.log.Error("tenant server", "tenant", t.name, "err", err)
	}
	if h := sandpit.HintOf(err); h != "" && status != http.StatusInternalServerError {
		msg += " (hint: " + h + ")"
	}
	f.refuse(w, status, code, msg)
	return false
}

// authenticate answers 401 (or 503 when the authenticator cannot decide)
// and reports false, or returns the principal.
func (f *Front) authenticate(w http.ResponseWriter, r *http.Request) (auth.Principal, bool) {
	if f.cfg.InsecureNoAuth {
		return auth.Principal{Tenant: NoAuthTenant, Scopes: auth.AllScopes, Via: "none"}, true
	}
	p, err := f.cfg.Auth.Authenticate(r.Context(), r)
	switch {
	case err == nil:
		return p, true
	case errors.Is(err, auth.ErrNoCredentials):
		w.Header().Set("WWW-Authenticate", f.challenge)
		f.refuse(w, http.StatusUnauthorized, "unauthorized", "this server needs a bearer token: Authorization: Bearer <token>")
	case errors.Is(err, auth.ErrInvalidToken):
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", `+f.challenge[len("Bearer "):])
		f.refuse(w, http.StatusUnauthorized, "invalid_token", "the bearer token is not valid here (unknown, revoked, expired, or for another resource)")
	case errors.Is(err, auth.ErrInsufficientScope):
		w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", `+f.challenge[len("Bearer "):])
		f.refuse(w, http.StatusForbidden, "insufficient_scope", "the token does not allow this server")
	case sandpit.ClassOf(err) == sandpit.ErrUnavailable:
		f.log.Warn("authentication unavailable", "err", err)
		w.Header().Set("Retry-After", "5")
		f.refuse(w, http.StatusServiceUnavailable, "unavailable", "authentication is unavailable for now: try again")
	default:
		f.log.Error("authentication failed", "err", err)
		f.refuse(w, http.StatusInternalServerError, "internal error", "authentication failed")
	}
	return auth.Principal{}, false
}

// readBody reads r's body whole, bounded in bytes (413 past
// MaxBodyBytes, without reading the rest) and time (BodyTimeout, a
// deadline armed for the body alone).
func (f *Front) readBody(w http.ResponseWriter, r *http.Request) (_ []byte, release func(), ok bool) {
	max := f.cfg.Limits.MaxBodyBytes
	if r.ContentLength > max {
		f.tooLarge(w, r)
		return nil, nil, false
	}
	// Bodies held at once, over all connections and tenants, are bounded
	// too: a body without a length is counted at the most it may be.
	want := r.ContentLength
	if want < 0 {
		want = max
	}
	if !f.bodies.TryAcquire(want) {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Connection", "close")
		f.refuse(w, http.StatusServiceUnavailable, "busy", "the server is holding as many request bodies as it may: try again")
		return nil, nil, false
	}
	held := sync.OnceFunc(func() { f.bodies.Release(want) })
	defer func() {
		if !ok {
			held()
		}
	}()
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(f.cfg.Limits.BodyTimeout)) == nil
	n := r.ContentLength
	if n < 0 || n > 64<<10 {
		n = 64 << 10 // grow as bytes arrive, not as a header claims
	}
	buf := bytes.NewBuffer(make([]byte, 0, n+1))
	_, err := buf.ReadFrom(io.LimitReader(r.Body, max+1))
	if err != nil {
		// The rest of the body is not waited for (the deadline stays
		// armed): the connection ends with this answer.
		w.Header().Set("Connection", "close")
		if errors.Is(err, os.ErrDeadlineExceeded) {
			f.refuse(w, http.StatusRequestTimeout, "request timeout", fmt.Sprintf("the body took longer than %v to arrive", f.cfg.Limits.BodyTimeout))
		} else {
			f.refuse(w, http.StatusBadRequest, "bad request", "reading the body failed")
		}
		return nil, nil, false
	}
	if int64(buf.Len()) > max {
		f.tooLarge(w, r)
		return nil, nil, false
	}
	if deadline {
		// Disarm before handing on: a deadline left armed fires in
		// net/http's background read once the body is done and cancels
		// the request's context, cutting a long call.
		rc.SetReadDeadline(time.Time{})
	}
	return buf.Bytes(), held, true
}

func (f *Front) tooLarge(w http.ResponseWriter, r *http.Request) {
	// The rest is not read: close the connection instead.
	w.Header().Set("Connection", "close")
	f.refuse(w, http.StatusRequestEntityTooLarge, "request too large", fmt.Sprintf("the body is larger than %d bytes, the largest message this server reads", f.cfg.Limits.MaxBodyBytes))
}

func (f *Front) tooManySessions(w http.ResponseWriter, t *tenant) {
	w.Header().Set("Retry-After", "5")
	f.refuse(w, http.StatusTooManyRequests, "too_many_sessions",
		fmt.Sprintf("tenant has %d live sessions (the limit %d): end one (DELETE /mcp, or close its SSE stream), or wait %v for an idle one to expire",
			t.liveSessions(), f.cfg.Limits.MaxSessionsPerTenant, f.cfg.SessionIdle))
}

func (f *Front) insufficientScope(w http.ResponseWriter, m message, need string) {
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q, %s`, need, f.challenge[len("Bearer "):]))
	what := m.Method
	switch {
	case m.Params.Name != "":
		what += " " + m.Params.Name
	case m.Params.URI != "":
		what += " " + m.Params.URI
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	json.NewEncoder(w).Encode(map[string]string{
		"error":             "insufficient_scope",
		"error_description": fmt.Sprintf("%s needs scope %s, which this token does not hold", clip(what), need),
		"scope":             need,
	})
}

// hostAllowed reports whether host (a Host header) names this server.
func (f *Front) hostAllowed(host string) bool {
	h := strings.ToLower(host)
	if f.hosts[h] {
		return true
	}
	name, _, err := net.SplitHostPort(h)
	if err != nil {
		name = h
	} else if strings.Contains(name, ":") {
		name = "[" + name + "]"
	}
	return f.hostNames[name]
}

func (f *Front) originList() []string {
	out := make([]string, 0, len(f.origins))
	for o := range f.origins {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

// queryHasToken reports whether a raw query carries access_token (RFC 6750
// §2.3), without decoding it unless the name appears at all.
func queryHasToken(raw string) bool {
	if !strings.Contains(strings.ToLower(raw), "access") { // also access%5Ftoken
		return false
	}
	for _, kv := range strings.Split(raw, "&") {
		k, _, _ := strings.Cut(kv, "=")
		if k, err := urlUnescape(k); err == nil && strings.EqualFold(k, "access_token") {
			return true
		}
	}
	return false
}

// plainError writes an OAuth-style JSON error body (RFC 6750 §3 names).
// refuse answers an error the front itself decided and, with Events,
// keeps it for the operator's view.
func (f *Front) refuse(w http.ResponseWriter, status int, code, desc string) {
	if f.cfg.Events != nil && status != http.StatusNotFound {
		f.cfg.Events.Add(mcp.Event{Kind: refusalKind(status), Tool: "HTTP " + strconv.Itoa(status), Message: code + ": " + desc})
	}
	plainError(w, status, code, desc)
}

// refusalKind classes a refusal as the tool events are.
func refusalKind(status int) string {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return mcp.EventRefused
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests, http.StatusRequestTimeout:
		return mcp.EventLimit
	case http.StatusServiceUnavailable:
		return mcp.EventUnavailable
	case http.StatusInternalServerError:
		return mcp.EventFailed
	}
	return mcp.EventRefused
}

func plainError(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
}

func jsonRPCError(w http.ResponseWriter, status int, id any, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(mcpgo.JSONRPCError{
		JSONRPC: mcpgo.JSONRPC_VERSION,
		ID:      mcpgo.NewRequestId(id),
		Error:   mcpgo.JSONRPCErrorDetails{Code: code, Message: msg},
	})
}

// clip bounds a client-given string echoed in an error.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func urlUnescape(s string) (string, error) { return url.QueryUnescape(s) }
