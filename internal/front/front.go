// Package front is sandpit's front door over HTTP: listener, bounds,
// Origin/Host checks, authentication, routing each request to its tenant's
// MCP server.
//
// Its guarantees: no MCP route answers a request before its Host, Origin
// and credential are checked, and no tenant state is touched (or built)
// before that; a request reaches only the MCP server of the tenant its
// credential names, so one tenant's session ids are unknown to another's;
// a call that needs a scope the credential lacks is refused before it
// reaches a handler; every input (connections, header and body bytes, time
// to send them, live sessions and open streams per tenant) is bounded.
package front

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"golang.org/x/sync/semaphore"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/mcp"
)

// TenantSource gives the MCP server of a tenant. The front asks for it once
// per tenant, when that tenant's first authenticated request arrives, and
// keeps it until Serve returns; the source builds it (once). An error is
// classed (sandpit.ErrResourceExhausted, ErrUnavailable...) and answered
// with the matching HTTP status; the front asks again on the next request.
type TenantSource interface {
	Server(ctx context.Context, tenant string) (*server.MCPServer, error)
}

// TenantSourceFunc adapts a function to TenantSource.
type TenantSourceFunc func(ctx context.Context, tenant string) (*server.MCPServer, error)

// Server calls f.
func (f TenantSourceFunc) Server(ctx context.Context, tenant string) (*server.MCPServer, error) {
	return f(ctx, tenant)
}

// NoAuthTenant is the tenant every request acts for under InsecureNoAuth.
const NoAuthTenant = "default"

// Config configures a Front. Addr, Tenants and (unless InsecureNoAuth) Auth
// are required.
type Config struct {
	// Addr is the address to listen on, host:port. A loopback host
	// (127.0.0.1, ::1, localhost) is the only one allowed without TLS,
	// unless InsecureHTTP.
	Addr string
	// TLSCert and TLSKey are PEM files; both or neither.
	TLSCert, TLSKey string
	// InsecureHTTP allows a non-loopback Addr without TLS: TLS is
	// terminated by a proxy in front.
	InsecureHTTP bool
	// InsecureNoAuth turns authentication off: every request acts for
	// tenant "default" with every scope. Refused unless Addr is loopback.
	InsecureNoAuth bool
	// PublicURL is the base URL clients use (scheme://host[:port], no
	// path). Default: from Addr and TLS; required when Addr's host is
	// unspecified (0.0.0.0, ::). The OAuth resource is PublicURL+"/mcp".
	PublicURL string
	// AllowedOrigins (scheme://host[:port]) and AllowedHosts (host or
	// host:port; without a port, any port) are allowed beyond PublicURL's
	// own, and beyond the loopback names when Addr is loopback.
	AllowedOrigins, AllowedHosts []string

	// Auth proves who a request is.
	Auth auth.Authenticator
	// AuthorizationServers are the OAuth issuers the RFC 9728 document
	// names.
	AuthorizationServers []string

	// Tenants gives each tenant's MCP server.
	Tenants TenantSource
	// Forward, when set, serves every MCP request instead of a tenant's
	// server here, once the checks above passed (Host, Origin,
	// authentication, the tenant's stream bound, the body's size, the
	// call's scope): a cluster's front door forwards it to the tenant's
	// node. The request's context carries the auth.Principal; the body was
	// read and is replayable. Tenants is not used then.
	Forward http.Handler

	// Pages, when set, serves every path that is not MCP's or the OAuth
	// metadata's (the dashboard), after the Host and Origin checks. It
	// authenticates its requests itself and bounds their bodies; the
	// front bounds the time to send one (BodyTimeout).
	Pages http.Handler

	// SessionIdle is how long a Streamable HTTP session may stay idle
	// before it is forgotten (its id then answers 404). Default 30m.
	SessionIdle time.Duration

	// Events, when set, keeps the requests the front refused (no or a bad
	// token, a foreign Origin or Host, a bound reached), for the
	// operator's view; 404s of unknown sessions are not kept.
	Events *mcp.Events

	Limits Limits
	Logger *slog.Logger
}

