// Package dash is sandpit's dashboard: the pages a person reads to see what
// the agents ran — runs in flight and sessions, the history with each run's
// code, output and files, the workspace, snapshots and metrics as charts.
//
// Its guarantees: every page is server-rendered HTML (it reads without
// JavaScript; a small embedded script only refreshes the live view), served
// with a Content-Security-Policy that allows no inline script or style and
// no other origin; everything a program or an agent wrote is escaped, and
// control characters (ANSI escapes) are shown as visible symbols; a page is
// bounded (pagination, output cut with a download of what was kept); a
// request acts for exactly one tenant, proven by its bearer token or by a
// login session cookie (HttpOnly, SameSite=Strict) made from one, and sees
// only that tenant's state, another tenant's run being "not found" as one
// that never existed; every state-changing action is a POST carrying the
// session's CSRF token, reached through a confirmation page.
package dash

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/store/history"
	"github.com/sandpit-dev/sandpit/store/snapshot"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// History is what the pages read of a tenant's history.
type History interface {
	List(ctx context.Context, f history.Filter) ([]history.Run, error)
	Get(ctx context.Context, id string) (history.Run, error)
}

// Files is what the pages read of a tenant's workspace.
type Files interface {
	List(ctx context.Context, path string, recursive bool) (workspace.Listing, error)
	Read(ctx context.Context, path string, offset, limit int64) (workspace.Content, error)
}

// Snapshots is what the pages read and do with a tenant's snapshots.
type Snapshots interface {
	List(ctx context.Context) ([]snapshot.Snapshot, error)
	Diff(ctx context.Context, id string) (snapshot.Diff, error)
	Restore(ctx context.Context, id string) error
}

// Tenant is one tenant's state as the pages see it. Nil fields are pages
// the server does not have (a server without a workspace...).
type Tenant struct {
	History   History
	Runs      *mcp.Runs
	Files     Files
	Snapshots Snapshots
	Sessions  func() []sandpit.SessionInfo
	// Rerun, when set, starts a recorded run's program again in a fresh
	// sandbox, in the background, and returns the new run's id.
	Rerun func(ctx context.Context, r history.Run) (string, error)
	// Events are the tenant's tool calls refused or failed.
	Events *mcp.Events
	// SessionMemory, when set, is the tenant's sessions' memory over the
	// last hour.
	SessionMemory func() []MemorySample
}

// PoolSample is the warm pool at one moment.
type PoolSample struct {
	Time          time.Time
	Ready, Target int
	// HitRate is the share of runs since the sample before that found a
	// sandbox ready (0…1); negative when there were none.
	HitRate float64
}

// MemorySample is memory in use at one moment.
type MemorySample struct {
	Time  time.Time
	Bytes uint64
}

// TenantSummary is one tenant in the operator's view.
type TenantSummary struct {
	Name           string
	Runs           int64
	LastRun        time.Time
	CPUHourMS      int64
	FailedHour     int64
	WorkspaceBytes int64
	Open           bool             // served now (its refusals are known)
	Refusals       map[string]int64 // by kind, since the server started
}

