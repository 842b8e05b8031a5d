package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/oauth2"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/dash"
	"github.com/sandpit-dev/sandpit/internal/front"
	"github.com/sandpit-dev/sandpit/internal/instance"
	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/runtime"
)

// httpFlags are serve's flags for serving MCP over HTTP.
func httpFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "listen", Usage: "serve MCP over HTTP on HOST:PORT (Streamable HTTP at /mcp, legacy SSE at /sse) to authenticated tenants instead of stdio"},
		&cli.StringFlag{Name: "data-dir", Value: dataDir(), EnvVars: []string{"SANDPIT_DATA_DIR"}, Usage: "persistent data: tokens (DIR/auth), each tenant's workspace, snapshots and history (DIR/tenants/NAME); a stdio server's workspace, snapshots and history default to DIR too"},
		&cli.StringFlag{Name: "tokens-file", EnvVars: []string{"SANDPIT_TOKENS_FILE"}, Usage: "read the tokens from this file, which this server never writes, instead of DATA-DIR/auth/tokens.json: in a cluster, the Secret `sandpit cluster token` fills, mounted in every front door"},
		&cli.StringFlag{Name: "tls-cert", Usage: "serve HTTPS with this PEM certificate (with --tls-key)"},
		&cli.StringFlag{Name: "tls-key", Usage: "the PEM private key of --tls-cert"},
		&cli.BoolFlag{Name: "insecure-http", Usage: "allow plain HTTP on a non-loopback --listen: a proxy in front terminates TLS"},
		&cli.StringFlag{Name: "oauth-dashboard-client", Usage: "CLIENT_ID[:SECRET] of the dashboard at the --oauth-issuer (registered with redirect URI PUBLIC_URL/login/callback, authorization code with PKCE): browsers may log in through the issuer as well as with a token"},
		&cli.StringSliceFlag{Name: "operator", Usage: "a tenant (token name or OAuth subject) who also sees the dashboard's operator page: every tenant's figures and the requests the server refused (repeatable)"},
		&cli.BoolFlag{Name: "no-dashboard", Usage: "serve MCP only: no dashboard pages at / (they are served behind the same authentication by default)"},
		&cli.BoolFlag{Name: "insecure-no-auth", Usage: "no authentication (every client is tenant \"default\"); refused unless --listen is a loopback address"},
		&cli.StringFlag{Name: "public-url", Usage: "the base URL clients reach this server at (scheme://host[:port]), when it is not --listen's: the OAuth resource is URL/mcp; requests must name its host"},
		&cli.StringSliceFlag{Name: "allow-origin", Usage: "a browser Origin (scheme://host[:port]) allowed beyond --public-url's own (repeatable)"},
		&cli.StringSliceFlag{Name: "allow-host", Usage: "a Host header (host or host:port) allowed beyond --public-url's own (repeatable)"},
		&cli.StringFlag{Name: "oauth-issuer", Usage: "accept OAuth 2.1 JWT access tokens from this issuer (its discovery document and JWKS), with audience --public-url/mcp, beside sandpit tokens"},
		&cli.StringFlag{Name: "oauth-tenant-claim", Value: "sub", Usage: "the access token claim that names the tenant"},
		&cli.BoolFlag{Name: "oauth-introspect", Usage: "also ask the issuer's RFC 7662 introspection endpoint about every token (answers cached --oauth-introspection-ttl), so a token revoked at the issuer is refused here"},
		&cli.StringFlag{Name: "oauth-introspection-url", Usage: "the introspection endpoint, when not the discovery document's (implies --oauth-introspect)"},
		&cli.StringFlag{Name: "oauth-introspection-client", Usage: "CLIENT_ID:SECRET this server authenticates to the introspection endpoint with (HTTP Basic)", EnvVars: []string{"SANDPIT_OAUTH_INTROSPECTION_CLIENT"}},
		&cli.DurationFlag{Name: "oauth-introspection-ttl", Value: auth.DefaultIntrospectionTTL, Usage: "how long an introspection answer is believed"},
		&cli.DurationFlag{Name: "http-session-idle", Value: front.DefaultSessionIdle, Usage: "forget an HTTP client's MCP session idle this long"},
		&cli.IntFlag{Name: "max-connections", Value: 256, Usage: "open HTTP connections at once"},
		&cli.IntFlag{Name: "tenant-max-http-sessions", Value: 32, Usage: "live MCP sessions over HTTP (Streamable HTTP sessions and legacy SSE streams) one tenant may hold"},
		&cli.IntFlag{Name: "tenant-max-streams", Value: 32, Usage: "HTTP requests one tenant may have in flight at once (calls, open streams)"},
	}
}

