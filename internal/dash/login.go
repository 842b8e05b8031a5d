package dash

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/auth"
)

// cookieName is the login session's cookie.
const cookieName = "sandpit_session"

// Login session bounds: how many are held (the least recently used goes
// first past it), how long one lasts unused, and at most.
const (
	maxLogins    = 1024
	loginIdle    = 12 * time.Hour
	loginMaxAge  = 7 * 24 * time.Hour
	maxTokenSize = 8 << 10
)

// login is one browser's login session. The token it was made from is kept
// in memory only and proven again on every request, so revoking the token
// (or its expiry) ends the session at once.
type login struct {
	id       string
	token    string
	csrf     string
	created  time.Time
	lastUsed time.Time
}

func (l *login) csrfOK(got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(l.csrf)) == 1
}

type logins struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*login
}

func newLogins(now func() time.Time) *logins {
	return &logins{now: now, m: map[string]*login{}}
}

func randomID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// add makes a login session for token.
func (ls *logins) add(token string) *login {
	now := ls.now()
	l := &login{id: randomID(), token: token, csrf: randomID(), created: now, lastUsed: now}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for id, o := range ls.m {
		if ls.expired(o, now) {
			delete(ls.m, id)
		}
	}
	if len(ls.m) >= maxLogins {
		var oldest *login
		for _, o := range ls.m {
			if oldest == nil || o.lastUsed.Before(oldest.lastUsed) {
				oldest = o
			}
		}
		delete(ls.m, oldest.id)
	}
	ls.m[l.id] = l
	return l
}

func (ls *logins) expired(l *login, now time.Time) bool {
	return now.Sub(l.lastUsed) > loginIdle || now.Sub(l.created) > loginMaxAge
}

func (ls *logins) remove(id string) {
	ls.mu.Lock()
	delete(ls.m, id)
	ls.mu.Unlock()
}

// check finds r's login session and proves its token again.
func (ls *logins) check(r *http.Request, a auth.Authenticator) (*login, auth.Principal, error) {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return nil, auth.Principal{}, auth.ErrNoCredentials
	}
	now := ls.now()
	ls.mu.Lock()
	l := ls.m[c.Value]
	if l != nil && ls.expired(l, now) {
		delete(ls.m, l.id)
		l = nil
	}
	if l != nil {
		l.lastUsed = now
	}
	ls.mu.Unlock()
	if l == nil {
		return nil, auth.Principal{}, fmt.Errorf("login session ended: %w", auth.ErrInvalidToken)
	}
	p, err := authenticateToken(r, a, l.token)
	if err != nil {
		ls.remove(l.id)
		return nil, auth.Principal{}, err
	}
	return l, p, nil
}

// authenticateToken proves token as if r had sent it as its bearer token.
func authenticateToken(r *http.Request, a auth.Authenticator, token string) (auth.Principal, error) {
	rr := r.Clone(r.Context())
	rr.Header = http.Header{"Authorization": {"Bearer " + token}}
	return a.Authenticate(rr.Context(), rr)
}

func (ls *logins) setCookie(w http.ResponseWriter, l *login, secure bool) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: l.id, Path: "/", HttpOnly: true, Secure: secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(loginMaxAge / time.Second),
	})
}

func (ls *logins) clearCookie(w http.ResponseWriter, secure bool) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode, MaxAge: -1})
}

// loginPage shows the login form.
func (d *Dash) loginPage(w http.ResponseWriter, r *http.Request) {
	d.render(w, r, http.StatusOK, "login", nil, map[string]any{"Next": safeNext(r.URL.Query().Get("next")), "OAuth": d.oauth})
}

// login makes a login session from a token sent in a form.
func (d *Dash) login(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.PostFormValue("next"))
	if d.cfg.NoAuth {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	fail := func(msg string) {
		d.render(w, r, http.StatusUnauthorized, "login", nil, map[string]any{"Next": next, "Error": msg, "OAuth": d.oauth})
	}
	switch {
	case token == "":
		fail("Paste a token: `sandpit token create NAME` prints one as its last line.")
		return
	case len(token) > maxTokenSize:
		fail("That is not a token: it is too long.")
		return
	}
	if _, err := authenticateToken(r, d.cfg.Auth, token); err != nil {
		d.log.Info("dashboard: login refused", "err", err)
		fail("That token is not valid here (unknown, revoked, expired, or for another server).")
		return
	}
	if c, err := r.Cookie(cookieName); err == nil {
		d.logins.remove(c.Value) // a new login replaces, never adds to, the old one
	}
	l := d.logins.add(token)
	d.logins.setCookie(w, l, d.cfg.Secure)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the login session. Its form carries the CSRF token: another
// site must not log a person out either.
func (d *Dash) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieName); err == nil {
		d.logins.mu.Lock()
		l := d.logins.m[c.Value]
		d.logins.mu.Unlock()
		if l != nil {
			if !l.csrfOK(r.PostFormValue("csrf")) {
				d.plain(w, http.StatusForbidden, "stale form: reload the page and log out again")
				return
			}
			d.logins.remove(l.id)
		}
	}
	d.logins.clearCookie(w, d.cfg.Secure)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// safeNext keeps a redirect target on this server: a path, never
// another origin ("//evil", "/\evil", "https://...").
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") || strings.HasPrefix(next, "/login") {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Host != "" || u.Scheme != "" {
		return "/"
	}
	return next
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