// Source gives a tenant's state; an error is classed as the front's
// TenantSource's are.
type Source interface {
	Tenant(ctx context.Context, name string) (*Tenant, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context, name string) (*Tenant, error)

// Tenant calls f.
func (f SourceFunc) Tenant(ctx context.Context, name string) (*Tenant, error) { return f(ctx, name) }

// Config configures a Dash.
type Config struct {
	// Auth proves a bearer token: one sent with a request, or the one a
	// person logs in with (kept in memory, checked again on every request,
	// so a revoked or expired token ends its login sessions).
	Auth auth.Authenticator
	// NoAuth: every request acts for tenant NoAuthTenant (the front's
	// --insecure-no-auth, loopback only).
	NoAuth       bool
	NoAuthTenant string
	Tenants      Source
	// ReadOnly serves reading only: no cancel, restore or run again
	// (sandpit ui, beside a stdio server that owns the state).
	ReadOnly bool
	// Operators are the tenants (token names, OAuth subjects) who also see
	// /operator: every tenant's figures and the server's refusals.
	Operators []string
	// Summaries lists every tenant with its figures, for the operator
	// page (it may read every tenant's stores: not for every request).
	Summaries func(ctx context.Context) ([]TenantSummary, error)
	// TenantNames lists the tenants cheaply, for an operator's ?tenant=
	// and the history's tenant filter; nil: the names of Summaries.
	TenantNames func(ctx context.Context) ([]string, error)
	// ServerEvents are the requests the front refused (no token, a bad
	// one, a foreign Origin, a bound), for operators.
	ServerEvents *mcp.Events
	// Pool, when set, is the warm pool over the last hour (shared by all
	// tenants).
	Pool func() []PoolSample
	// Secure marks the session cookie Secure (the server is reached over
	// TLS, its own or a proxy's).
	Secure bool
	// Now is the clock (tests); default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Dash serves the dashboard's pages.
type Dash struct {
	cfg      Config
	log      *slog.Logger
	logins   *logins
	pages    map[string]*template.Template
	mux      *http.ServeMux
	codeCSS  []byte
	staticFS fs.FS
	oauth    *OAuthLogin // nil: tokens only
	pending  pendingLogins
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Paths the dashboard serves (beside the front's MCP routes).
var Paths = []string{"/", "/login", "/logout", "/live", "/runs", "/runs/", "/workspace", "/workspace/", "/snapshots", "/snapshots/", "/metrics", "/security", "/operator", "/static/", "/favicon.ico"}

// New returns a Dash.
func New(cfg Config) (*Dash, error) {
	if cfg.Tenants == nil {
		return nil, fmt.Errorf("dash: no tenant source: %w", sandpit.ErrInvalidArgument)
	}
	if !cfg.NoAuth && cfg.Auth == nil {
		return nil, fmt.Errorf("dash: no authenticator: %w", sandpit.ErrInvalidArgument)
	}
	if cfg.NoAuth && cfg.NoAuthTenant == "" {
		cfg.NoAuthTenant = "default"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := &Dash{cfg: cfg, log: cfg.Logger, logins: newLogins(cfg.Now)}
	if err := d.parse(); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	d.staticFS = sub
	d.codeCSS = codeCSS()
	d.routes()
	return d, nil
}

func (d *Dash) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /static/code.css", d.serveCodeCSS)
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(d.staticFS)))
	m.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, d.staticFS, "favicon.svg")
	})
	m.HandleFunc("GET /login", d.loginPage)
	m.HandleFunc("POST /login", d.login)
	m.HandleFunc("POST /logout", d.logout)
	m.HandleFunc("GET /login/oauth", d.oauthStart)
	m.HandleFunc("GET /login/callback", d.oauthCallback)

	m.HandleFunc("GET /{$}", d.tenantPage(auth.ScopeRun, d.livePage))
	m.HandleFunc("GET /live", d.tenantPage(auth.ScopeRun, d.liveFragment))
	m.HandleFunc("GET /runs", d.tenantPage(auth.ScopeRun, d.runsPage))
	m.HandleFunc("GET /runs/{id}", d.tenantPage(auth.ScopeRun, d.runPage))
	m.HandleFunc("GET /runs/{id}/{stream}", d.tenantPage(auth.ScopeRun, d.runOutput))
	m.HandleFunc("GET /runs/{id}/cancel", d.tenantPage(auth.ScopeRun, d.cancelConfirm))
	m.HandleFunc("GET /runs/{id}/diff", d.tenantPage(auth.ScopeFiles, d.runDiff))
	m.HandleFunc("POST /runs/{id}/cancel", d.tenantAction(auth.ScopeRun, d.cancel))
	m.HandleFunc("GET /runs/{id}/rerun", d.tenantPage(auth.ScopeRun, d.rerunConfirm))
	m.HandleFunc("POST /runs/{id}/rerun", d.tenantAction(auth.ScopeRun, d.rerun))
	m.HandleFunc("GET /workspace", d.tenantPage(auth.ScopeFiles, d.workspacePage))
	m.HandleFunc("GET /workspace/view", d.tenantPage(auth.ScopeFiles, d.filePage))
	m.HandleFunc("GET /workspace/raw", d.tenantPage(auth.ScopeFiles, d.fileRaw))
	m.HandleFunc("GET /snapshots", d.tenantPage(auth.ScopeFiles, d.snapshotsPage))
	m.HandleFunc("GET /snapshots/{id}", d.tenantPage(auth.ScopeFiles, d.snapshotPage))
	m.HandleFunc("GET /snapshots/{id}/restore", d.tenantPage(auth.ScopeFiles, d.restoreConfirm))
	m.HandleFunc("POST /snapshots/{id}/restore", d.tenantAction(auth.ScopeFiles, d.restore))
	m.HandleFunc("GET /metrics", d.tenantPage(auth.ScopeRun, d.metricsPage))
	m.HandleFunc("GET /security", d.tenantPage(auth.ScopeRun, d.securityPage))
	m.HandleFunc("GET /operator", d.tenantPage(auth.ScopeRun, d.operatorPage))
	m.HandleFunc("GET /metrics/{chart}", d.tenantPage(auth.ScopeRun, d.metricsChart))
	d.mux = m
}