// checkHTTPFlags refuses HTTP flags without --listen and stdio's
// single-workspace flags with it, and points a stdio server's defaults at
// --data-dir when that was given.
func checkHTTPFlags(c *cli.Context) error {
	listen := c.String("listen") != ""
	if !listen {
		for _, f := range []string{"tokens-file", "tls-cert", "tls-key", "insecure-http", "insecure-no-auth", "operator", "no-dashboard", "oauth-dashboard-client", "public-url", "allow-origin", "allow-host", "oauth-issuer", "oauth-introspect", "oauth-introspection-url", "oauth-introspection-client"} {
			if c.IsSet(f) {
				return fmt.Errorf("--%s needs --listen HOST:PORT (without it sandpit serves stdio)", f)
			}
		}
		if c.IsSet("data-dir") {
			for flag, leaf := range map[string]string{"workspace": "workspace", "snapshot-dir": "snapshots", "history-db": "history.db"} {
				if !c.IsSet(flag) {
					if err := c.Set(flag, filepath.Join(c.String("data-dir"), leaf)); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	for _, f := range []string{"workspace", "snapshot-dir", "history-db"} {
		if c.IsSet(f) {
			return fmt.Errorf("--%s is a stdio server's: over HTTP each tenant has its own under --data-dir (DIR/tenants/NAME)", f)
		}
	}
	return nil
}

// serveHTTP serves MCP over HTTP until SIGTERM or SIGINT: each
// authenticated tenant gets its own MCP server (tenants.go). base is the
// configuration every tenant shares.
func serveHTTP(c *cli.Context, rt *runtime.Runtime, in *instance.Instance, base mcp.Config) error {
	dir := c.String("data-dir")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	ts, err := newTenants(c, rt, base, dir, filepath.Join(in.Dir(), "tenants"))
	if err != nil {
		return err
	}
	defer ts.Close()

	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	ts.samples = newSampler(rt)
	go ts.samples.run(ctx)
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	fc := frontConfig(c, ln)
	fc.Tenants = ts
	// The OAuth audience is the front's resource URL, known once the
	// front is made: the authenticator is set in between.
	late := &lateAuth{}
	if !fc.InsecureNoAuth {
		fc.Auth = late
		if iss := c.String("oauth-issuer"); iss != "" {
			fc.AuthorizationServers = []string{iss}
		}
	}
	serverEvents := mcp.NewEvents(1000)
	fc.Events = serverEvents
	var pages *dash.Dash
	if !c.Bool("no-dashboard") {
		// The dashboard is served beside /mcp, behind the same checks and
		// the same tokens.
		secure := fc.TLSCert != "" || strings.HasPrefix(fc.PublicURL, "https://")
		pages, err = dash.New(dash.Config{Auth: late, NoAuth: fc.InsecureNoAuth, NoAuthTenant: front.NoAuthTenant,
			Tenants: dash.SourceFunc(ts.Dash), Secure: secure, Logger: slog.Default(),
			Operators: c.StringSlice("operator"), ServerEvents: serverEvents, Pool: ts.samples.Pool,
			Summaries:   func(ctx context.Context) ([]dash.TenantSummary, error) { return tenantSummaries(ctx, dir, ts) },
			TenantNames: func(context.Context) ([]string, error) { return tenantNames(dir) }})
		if err != nil {
			ln.Close()
			return err
		}
		fc.Pages = pages
	}
	f, err := front.New(fc)
	if err != nil {
		ln.Close()
		if errors.Is(err, sandpit.ErrInvalidArgument) {
			// The front knows no flag names: say which flags do what it asks.
			h := sandpit.HintOf(err)
			return sandpit.WithHint(err, strings.TrimPrefix(h+"; ", "; ")+
				"serve's flags: --tls-cert and --tls-key for TLS; --insecure-http when a proxy in front terminates TLS; --public-url URL when --listen names no host clients use; --insecure-no-auth only on a loopback --listen")
		}
		return err
	}
	if !fc.InsecureNoAuth {
		var oa *auth.OAuth
		if late.a, oa, err = httpAuth(ctx, c, f.PublicURL()+"/mcp"); err != nil {
			ln.Close()
			return err
		}
		if err := dashboardOAuth(c, pages, oa, f.PublicURL()); err != nil {
			ln.Close()
			return err
		}
	}
	var beforeStop func() // a cluster node drains before it stops
	if c.String("cluster-node") != "" {
		// A node: calls front doors forward act for the tenant the front
		// door proved, beside this server's own tokens.
		var secret string
		if f := c.String("cluster-secret-file"); f != "" {
			if secret, err = auth.ReadClusterSecret(f); err != nil {
				ln.Close()
				return err
			}
		}
		kube, _, err := kubeClients(c)
		if err != nil {
			ln.Close()
			return err
		}
		// Front doors show their service-account token, checked with
		// the API server (TokenReview), or the shared secret.
		rev := &cluster.Reviewer{Kube: kube, Namespace: c.String("cluster-namespace"), Account: c.String("cluster-front-account"),
			Audience: c.String("cluster-token-audience"), Keep: time.Minute, KeepRefused: 10 * time.Second}
		late.a = auth.Chain(auth.NewFrontDoor(secret, rev), late.a)
		node, err := nodeAgent(ctx, c, f.PublicURL(), cancel)
		if err != nil {
			ln.Close()
			return err
		}
		defer node.stop()
		beforeStop = node.drain
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	go func() {
		select {
		case sig := <-sigs:
			if beforeStop != nil {
				// A cluster node: its tenants move first, while it
				// still serves what is in flight.
				go func() { <-sigs; slog.Warn("second signal: exiting now"); os.Exit(1) }()
				beforeStop()
			}
			slog.Info("stopping: cancelling in-flight runs", "signal", sig.String())
			cancel()
		case <-ctx.Done():
			return
		}
		sig := <-sigs
		slog.Warn("second signal: exiting now", "signal", sig.String())
		os.Exit(1)
	}()
	slog.Info("sandpit serving MCP over HTTP", "version", version, "instance", in.Name(), "listen", ln.Addr().String(),
		"url", f.PublicURL()+"/mcp", "data_dir", dir, "tls", fc.TLSCert != "", "auth", !fc.InsecureNoAuth)
	if fc.Pages != nil {
		slog.Info("dashboard", "url", f.PublicURL()+"/")
	}
	err = f.Serve(ctx, ln)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	slog.Info("HTTP server stopped; closing tenants")
	return err
}

// frontConfig is the front's configuration from serve's flags, listening
// on ln.
func frontConfig(c *cli.Context, ln net.Listener) front.Config {
	// The host as given (0.0.0.0 stays 0.0.0.0), the port as bound (for
	// port 0).
	host, _, _ := net.SplitHostPort(c.String("listen"))
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return front.Config{
		Addr:           net.JoinHostPort(host, port),
		TLSCert:        c.String("tls-cert"),
		TLSKey:         c.String("tls-key"),
		InsecureHTTP:   c.Bool("insecure-http"),
		InsecureNoAuth: c.Bool("insecure-no-auth"),
		PublicURL:      c.String("public-url"),
		AllowedOrigins: c.StringSlice("allow-origin"),
		AllowedHosts:   c.StringSlice("allow-host"),
		SessionIdle:    c.Duration("http-session-idle"),
		Limits: front.Limits{
			MaxBodyBytes:         int64(c.Int("max-message-mb")) << 20,
			MaxConns:             c.Int("max-connections"),
			MaxSessionsPerTenant: c.Int("tenant-max-http-sessions"),
			MaxStreamsPerTenant:  c.Int("tenant-max-streams"),
		},
		Logger: slog.Default(),
	}
}

// lateAuth is an authenticator set after the front is made; nothing is
// served before it is.
type lateAuth struct{ a auth.Authenticator }

func (l *lateAuth) Authenticate(ctx context.Context, r *http.Request) (auth.Principal, error) {
	return l.a.Authenticate(ctx, r)
}

// httpAuth is who may use the HTTP server: holders of sandpit tokens
// (--data-dir), and with --oauth-issuer holders of that issuer's access
// tokens for resource (this server's /mcp URL).
func httpAuth(ctx context.Context, c *cli.Context, resource string) (auth.Authenticator, *auth.OAuth, error) {
	var tokens *auth.Tokens
	var err error
	create := "`sandpit token create NAME`"
	if f := c.String("tokens-file"); f != "" {
		tokens, err = auth.OpenTokensFile(f)
		create = "`sandpit cluster token NAME`, or `sandpit token create` and copy DATA-DIR/auth/tokens.json there"
	} else {
		tokens, err = auth.OpenTokens(c.String("data-dir"))
	}
	if err != nil {
		return nil, nil, err
	}
	issuer := c.String("oauth-issuer")
	if list, err := tokens.List(); err == nil && len(list) == 0 && issuer == "" && c.String("cluster-node") != "" {
		slog.Info("no tokens of its own: this node serves the calls front doors forward with the cluster secret", "file", tokens.Path())
	} else if err == nil && len(list) == 0 && issuer == "" {
		slog.Warn("no tokens yet: every request will be refused until one exists; create one with "+create, "file", tokens.Path())
	}
	if issuer == "" {
		return tokens, nil, nil
	}
	oc := auth.OAuthConfig{
		Issuer:           issuer,
		Audience:         resource,
		TenantClaim:      c.String("oauth-tenant-claim"),
		Introspect:       c.Bool("oauth-introspect"),
		IntrospectionURL: c.String("oauth-introspection-url"),
		IntrospectionTTL: c.Duration("oauth-introspection-ttl"),
	}
	if cs := c.String("oauth-introspection-client"); cs != "" {
		id, secret, ok := strings.Cut(cs, ":")
		if !ok || id == "" {
			return nil, nil, fmt.Errorf("--oauth-introspection-client: want CLIENT_ID:SECRET")
		}
		oc.IntrospectionClientID, oc.IntrospectionClientSecret = id, secret
	}
	dctx, cancel := context.WithTimeout(ctx, oauthTimeout)
	defer cancel()
	oa, err := auth.NewOAuth(dctx, oc)
	if err != nil {
		return nil, nil, fmt.Errorf("--oauth-issuer %s: %w", issuer, err)
	}
	slog.Info("accepting OAuth access tokens", "issuer", issuer, "audience", resource, "tenant_claim", oc.TenantClaim, "introspect", oc.Introspect || oc.IntrospectionURL != "")
	return auth.Chain(tokens, oa), oa, nil
}

// oauthTimeout bounds the issuer's discovery at start-up.
const oauthTimeout = 30 * time.Second

// tenantSummaries is every tenant of dir for the operator's page, with the
// refused calls of those served now.
func tenantSummaries(ctx context.Context, dir string, ts *tenants) ([]dash.TenantSummary, error) {
	reports, err := tenantReports(ctx, dir, time.Now())
	if err != nil {
		return nil, err
	}
	open := ts.refusals()
	out := make([]dash.TenantSummary, 0, len(reports))
	for _, r := range reports {
		counts, ok := open[r.Name]
		out = append(out, dash.TenantSummary{Name: r.Name, Runs: r.Runs, LastRun: r.LastRun, CPUHourMS: r.CPUHourMS,
			FailedHour: r.Failed, WorkspaceBytes: r.WorkspaceBytes, Open: ok, Refusals: counts})
	}
	return out, nil
}

// dashboardOAuth turns on the dashboard's login through the OAuth issuer
// (--oauth-dashboard-client).
func dashboardOAuth(c *cli.Context, pages *dash.Dash, oa *auth.OAuth, public string) error {
	cs := c.String("oauth-dashboard-client")
	if cs == "" {
		return nil
	}
	switch {
	case oa == nil:
		return fmt.Errorf("--oauth-dashboard-client needs --oauth-issuer")
	case pages == nil:
		return fmt.Errorf("--oauth-dashboard-client: the dashboard is off (--no-dashboard)")
	}
	id, secret, _ := strings.Cut(cs, ":")
	if id == "" {
		return fmt.Errorf("--oauth-dashboard-client: want CLIENT_ID[:SECRET]")
	}
	authz, token := oa.Endpoints()
	if authz == "" || token == "" {
		return fmt.Errorf("--oauth-dashboard-client: issuer %s names no authorization or token endpoint in its discovery document", oa.Issuer())
	}
	style := oauth2.AuthStyleInHeader
	if secret == "" {
		style = oauth2.AuthStyleInParams // a public client: its id in the form
	}
	pages.SetOAuthLogin(&dash.OAuthLogin{
		Config: oauth2.Config{ClientID: id, ClientSecret: secret, RedirectURL: public + "/login/callback",
			Endpoint: oauth2.Endpoint{AuthURL: authz, TokenURL: token, AuthStyle: style},
			Scopes:   auth.AllScopes},
		Audience: public + "/mcp",
		Issuer:   oa.Issuer(),
	})
	slog.Info("dashboard: browsers may log in through the OAuth issuer", "issuer", oa.Issuer(), "client", id, "redirect_uri", public+"/login/callback")
	return nil
}

// tenantNames lists the tenants that have state under dir: cheap, for
// every page an operator opens (tenantSummaries reads every tenant's
// stores).
func tenantNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "tenants"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && auth.ValidTenant(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
