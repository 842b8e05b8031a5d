package npm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/sandpit-dev/sandpit"
)

// Client defaults; each is a Client field.
const (
	DefaultTimeout           = 30 * time.Second
	DefaultDownloadTimeout   = 10 * time.Minute
	DefaultMaxPackumentBytes = 32 << 20
	DefaultMaxArtifactBytes  = 512 << 20
	DefaultMaxRedirects      = 3
	maxDeps                  = 1000 // dependencies of one version, all kinds together
)

// Client reads one npm registry. Zero fields take the defaults above; a
// Client is safe for concurrent use once its fields are set. One Client
// is one registry: scoped names are looked up on it too, never elsewhere
// (no per-scope registries, so no dependency confusion between them).
type Client struct {
	// BaseURL is the registry's root, such as https://registry.npmjs.org/
	// (http or https).
	BaseURL string
	// HTTPClient makes the requests; nil is http.DefaultClient. Its
	// CheckRedirect is replaced by the Client's own policy.
	HTTPClient *http.Client
	// AllowHosts are hosts other than the registry's that its tarballs may
	// live on (a mirror's CDN), as host or host:port. The registry's own
	// host is always allowed; no other is.
	AllowHosts []string

	Timeout           time.Duration // one packument request, headers to last byte
	DownloadTimeout   time.Duration // one tarball
	MaxPackumentBytes int64         // one packument, after any Content-Encoding
	MaxArtifactBytes  int64         // one tarball
	MaxRedirects      int           // per request
	UserAgent         string
}

func (c *Client) timeout() time.Duration { return orDefault(c.Timeout, DefaultTimeout) }
func (c *Client) dlTimeout() time.Duration {
	return orDefault(c.DownloadTimeout, DefaultDownloadTimeout)
}
func (c *Client) maxPackument() int64 {
	return orDefault(c.MaxPackumentBytes, DefaultMaxPackumentBytes)
}
func (c *Client) maxArtifact() int64 { return orDefault(c.MaxArtifactBytes, DefaultMaxArtifactBytes) }
func (c *Client) maxRedirects() int  { return orDefault(c.MaxRedirects, DefaultMaxRedirects) }

func orDefault[T int | int64 | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// Packument is what the registry says of one package (the abbreviated
// "corgi" document), reduced to what resolving needs.
type Packument struct {
	Name     string
	Latest   string               // the dist-tag latest, "" when none
	Versions map[string]*Manifest // by version
}

// Manifest is one version of a package. Versions that cannot be used are
// kept, with Refused saying why, so that a caller can tell "no such
// version" from "refused".
type Manifest struct {
	Name    string
	Version *semver.Version
	// Dependencies are name → range as published (ranges, and also URLs,
	// git, file: or npm: aliases, which Resolve refuses).
	Dependencies         map[string]string
	OptionalDependencies map[string]string
	PeerDependencies     map[string]string
	Tarball              string // absolute URL, checked against the hosts allowed
	Integrity            string // "sha512-<base64>"
	UnpackedSize         int64  // as the registry states it, 0 when it does not
	Deprecated           string
	HasInstallScript     bool
	Refused              string // why it cannot be used, "" when it can
}

func (m *Manifest) String() string { return m.Name + "@" + m.Version.String() }

// base parses BaseURL.
func (c *Client) base() (*url.URL, error) {
	if c == nil || c.BaseURL == "" {
		return nil, sandpit.WithHint(ErrNotConfigured, "the operator configures one with --package-source javascript=URL (an npm registry)")
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("%w: the registry URL %q is not an http(s) URL without credentials", ErrNotConfigured, c.BaseURL)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
		u.RawPath = ""
	}
	return u, nil
}

// hostKey is a URL's host in lower case with its port made explicit.
func hostKey(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// checkURL says why u may not be fetched, or "". from is the URL that
// named it (the registry or the previous hop): https may not downgrade to
// http.
func (c *Client) checkURL(u, from *url.URL) string {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Sprintf("its URL's scheme is %q, not http or https", u.Scheme)
	}
	if from != nil && from.Scheme == "https" && u.Scheme != "https" {
		return "its URL downgrades https to http"
	}
	if u.User != nil {
		return "its URL carries credentials"
	}
	base, err := c.base()
	if err != nil {
		return err.Error()
	}
	if hostKey(u) == hostKey(base) {
		return ""
	}
	for _, h := range c.AllowHosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == strings.ToLower(u.Host) || h == strings.ToLower(u.Hostname()) || h == hostKey(u) {
			return ""
		}
	}
	return fmt.Sprintf("its URL is on host %q, not the registry's (%s)", u.Host, base.Host)
}