// csp allows the page's own script, styles and images and nothing else:
// no inline script or style, no other origin, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// maxFormBytes bounds a form's body (a token, a CSRF token).
const maxFormBytes = 16 << 10

// ServeHTTP serves the dashboard. The caller (the front) has checked Host
// and Origin.
func (d *Dash) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: under no-referrer a browser sends
	// "Origin: null" with a form post, which the front's Origin check
	// (rightly) refuses.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if !strings.HasPrefix(r.URL.Path, "/static/") {
		h.Set("Cache-Control", "no-store")
	}
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	}
	d.mux.ServeHTTP(w, r)
}

// viewer is who a request acts for.
type viewer struct {
	p        auth.Principal
	login    *login // nil for a bearer or no-auth request
	t        *Tenant
	operator bool
	// other is the tenant an operator is viewing (?tenant=NAME), read
	// only; "" for the viewer's own.
	other string
}

// csrf is the token a POST form of this viewer carries.
func (v *viewer) csrf() string {
	if v.login == nil {
		return ""
	}
	return v.login.csrf
}

type pageFunc func(w http.ResponseWriter, r *http.Request, v *viewer)

// tenantPage authenticates a GET and gives the page its tenant; one
// without credentials is sent to the login page.
func (d *Dash) tenantPage(scope string, f pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, ok := d.viewer(w, r, scope)
		if !ok {
			return
		}
		f(w, r, v)
	}
}

// tenantAction authenticates a POST and checks its CSRF token (a login
// session's form must carry it; a bearer request has no ambient
// credential to forge).
func (d *Dash) tenantAction(scope string, f pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, ok := d.viewer(w, r, scope)
		if !ok {
			return
		}
		if v.other != "" {
			d.errorPage(w, r, v, http.StatusForbidden, "An operator reads another tenant's pages; cancelling, restoring and running belong to the tenant.")
			return
		}
		if d.cfg.ReadOnly {
			d.errorPage(w, r, v, http.StatusForbidden, "This view is read-only (sandpit ui reads a stdio server's state): cancel, restore or run through the agent, or serve the dashboard with sandpit serve --listen.")
			return
		}
		if v.login != nil && !v.login.csrfOK(r.PostFormValue("csrf")) {
			d.errorPage(w, r, v, http.StatusForbidden, "This form is stale or was not sent by this dashboard (its CSRF token does not match). Reload the page and try again.")
			return
		}
		f(w, r, v)
	}
}

