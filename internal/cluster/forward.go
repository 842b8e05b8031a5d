package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/auth"
)

// Forwarder is a front door's handler for MCP requests that passed its
// checks (front.Config.Forward): it places the request's tenant and
// proxies the request to the tenant's node, acting for the tenant with the
// cluster's secret. Streams (SSE) are passed on as they come.
//
// A tenant's placement is remembered for CacheFor: a call does not pay the
// API server, and a failover is seen within CacheFor after the Lease
// lapsed. A node that does not answer is asked about again at once.
type Forwarder struct {
	Placer *Placer
	// Secret is the bearer token nodes accept from front doors, unless
	// Token is set: the front door's service-account token, which nodes
	// check with TokenReview.
	Secret string
	Token  *TokenFile
	// Transport reaches the nodes (TLS settings); http.DefaultTransport's
	// clone when nil.
	Transport http.RoundTripper
	CacheFor  time.Duration
	Logger    *slog.Logger

	once  sync.Once
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	p          Placement
	url        *url.URL
	till       time.Time
	credential string // what the node is shown (ServeHTTP sets it)
}

// DefaultCacheFor is how long a placement is reused without asking.
const DefaultCacheFor = 2 * time.Second

type placementKey struct{}

func (f *Forwarder) init() {
	if f.CacheFor <= 0 {
		f.CacheFor = DefaultCacheFor
	}
	if f.Logger == nil {
		f.Logger = slog.Default()
	}
	if f.Transport == nil {
		f.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	f.cache = map[string]cached{}
	f.proxy = &httputil.ReverseProxy{
		Transport: f.Transport,
		// Streamable HTTP answers with SSE streams: flush each event.
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			c := pr.In.Context().Value(placementKey{}).(cached)
			p, _ := auth.FromContext(pr.In.Context())
			pr.SetURL(c.url)
			pr.Out.Host = c.url.Host
			pr.Out.Header.Del("Forwarded")
			// The front door checked the browser's Origin against its own
			// names; the node knows only its own and would refuse it.
			pr.Out.Header.Del("Origin")
			auth.SetForwarded(pr.Out.Header, p, c.credential)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			c := r.Context().Value(placementKey{}).(cached)
			f.forget(c.p.Tenant)
			if errors.Is(err, context.Canceled) {
				return // the client went away
			}
			f.Logger.Warn("cluster: node did not answer", "node", c.p.Node, "tenant", c.p.Tenant, "err", err)
			w.Header().Set("Retry-After", "2")
			http.Error(w, fmt.Sprintf("the tenant's node %s did not answer; a node that is gone is replaced once its lease lapses: try again", c.p.Node), http.StatusBadGateway)
		},
	}
}

// ServeHTTP implements http.Handler.
func (f *Forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.once.Do(f.init)
	p, ok := auth.FromContext(r.Context())
	if !ok {
		http.Error(w, "no principal", http.StatusInternalServerError)
		return
	}
	c, err := f.placement(r.Context(), p.Tenant)
	if err != nil {
		status := http.StatusInternalServerError
		if sandpit.ClassOf(err) == sandpit.ErrUnavailable {
			status = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "5")
		}
		f.Logger.Warn("cluster: placement failed", "tenant", p.Tenant, "err", err)
		http.Error(w, sandpit.Describe(err), status)
		return
	}
	c.credential = f.Secret
	if f.Token != nil {
		if c.credential, err = f.Token.Token(); err != nil {
			f.Logger.Error("cluster: no credential for the nodes", "err", err)
			http.Error(w, "this front door cannot read its own token; see its log", http.StatusInternalServerError)
			return
		}
	}
	f.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), placementKey{}, c)))
}

func (f *Forwarder) placement(ctx context.Context, tenant string) (cached, error) {
	now := time.Now()
	f.mu.Lock()
	c, ok := f.cache[tenant]
	f.mu.Unlock()
	if ok && now.Before(c.till) {
		return c, nil
	}
	p, err := f.Placer.Place(ctx, tenant)
	if err != nil {
		return cached{}, err
	}
	u, err := url.Parse(p.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cached{}, fmt.Errorf("node %s announces endpoint %q: not an http(s) URL", p.Node, p.Endpoint)
	}
	if p.Moved {
		f.Logger.Info("cluster: workspace moved", "tenant", tenant, "from", p.From, "to", p.Node, "reason", p.Reason)
	}
	c = cached{p: p, url: u, till: now.Add(f.CacheFor)}
	f.mu.Lock()
	f.cache[tenant] = c
	f.mu.Unlock()
	return c, nil
}

func (f *Forwarder) forget(tenant string) {
	f.mu.Lock()
	delete(f.cache, tenant)
	f.mu.Unlock()
}