// errMissing: the registry answered 404 or 410.
var errMissing = sandpit.Define(sandpit.ErrNotFound, "not found on the registry")

type redirectError struct{ why string }

func (e *redirectError) Error() string { return e.why }

func (c *Client) httpClient() *http.Client {
	hc := http.DefaultClient
	if c.HTTPClient != nil {
		hc = c.HTTPClient
	}
	cp := *hc
	cp.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) > c.maxRedirects() {
			return &redirectError{fmt.Sprintf("more than %d redirects", c.maxRedirects())}
		}
		if why := c.checkURL(req.URL, via[len(via)-1].URL); why != "" {
			return &redirectError{fmt.Sprintf("redirected to %q: %s", redactURL(req.URL), why)}
		}
		return nil
	}
	return &cp
}

// redactURL drops credentials and the query from a URL shown in a message.
func redactURL(u *url.URL) string {
	v := *u
	v.User = nil
	v.RawQuery = ""
	v.Fragment = ""
	return v.String()
}

// get GETs u with a deadline of timeout and hands a 200 answer to read.
func (c *Client) get(ctx context.Context, u *url.URL, accept string, timeout time.Duration, what string, read func(*http.Response) error) error {
	rctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadRegistry, what, err)
	}
	req.Header.Set("Accept", accept)
	if accept == acceptTarball {
		// Bytes as published: integrity is of the .tgz itself, and a
		// transport that undid a Content-Encoding would change them.
		req.Header.Set("Accept-Encoding", "identity")
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return c.requestError(ctx, rctx, timeout, what, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return fmt.Errorf("%w: %s: the registry answered %d", errMissing, what, resp.StatusCode)
	default:
		// The status code alone: the reason phrase is the server's text.
		return sandpit.WithHint(fmt.Errorf("%w: %s: the registry answered %d %s", ErrRegistryUnavailable, what, resp.StatusCode, http.StatusText(resp.StatusCode)),
			"try again later; if it persists, the operator checks the registry (--package-source)")
	}
	if err := read(resp); err != nil {
		if isClassed(err) {
			return err
		}
		return c.requestError(ctx, rctx, timeout, what, err)
	}
	return nil
}

func (c *Client) requestError(parent, rctx context.Context, timeout time.Duration, what string, err error) error {
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("%s: %w", what, perr)
	}
	if context.Cause(rctx) == errTimeout {
		return sandpit.WithHint(fmt.Errorf("%w: %s: no complete answer within %s", ErrRegistryUnavailable, what, timeout),
			"the registry is slow or down; try again later")
	}
	var re *redirectError
	if errors.As(err, &re) {
		return fmt.Errorf("%w: %s: %s", ErrBadRegistry, what, re.why)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its text repeats the URL, which may hold credentials
	}
	return sandpit.WithHint(fmt.Errorf("%w: %s: %v", ErrRegistryUnavailable, what, err),
		"the registry is not reachable from the server; the operator checks --package-source and the network")
}

// readBounded reads a body of at most max bytes (after the transport
// undid any Content-Encoding), refusing a longer one before reading it
// whole when its length is declared.
func readBounded(resp *http.Response, max int64, what, hint string) ([]byte, error) {
	if resp.ContentLength > max {
		return nil, limitf(hint, "%s is %d bytes, over the %d-byte limit", what, resp.ContentLength, max)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, limitf(hint, "%s is over the %d-byte limit", what, max)
	}
	return b, nil
}

