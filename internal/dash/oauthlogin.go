package dash

import (
	"context"
	"net/http"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// OAuthLogin lets a browser log in through the server's OAuth issuer: the
// authorization code flow with PKCE (RFC 7636), the dashboard as a client
// the operator registered with the issuer, its redirect URI
// PublicURL+"/login/callback". The access token it gets is for this
// server's resource (Audience) and is then kept and proven exactly as a
// pasted token is.
type OAuthLogin struct {
	Config   oauth2.Config // ClientID, ClientSecret (empty: a public client), Endpoint, RedirectURL, Scopes
	Audience string        // the resource (RFC 8707): asked for as "audience" and "resource"
	Issuer   string        // named on the login button
}

// Bounds on logins in progress (between the redirect to the issuer and
// its callback).
const (
	maxPendingLogins = 1024
	pendingLoginTTL  = 10 * time.Minute
	stateCookie      = "sandpit_oauth_state"
)

type pendingLogin struct {
	verifier string
	next     string
	created  time.Time
}

type pendingLogins struct {
	mu sync.Mutex
	m  map[string]pendingLogin
}

// put keeps a login in progress; past the bound the oldest goes.
func (p *pendingLogins) put(state string, l pendingLogin, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]pendingLogin{}
	}
	for k, v := range p.m {
		if now.Sub(v.created) > pendingLoginTTL {
			delete(p.m, k)
		}
	}
	if len(p.m) >= maxPendingLogins {
		var oldest string
		for k, v := range p.m {
			if oldest == "" || v.created.Before(p.m[oldest].created) {
				oldest = k
			}
		}
		delete(p.m, oldest)
	}
	p.m[state] = l
}

// take removes and returns the login in progress of state, if it is
// there and not expired.
func (p *pendingLogins) take(state string, now time.Time) (pendingLogin, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.m[state]
	delete(p.m, state)
	return l, ok && now.Sub(l.created) <= pendingLoginTTL
}

// SetOAuthLogin turns on the issuer's login; call it before serving (the
// issuer's endpoints are known once the server's authenticator is).
func (d *Dash) SetOAuthLogin(o *OAuthLogin) { d.oauth = o }

// oauthStart sends the browser to the issuer.
func (d *Dash) oauthStart(w http.ResponseWriter, r *http.Request) {
	if d.oauth == nil {
		d.notFound(w, r, nil, "such page")
		return
	}
	state, verifier := randomID(), oauth2.GenerateVerifier()
	d.pending.put(state, pendingLogin{verifier: verifier, next: safeNext(r.URL.Query().Get("next")), created: d.cfg.Now()}, d.cfg.Now())
	// The state also goes in a cookie of this browser: a callback that
	// arrives in another browser (login CSRF: someone else's code) is
	// refused. Lax, not Strict: the callback is a navigation from the
	// issuer's site.
	http.SetCookie(w, &http.Cookie{Name: stateCookie, Value: state, Path: "/login/callback", HttpOnly: true, Secure: d.cfg.Secure,
		SameSite: http.SameSiteLaxMode, MaxAge: int(pendingLoginTTL / time.Second)})
	u := d.oauth.Config.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier),
		oauth2.SetAuthURLParam("audience", d.oauth.Audience), oauth2.SetAuthURLParam("resource", d.oauth.Audience))
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// oauthCallback takes the issuer's answer: the code becomes an access
// token, proven as any token is, kept in a login session.
func (d *Dash) oauthCallback(w http.ResponseWriter, r *http.Request) {
	if d.oauth == nil {
		d.notFound(w, r, nil, "such page")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: stateCookie, Value: "", Path: "/login/callback", HttpOnly: true, Secure: d.cfg.Secure, SameSite: http.SameSiteLaxMode, MaxAge: -1})
	q := r.URL.Query()
	fail := func(status int, msg string) {
		d.render(w, r, status, "login", nil, map[string]any{"Next": "/", "Error": msg, "OAuth": d.oauth})
	}
	state := q.Get("state")
	c, err := r.Cookie(stateCookie)
	if state == "" || err != nil || c.Value != state {
		fail(http.StatusBadRequest, "This login was not started in this browser (or it took longer than 10 minutes): log in again.")
		return
	}
	pl, ok := d.pending.take(state, d.cfg.Now())
	if !ok {
		fail(http.StatusBadRequest, "This login expired or was already used: log in again.")
		return
	}
	if e := q.Get("error"); e != "" {
		fail(http.StatusUnauthorized, "The issuer refused the login ("+clipText(e, 100)+": "+clipText(q.Get("error_description"), 300)+").")
		return
	}
	code := q.Get("code")
	if code == "" {
		fail(http.StatusBadRequest, "The issuer sent no code: log in again.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	tok, err := d.oauth.Config.Exchange(ctx, code, oauth2.VerifierOption(pl.verifier))
	if err != nil {
		d.log.Warn("dashboard: OAuth code exchange failed", "err", err)
		fail(http.StatusUnauthorized, "The issuer did not give a token for this login: log in again.")
		return
	}
	if _, err := authenticateToken(r, d.cfg.Auth, tok.AccessToken); err != nil {
		d.log.Info("dashboard: OAuth login refused", "err", err)
		fail(http.StatusUnauthorized, "The issuer's token is not valid here (for another resource, without a tenant, or expired): ask the operator.")
		return
	}
	if c, err := r.Cookie(cookieName); err == nil {
		d.logins.remove(c.Value)
	}
	l := d.logins.add(tok.AccessToken)
	d.logins.setCookie(w, l, d.cfg.Secure)
	// A page, not a redirect: the browser arrived from the issuer's site,
	// and a redirect in that navigation would not send the new
	// SameSite=Strict cookie; a navigation this page starts does.
	d.render(w, r, http.StatusOK, "loggedin", nil, map[string]any{"Next": pl.next})
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