// Limits bounds what a client can make the front hold. Zero fields take the
// defaults below.
type Limits struct {
	// MaxBodyBytes bounds a request body; a longer one is answered 413
	// without being read whole. Default mcp.DefaultMaxMessageBytes (24 MiB,
	// the stdio transport's bound).
	MaxBodyBytes int64
	// MaxBodyBytesInFlight bounds the request bodies held at once, over
	// every connection and tenant (a body without Content-Length counts as
	// MaxBodyBytes); a request past it is answered 503. Default 256 MiB.
	MaxBodyBytesInFlight int64
	// MaxHeaderBytes bounds the request line and headers. Default 64 KiB.
	MaxHeaderBytes int
	// MaxConns bounds open connections; one more is answered 503 (plain
	// HTTP) or closed (TLS) at once. Default 256.
	MaxConns int
	// MaxSessionsPerTenant bounds a tenant's live sessions: Streamable
	// HTTP sessions (until DELETE or SessionIdle) plus open legacy SSE
	// streams. Default 32.
	MaxSessionsPerTenant int
	// MaxStreamsPerTenant bounds a tenant's requests in flight: POSTs
	// being answered, GET streams, SSE streams, and calls made through
	// legacy SSE messages. Default 32.
	MaxStreamsPerTenant int
	// ReadHeaderTimeout bounds the time to send the request headers
	// (slowloris). Default 10s.
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds the time to send an authenticated request's body.
	// It is a per-request deadline, not http.Server.ReadTimeout: that one
	// stays armed after the body and cancels the request's context when
	// it fires, which would cut every call longer than it. Default 2m.
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long. Default 2m.
	IdleTimeout time.Duration
	// ShutdownTimeout bounds how long Serve waits, after its context is
	// done and in-flight calls are cancelled, for handlers to return.
	// Default 10s.
	ShutdownTimeout time.Duration
}

func (l *Limits) defaults() {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = mcp.DefaultMaxMessageBytes
	}
	if l.MaxBodyBytesInFlight <= 0 {
		l.MaxBodyBytesInFlight = 256 << 20
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.MaxConns <= 0 {
		l.MaxConns = 256
	}
	if l.MaxSessionsPerTenant <= 0 {
		l.MaxSessionsPerTenant = 32
	}
	if l.MaxStreamsPerTenant <= 0 {
		l.MaxStreamsPerTenant = 32
	}
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = 10 * time.Second
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = 2 * time.Minute
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 2 * time.Minute
	}
	if l.ShutdownTimeout <= 0 {
		l.ShutdownTimeout = 10 * time.Second
	}
}

// DefaultSessionIdle is Config.SessionIdle's default.
const DefaultSessionIdle = 30 * time.Minute

// Front serves MCP over HTTP for many tenants.
type Front struct {
	cfg      Config
	log      *slog.Logger
	loopback bool // Addr is a loopback address
	tls      *tls.Config

	// Derived from PublicURL; set by New, or by Serve when Addr's port
	// was 0 and PublicURL was not given, and read-only once serving.
	public      string
	resource    string // public+"/mcp"
	metadataURL string
	challenge   string // the WWW-Authenticate value of a plain 401
	hosts       map[string]bool
	hostNames   map[string]bool // entries without a port: any port
	origins     map[string]bool
	metadata    http.Handler
	derivedURL  bool

	// base is every request's parent context; cancelling it cancels
	// in-flight calls (shutdown).
	base   context.Context
	cancel context.CancelFunc

	// bodies is the budget of request body bytes held at once.
	bodies *semaphore.Weighted

	mu      sync.Mutex
	tenants map[string]*tenant
}