func (d *Dash) viewer(w http.ResponseWriter, r *http.Request, scope string) (*viewer, bool) {
	v := &viewer{}
	switch {
	case d.cfg.NoAuth:
		v.p = auth.Principal{Tenant: d.cfg.NoAuthTenant, Scopes: auth.AllScopes, Via: "none"}
	case r.Header.Get("Authorization") != "":
		p, err := d.cfg.Auth.Authenticate(r.Context(), r)
		if err != nil {
			d.authFailed(w, r, err)
			return nil, false
		}
		v.p = p
	default:
		l, p, err := d.logins.check(r, d.cfg.Auth)
		if err != nil {
			if !errors.Is(err, auth.ErrNoCredentials) {
				d.logins.clearCookie(w, d.cfg.Secure)
			}
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return nil, false
			}
			d.authFailed(w, r, err)
			return nil, false
		}
		v.p, v.login = p, l
	}
	if !auth.ValidTenant(v.p.Tenant) {
		d.plain(w, http.StatusForbidden, "the credential names no valid tenant")
		return nil, false
	}
	if !v.p.Has(scope) {
		d.errorPage(w, r, v, http.StatusForbidden, fmt.Sprintf("Your token does not allow this page: it needs the scope %s.", scope))
		return nil, false
	}
	v.operator = slices.Contains(d.cfg.Operators, v.p.Tenant)
	name := v.p.Tenant
	if other := r.URL.Query().Get("tenant"); other != "" && other != name {
		// An operator may read another tenant's pages; to anyone else
		// the parameter names nothing.
		if !v.operator || !d.tenantExists(r.Context(), other) {
			d.notFound(w, r, v, "such tenant")
			return nil, false
		}
		name, v.other = other, other
	}
	t, err := d.cfg.Tenants.Tenant(r.Context(), name)
	if err != nil {
		d.log.Warn("dashboard: tenant unavailable", "err", err)
		d.errorPage(w, r, v, statusOf(err), "This tenant's state is not available now: "+err.Error())
		return nil, false
	}
	v.t = t
	return v, true
}

func (d *Dash) authFailed(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, auth.ErrNoCredentials), errors.Is(err, auth.ErrInvalidToken):
		w.Header().Set("WWW-Authenticate", "Bearer")
		d.plain(w, http.StatusUnauthorized, "not logged in, or the token is no longer valid: log in at /login")
	case errors.Is(err, auth.ErrInsufficientScope):
		d.plain(w, http.StatusForbidden, "the token does not allow this server")
	case sandpit.ClassOf(err) == sandpit.ErrUnavailable:
		w.Header().Set("Retry-After", "5")
		d.plain(w, http.StatusServiceUnavailable, "authentication is unavailable for now: try again")
	default:
		d.log.Error("dashboard: authentication failed", "err", err)
		d.plain(w, http.StatusInternalServerError, "authentication failed")
	}
}

func statusOf(err error) int {
	switch sandpit.ClassOf(err) {
	case sandpit.ErrNotFound:
		return http.StatusNotFound
	case sandpit.ErrInvalidArgument:
		return http.StatusBadRequest
	case sandpit.ErrResourceExhausted:
		return http.StatusTooManyRequests
	case sandpit.ErrUnavailable, sandpit.ErrConflict:
		return http.StatusConflict
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (d *Dash) plain(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}

// tenantExists reports whether name is a tenant the operator's list has:
// an operator's ?tenant= never makes one.
func (d *Dash) tenantExists(ctx context.Context, name string) bool {
	return slices.Contains(d.tenantNames(ctx), name)
}

// tenantNames lists the tenants for an operator's filter, sorted.
func (d *Dash) tenantNames(ctx context.Context) []string {
	var names []string
	switch {
	case d.cfg.TenantNames != nil:
		list, err := d.cfg.TenantNames(ctx)
		if err != nil {
			return nil
		}
		names = list
	case d.cfg.Summaries != nil:
		list, err := d.cfg.Summaries(ctx)
		if err != nil {
			return nil
		}
		for _, s := range list {
			names = append(names, s.Name)
		}
	}
	slices.Sort(names)
	return names
}