const acceptTarball = "application/octet-stream, */*;q=0.1"

const acceptPackument = "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8"

// packumentURL is the registry's URL of name: {base}{name}, a scope's
// slash escaped (@scope%2fname) as npm does.
func packumentURL(base *url.URL, name string) *url.URL {
	u := *base
	u.Path = base.Path + name
	u.RawPath = base.EscapedPath() + strings.Replace(name, "/", "%2f", 1)
	return &u
}

// Packument fetches what the registry says of package name (a name
// ValidName or, for dependencies of old packages, its laxer form accepts).
// A packument over MaxPackumentBytes is refused whole.
func (c *Client) Packument(ctx context.Context, name string) (*Packument, error) {
	p, _, err := c.packument(ctx, name)
	return p, err
}

// packument is Packument that also returns the bytes it read.
func (c *Client) packument(ctx context.Context, name string) (*Packument, int64, error) {
	if err := ValidDepName(name); err != nil {
		return nil, 0, err
	}
	base, err := c.base()
	if err != nil {
		return nil, 0, err
	}
	var p *Packument
	var n int64
	what := "the packument of " + name
	err = c.get(ctx, packumentURL(base, name), acceptPackument, c.timeout(), what, func(resp *http.Response) error {
		b, err := readBounded(resp, c.maxPackument(), what, "the operator can raise the packument limit")
		n = int64(len(b))
		if err != nil {
			return err
		}
		p, err = c.parsePackument(b, name, base)
		return err
	})
	if errors.Is(err, errMissing) {
		return nil, n, sandpit.Hintf(fmt.Errorf("%w: %q", ErrNoPackage, name), "check the name's spelling; the registry is %s", base.Host)
	}
	return p, n, err
}

type rawPackument struct {
	Name     string                     `json:"name"`
	DistTags map[string]string          `json:"dist-tags"`
	Versions map[string]json.RawMessage `json:"versions"`
}

type rawManifest struct {
	Name                 string            `json:"name"`
	Version              string            `json:"version"`
	Dependencies         map[string]string `json:"dependencies"`
	OptionalDependencies map[string]string `json:"optionalDependencies"`
	PeerDependencies     map[string]string `json:"peerDependencies"`
	Deprecated           json.RawMessage   `json:"deprecated"`
	HasInstallScript     bool              `json:"hasInstallScript"`
	Scripts              map[string]any    `json:"scripts"` // full packuments only
	Dist                 struct {
		Tarball      string `json:"tarball"`
		Integrity    string `json:"integrity"`
		Shasum       string `json:"shasum"`
		UnpackedSize int64  `json:"unpackedSize"`
	} `json:"dist"`
}

func (c *Client) parsePackument(b []byte, name string, base *url.URL) (*Packument, error) {
	var raw rawPackument
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%w: the packument of %s is not JSON: %v", ErrBadRegistry, name, err)
	}
	if raw.Name != name {
		return nil, fmt.Errorf("%w: asked for %s, the registry answered with the packument of %.100q", ErrBadRegistry, name, raw.Name)
	}
	p := &Packument{Name: name, Latest: raw.DistTags["latest"], Versions: make(map[string]*Manifest, len(raw.Versions))}
	for vs, rm := range raw.Versions {
		v, err := ParseVersion(vs)
		if err != nil || v.String() != vs {
			continue // not a version npm would publish today: never picked
		}
		p.Versions[vs] = c.makeManifest(name, v, rm, base)
	}
	return p, nil
}