// New checks cfg and returns a Front. It refuses a non-loopback Addr
// without TLS (unless InsecureHTTP), InsecureNoAuth on a non-loopback
// Addr, a missing Authenticator, and TLS files it cannot load.
func New(cfg Config) (*Front, error) {
	cfg.Limits.defaults()
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Tenants == nil && cfg.Forward == nil {
		return nil, fmt.Errorf("front: no tenant source: %w", sandpit.ErrInvalidArgument)
	}
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: want host:port (e.g. 127.0.0.1:8080): %w", cfg.Addr, sandpit.ErrInvalidArgument)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, fmt.Errorf("listen address %q: bad port: %w", cfg.Addr, sandpit.ErrInvalidArgument)
	}
	f := &Front{cfg: cfg, log: cfg.Logger, loopback: isLoopback(host), tenants: map[string]*tenant{},
		bodies: semaphore.NewWeighted(max(cfg.Limits.MaxBodyBytesInFlight, cfg.Limits.MaxBodyBytes))}
	useTLS := cfg.TLSCert != "" || cfg.TLSKey != ""
	if useTLS {
		if cfg.TLSCert == "" || cfg.TLSKey == "" {
			return nil, fmt.Errorf("TLS needs both a certificate and a key file: %w", sandpit.ErrInvalidArgument)
		}
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("TLS certificate %s / key %s: %v: %w", cfg.TLSCert, cfg.TLSKey, err, sandpit.ErrInvalidArgument)
		}
		f.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	}
	if !f.loopback && !useTLS && !cfg.InsecureHTTP {
		return nil, sandpit.Hintf(fmt.Errorf("listen address %s is not loopback and there is no TLS: bearer tokens would cross the network in clear: %w", cfg.Addr, sandpit.ErrInvalidArgument),
			"give a certificate and key, listen on 127.0.0.1, or (TLS terminated by a proxy in front) allow plain HTTP explicitly")
	}
	if cfg.InsecureNoAuth && !f.loopback {
		return nil, fmt.Errorf("no authentication on non-loopback address %s: anyone who reaches it would run code: %w", cfg.Addr, sandpit.ErrInvalidArgument)
	}
	if !cfg.InsecureNoAuth && cfg.Auth == nil {
		return nil, fmt.Errorf("front: no authenticator (and no-auth not asked for): %w", sandpit.ErrInvalidArgument)
	}
	public := cfg.PublicURL
	if public == "" {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return nil, fmt.Errorf("listen address %s names no host clients can use: give the public URL: %w", cfg.Addr, sandpit.ErrInvalidArgument)
		}
		scheme := "http"
		if useTLS {
			scheme = "https"
		}
		public = scheme + "://" + net.JoinHostPort(host, port)
		f.derivedURL = true
	}
	if err := f.setPublic(public); err != nil {
		return nil, err
	}
	f.base, f.cancel = context.WithCancel(context.Background())
	return f, nil
}

// setPublic derives what depends on the public URL.
func (f *Front) setPublic(public string) error {
	u, err := url.Parse(public)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("public URL %q: want scheme://host[:port] with no path: %w", public, sandpit.ErrInvalidArgument)
	}
	f.public = u.Scheme + "://" + strings.ToLower(u.Host)
	f.resource = f.public + "/mcp"
	f.metadataURL = f.public + server.WellKnownProtectedResourcePath
	f.challenge = `Bearer resource_metadata="` + f.metadataURL + `"`
	f.metadata = server.NewProtectedResourceMetadataHandler(server.ProtectedResourceMetadataConfig{
		Resource:               f.resource,
		AuthorizationServers:   f.cfg.AuthorizationServers,
		ScopesSupported:        auth.AllScopes,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "sandpit",
	})

	f.origins = map[string]bool{f.public: true}
	f.hosts = map[string]bool{}
	f.hostNames = map[string]bool{}
	f.addHost(u.Host, u.Scheme)
	for _, o := range f.cfg.AllowedOrigins {
		ou, err := url.Parse(o)
		if err != nil || ou.Scheme == "" || ou.Host == "" {
			return fmt.Errorf("allowed origin %q: want scheme://host[:port]: %w", o, sandpit.ErrInvalidArgument)
		}
		f.origins[strings.ToLower(ou.Scheme+"://"+ou.Host)] = true
	}
	for _, h := range f.cfg.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/ ") {
			return fmt.Errorf("allowed host %q: want host or host:port: %w", h, sandpit.ErrInvalidArgument)
		}
		f.addHost(h, "")
	}
	if f.loopback {
		for _, n := range []string{"localhost", "127.0.0.1", "[::1]"} {
			f.hostNames[n] = true
		}
		_, port, _ := net.SplitHostPort(u.Host)
		if port == "" {
			port = defaultPort(u.Scheme)
		}
		for _, s := range []string{"http", "https"} {
			for _, n := range []string{"localhost", "127.0.0.1", "[::1]"} {
				f.origins[s+"://"+n+":"+port] = true
			}
		}
	}
	return nil
}