// makeManifest validates one version: a usable Manifest, or one whose
// Refused says why not.
func (c *Client) makeManifest(name string, v *semver.Version, b json.RawMessage, base *url.URL) *Manifest {
	m := &Manifest{Name: name, Version: v}
	var rm rawManifest
	if err := json.Unmarshal(b, &rm); err != nil {
		m.Refused = fmt.Sprintf("the registry's entry for it does not parse (%v)", err)
		return m
	}
	if rm.Name != "" && rm.Name != name || rm.Version != "" && rm.Version != v.String() {
		m.Refused = fmt.Sprintf("the registry's entry for it names %.100q@%.100q", rm.Name, rm.Version)
		return m
	}
	m.Dependencies, m.OptionalDependencies, m.PeerDependencies = rm.Dependencies, rm.OptionalDependencies, rm.PeerDependencies
	m.UnpackedSize = max(rm.Dist.UnpackedSize, 0)
	var dep string
	if json.Unmarshal(rm.Deprecated, &dep) == nil {
		m.Deprecated = dep
	}
	m.HasInstallScript = rm.HasInstallScript
	for _, s := range []string{"preinstall", "install", "postinstall"} {
		if _, ok := rm.Scripts[s]; ok {
			m.HasInstallScript = true
		}
	}
	if n := len(rm.Dependencies) + len(rm.OptionalDependencies) + len(rm.PeerDependencies); n > maxDeps {
		m.Refused = fmt.Sprintf("it declares %d dependencies, over the limit of %d", n, maxDeps)
		return m
	}
	u, err := url.Parse(rm.Dist.Tarball)
	if err != nil || rm.Dist.Tarball == "" || !u.IsAbs() {
		m.Refused = "the registry gives no absolute tarball URL for it"
		return m
	}
	u.Fragment, u.RawFragment = "", ""
	m.Tarball = u.String()
	if why := c.checkURL(u, base); why != "" {
		m.Tarball = redactURL(u)
		m.Refused = "its tarball " + why
		return m
	}
	sri, ok := sha512Integrity(rm.Dist.Integrity)
	if !ok {
		if rm.Dist.Shasum != "" {
			m.Refused = "the registry publishes only a sha1 shasum for it, no sha512 integrity; sha1 is too weak to verify it by, so pick a version published since 2017 (npm 5)"
		} else {
			m.Refused = "the registry publishes no sha512 integrity for it"
		}
		return m
	}
	m.Integrity = sri
	return m
}

// sha512Integrity picks the sha512 hash out of an SRI string ("sha512-…",
// possibly among others separated by spaces) in canonical form.
func sha512Integrity(sri string) (string, bool) {
	for f := range strings.FieldsSeq(sri) {
		algo, val, ok := strings.Cut(f, "-")
		if !ok || algo != "sha512" {
			continue
		}
		val, _, _ = strings.Cut(val, "?") // SRI options
		sum, err := base64.StdEncoding.DecodeString(val)
		if err != nil || len(sum) != 64 {
			continue
		}
		return "sha512-" + base64.StdEncoding.EncodeToString(sum), true
	}
	return "", false
}

// integritySum is the raw sha512 of an "sha512-…" integrity.
func integritySum(integrity string) ([]byte, bool) {
	s, ok := sha512Integrity(integrity)
	if !ok {
		return nil, false
	}
	sum, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "sha512-"))
	return sum, true
}

// download streams the tarball at rawURL to w, at most max bytes, and
// returns the bytes written. It does not verify them: FetchTarball does.
func (c *Client) download(ctx context.Context, what, rawURL string, w io.Writer, max int64) (int64, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: its tarball URL does not parse", ErrRefused, what)
	}
	base, err := c.base()
	if err != nil {
		return 0, err
	}
	if why := c.checkURL(u, base); why != "" {
		return 0, fmt.Errorf("%w: %s: its tarball %s", ErrRefused, what, why)
	}
	var n int64
	err = c.get(ctx, u, acceptTarball, c.dlTimeout(), "downloading "+what, func(resp *http.Response) error {
		hint := "the operator can raise the per-tarball limit"
		if resp.ContentLength > max {
			return limitf(hint, "the tarball of %s is %d bytes, over the %d-byte limit", what, resp.ContentLength, max)
		}
		var err error
		n, err = io.Copy(w, io.LimitReader(resp.Body, max+1))
		if err != nil {
			return err
		}
		if n > max {
			return limitf(hint, "the tarball of %s is over the %d-byte limit", what, max)
		}
		return nil
	})
	return n, err
}