// addHost allows h (host or host:port). A host given with its scheme's
// default port also matches without one, as clients omit it.
func (f *Front) addHost(h, scheme string) {
	h = strings.ToLower(h)
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		if scheme == "" {
			f.hostNames[h] = true
			return
		}
		f.hosts[h] = true
		f.hosts[h+":"+defaultPort(scheme)] = true
		return
	}
	f.hosts[h] = true
	if scheme != "" && port == defaultPort(scheme) {
		f.hosts[bracket(host)] = true
	}
}

func bracket(host string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// PublicURL is the base URL clients use; the MCP endpoint is PublicURL()+"/mcp".
func (f *Front) PublicURL() string { return f.public }

// Serve serves on ln until ctx is done, then shuts down: it stops
// accepting, cancels every in-flight call's context, and waits (up to
// Limits.ShutdownTimeout) for handlers to return. ln is wrapped with the
// connection bound and, when configured, TLS. It returns nil after a
// shutdown asked for by ctx.
func (f *Front) Serve(ctx context.Context, ln net.Listener) error {
	if f.derivedURL {
		// Addr may have said port 0: the URL clients use has the real one.
		if _, port, _ := net.SplitHostPort(f.cfg.Addr); port == "0" {
			scheme := "http"
			if f.tls != nil {
				scheme = "https"
			}
			if err := f.setPublic(scheme + "://" + ln.Addr().String()); err != nil {
				return err
			}
		}
	}
	lim := f.cfg.Limits
	ln = newLimitListener(ln, lim.MaxConns, f.tls == nil)
	if f.tls != nil {
		ln = tls.NewListener(ln, f.tls)
	}
	srv := &http.Server{
		Handler:           f,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return f.base },
		ErrorLog:          slog.NewLogLogger(f.log.Handler(), slog.LevelDebug),
	}
	if f.tls != nil {
		srv.TLSConfig = f.tls
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	f.log.Info("serving MCP over HTTP", "url", f.resource, "tls", f.tls != nil, "auth", !f.cfg.InsecureNoAuth)
	select {
	case err := <-errc:
		f.shutdown()
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	f.shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), lim.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		f.log.Warn("handlers still running after shutdown timeout; closing their connections", "timeout", lim.ShutdownTimeout)
		err = srv.Close()
	}
	<-errc
	return err
}

// shutdown cancels every in-flight request and stops every tenant's
// transports (session sweepers, listening streams).
func (f *Front) shutdown() {
	f.cancel()
	f.mu.Lock()
	ts := make([]*tenant, 0, len(f.tenants))
	for _, t := range f.tenants {
		ts = append(ts, t)
	}
	f.mu.Unlock()
	for _, t := range ts {
		t.close()
	}
}

// Handler is the front as an http.Handler, for tests and for callers that
// run their own http.Server (who then own its bounds).
func (f *Front) Handler() http.Handler { return f }
