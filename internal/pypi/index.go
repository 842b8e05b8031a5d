package pypi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// Client defaults; each is a Client field.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultDownloadTimeout  = 10 * time.Minute
	DefaultMaxPageBytes     = 8 << 20
	DefaultMaxFiles         = 10_000
	DefaultMaxArtifactBytes = 512 << 20
	DefaultMaxMetadataBytes = 4 << 20
	DefaultMaxRedirects     = 3
)

// Client reads one package index. Zero fields take the defaults above; a
// Client is safe for concurrent use once its fields are set.
type Client struct {
	// BaseURL is the index's simple API root, such as
	// https://pypi.org/simple/ (http or https).
	BaseURL string
	// HTTPClient makes the requests; nil is http.DefaultClient. Its
	// CheckRedirect is replaced by the Client's own policy.
	HTTPClient *http.Client
	// AllowHosts are hosts other than the index's that its files may live
	// on ("files.pythonhosted.org" for PyPI, a mirror's CDN), as host or
	// host:port. The index's own host is always allowed; no other is.
	AllowHosts []string

	Timeout          time.Duration // one page or metadata request, headers to last byte
	DownloadTimeout  time.Duration // one artifact
	MaxPageBytes     int64         // one project page, after any Content-Encoding
	MaxFiles         int           // files on one project page
	MaxArtifactBytes int64         // one artifact
	MaxMetadataBytes int64         // one METADATA file
	MaxRedirects     int           // per request
	UserAgent        string
}

// File is one file a project page lists. Files that cannot be used are
// listed too, with Refused saying why, so that a caller can tell "no such
// version" from "refused".
type File struct {
	Filename       string
	URL            string // absolute, without fragment
	SHA256         string // lower-case hex, as the index published it
	Size           int64  // bytes, when the index says (PEP 700); 0 when unknown
	RequiresPython string // as published, "" when none
	Yanked         bool
	YankedReason   string
	// MetadataSHA256 is the hash of the PEP 658 metadata file at URL +
	// ".metadata", when the index offers one with a sha256.
	MetadataSHA256 string
	Kind           Kind
	Version        Version // parsed from Filename (zero when Refused)
	Wheel          Wheel   // when Kind is KindWheel
	// Refused is why the file cannot be used ("" when it can).
	Refused string
}

func (f File) String() string { return f.Filename }

func (c *Client) timeout() time.Duration { return orDefault(c.Timeout, DefaultTimeout) }
func (c *Client) dlTimeout() time.Duration {
	return orDefault(c.DownloadTimeout, DefaultDownloadTimeout)
}
func (c *Client) maxPage() int64     { return orDefault(c.MaxPageBytes, DefaultMaxPageBytes) }
func (c *Client) maxFiles() int      { return orDefault(c.MaxFiles, DefaultMaxFiles) }
func (c *Client) maxArtifact() int64 { return orDefault(c.MaxArtifactBytes, DefaultMaxArtifactBytes) }
func (c *Client) maxMetadata() int64 { return orDefault(c.MaxMetadataBytes, DefaultMaxMetadataBytes) }
func (c *Client) maxRedirects() int  { return orDefault(c.MaxRedirects, DefaultMaxRedirects) }
func orDefault[T int | int64 | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// base parses BaseURL.
func (c *Client) base() (*url.URL, error) {
	if c == nil || c.BaseURL == "" {
		return nil, sandpit.WithHint(ErrNotConfigured, "the operator configures one with --package-source python=URL (a PEP 503/691 simple index)")
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: the index URL %q is not an http(s) URL of a simple index", ErrNotConfigured, c.BaseURL)
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
// named it (the page or the previous hop): an https page's links may not
// downgrade to http.
func (c *Client) checkURL(u, from *url.URL) string {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Sprintf("its URL's scheme is %q, not http or https", u.Scheme)
	}
	if from != nil && from.Scheme == "https" && u.Scheme != "https" {
		return "its URL downgrades https to http"
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
	return fmt.Sprintf("its URL is on host %q, not the index's (%s)", u.Host, base.Host)
}

// errMissing: the index answered 404 or 410.
var errMissing = sandpit.Define(sandpit.ErrNotFound, "not found on the index")

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
		return fmt.Errorf("%w: %s: %v", ErrBadIndex, what, err)
	}
	req.Header.Set("Accept", accept)
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
		return fmt.Errorf("%w: %s: the index answered %d", errMissing, what, resp.StatusCode)
	default:
		// The status code alone: the reason phrase is the server's text.
		return sandpit.WithHint(fmt.Errorf("%w: %s: the index answered %d %s", ErrIndexUnavailable, what, resp.StatusCode, http.StatusText(resp.StatusCode)),
			"try again later; if it persists, the operator checks the index (--package-source)")
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
		return sandpit.WithHint(fmt.Errorf("%w: %s: no complete answer within %s", ErrIndexUnavailable, what, timeout),
			"the index is slow or down; try again later")
	}
	var re *redirectError
	if errors.As(err, &re) {
		return fmt.Errorf("%w: %s: %s", ErrBadIndex, what, re.why)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its text repeats the URL, which may hold credentials
	}
	return sandpit.WithHint(fmt.Errorf("%w: %s: %v", ErrIndexUnavailable, what, err),
		"the index is not reachable from the server; the operator checks --package-source and the network")
}

// readBounded reads a body of at most max bytes, refusing a longer one
// before reading it whole when its length is declared.
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

const acceptPage = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"

// Files lists the files of project name (any spelling; it is normalized)
// from the index: GET {BaseURL}/{name}/, PEP 691 JSON or PEP 503 HTML.
// A page over MaxPageBytes or MaxFiles is refused whole.
func (c *Client) Files(ctx context.Context, name string) ([]File, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	name = Normalize(name)
	base, err := c.base()
	if err != nil {
		return nil, err
	}
	page := base.JoinPath(name + "/")
	var files []File
	what := fmt.Sprintf("the index page of %s", name)
	err = c.get(ctx, page, acceptPage, c.timeout(), what, func(resp *http.Response) error {
		b, err := readBounded(resp, c.maxPage(), what, "the operator can raise the page limit")
		if err != nil {
			return err
		}
		raw, err := parsePage(b, resp.Header.Get("Content-Type"), name, c.maxFiles())
		if err != nil {
			return err
		}
		final := resp.Request.URL
		for _, r := range raw {
			files = append(files, c.makeFile(final, name, r))
		}
		return nil
	})
	if errors.Is(err, errMissing) {
		return nil, sandpit.Hintf(fmt.Errorf("%w: %q", ErrNoProject, name), "check the name's spelling; the index is %s", base.Host)
	}
	return files, err
}

// rawFile is a file entry as a page states it, before validation.
type rawFile struct {
	filename       string
	href           string
	sha256         string
	hasSHA256      bool
	requiresPython string
	yanked         bool
	yankedReason   string
	metadataSHA256 string
	size           int64
}

func parsePage(b []byte, contentType, name string, maxFiles int) ([]rawFile, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	isJSON := strings.HasSuffix(mt, "+json") || mt == "application/json"
	if mt == "" {
		isJSON = bytes.HasPrefix(bytes.TrimSpace(b), []byte("{"))
	}
	if isJSON {
		return parseJSONPage(b, name, maxFiles)
	}
	return parseHTMLPage(b, maxFiles)
}

type jsonPage struct {
	Meta struct {
		APIVersion string `json:"api-version"`
	} `json:"meta"`
	Name  string     `json:"name"`
	Files []jsonFile `json:"files"`
}

type jsonFile struct {
	Filename         string            `json:"filename"`
	URL              string            `json:"url"`
	Hashes           map[string]string `json:"hashes"`
	RequiresPython   *string           `json:"requires-python"`
	Yanked           json.RawMessage   `json:"yanked"`
	CoreMetadata     json.RawMessage   `json:"core-metadata"`
	DistInfoMetadata json.RawMessage   `json:"dist-info-metadata"`
	Size             *int64            `json:"size"`
}

func parseJSONPage(b []byte, name string, maxFiles int) ([]rawFile, error) {
	var p jsonPage
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%w: the page of %s is not PEP 691 JSON: %v", ErrBadIndex, name, err)
	}
	if major, _, _ := strings.Cut(p.Meta.APIVersion, "."); major != "1" {
		return nil, fmt.Errorf("%w: the page of %s has API version %q; only 1.x is understood", ErrBadIndex, name, p.Meta.APIVersion)
	}
	if p.Name != "" && Normalize(p.Name) != name {
		return nil, fmt.Errorf("%w: asked for %s, the index answered with the page of %q", ErrBadIndex, name, p.Name)
	}
	if len(p.Files) > maxFiles {
		return nil, limitf("the operator can raise the file limit", "the index lists %d files for %s, over the %d-file limit", len(p.Files), name, maxFiles)
	}
	out := make([]rawFile, 0, len(p.Files))
	for _, f := range p.Files {
		r := rawFile{filename: f.Filename, href: f.URL}
		r.sha256, r.hasSHA256 = f.Hashes["sha256"]
		if f.RequiresPython != nil {
			r.requiresPython = *f.RequiresPython
		}
		var yb bool
		var ys string
		switch {
		case json.Unmarshal(f.Yanked, &yb) == nil:
			r.yanked = yb
		case json.Unmarshal(f.Yanked, &ys) == nil:
			r.yanked, r.yankedReason = true, ys
		}
		meta := f.CoreMetadata
		if len(meta) == 0 {
			meta = f.DistInfoMetadata
		}
		var mh map[string]string
		if json.Unmarshal(meta, &mh) == nil {
			r.metadataSHA256 = mh["sha256"]
		}
		if f.Size != nil {
			r.size = *f.Size
		}
		out = append(out, r)
	}
	return out, nil
}

func parseHTMLPage(b []byte, maxFiles int) ([]rawFile, error) {
	as := anchors(b, maxFiles)
	if len(as) > maxFiles {
		return nil, limitf("the operator can raise the file limit", "the index page lists over %d files", maxFiles)
	}
	out := make([]rawFile, 0, len(as))
	for _, a := range as {
		href, ok := a.attrs["href"]
		if !ok {
			continue
		}
		r := rawFile{filename: a.text, href: href}
		if _, frag, ok := strings.Cut(href, "#"); ok {
			if algo, val, ok := strings.Cut(frag, "="); ok && algo == "sha256" {
				r.sha256, r.hasSHA256 = val, true
			}
		}
		r.requiresPython = a.attrs["data-requires-python"]
		if reason, ok := a.attrs["data-yanked"]; ok {
			r.yanked, r.yankedReason = true, reason
		}
		meta, ok := a.attrs["data-core-metadata"]
		if !ok {
			meta = a.attrs["data-dist-info-metadata"]
		}
		if algo, val, ok := strings.Cut(meta, "="); ok && algo == "sha256" {
			r.metadataSHA256 = val
		}
		out = append(out, r)
	}
	return out, nil
}

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// makeFile validates a page's entry: a usable File, or one whose Refused
// says why not.
func (c *Client) makeFile(page *url.URL, project string, r rawFile) File {
	f := File{Filename: r.filename, RequiresPython: r.requiresPython, Yanked: r.yanked, YankedReason: r.yankedReason}
	refuse := func(why string) File {
		if f.Refused == "" {
			f.Refused = why
		}
		return f
	}
	if len(f.Filename) > maxFilenameLen || !filenameRE.MatchString(f.Filename) {
		f.Filename = fmt.Sprintf("%.80q", r.filename)
		return refuse("its filename is not a plain file name")
	}
	kindWhy := f.parseKind(project)
	ref, err := url.Parse(r.href)
	if err != nil {
		return refuse("its URL does not parse")
	}
	u := page.ResolveReference(ref)
	u.Fragment, u.RawFragment = "", ""
	f.URL = u.String()
	if why := c.checkURL(u, page); why != "" {
		f.URL = redactURL(u)
		return refuse(why)
	}
	if path.Base(u.Path) != f.Filename {
		return refuse(fmt.Sprintf("its URL names another file (%q)", path.Base(u.Path)))
	}
	f.SHA256 = strings.ToLower(r.sha256)
	if !r.hasSHA256 || !sha256RE.MatchString(f.SHA256) {
		f.SHA256 = ""
		return refuse("the index publishes no sha256 for it")
	}
	if m := strings.ToLower(r.metadataSHA256); sha256RE.MatchString(m) {
		f.MetadataSHA256 = m
	}
	if r.size > 0 {
		f.Size = r.size
	}
	if kindWhy != "" {
		return refuse(kindWhy)
	}
	return f
}

// parseKind sets f's Kind, Version and Wheel from its name, and says why
// the name makes it unusable for project ("" when it does not).
func (f *File) parseKind(project string) string {
	lower := strings.ToLower(f.Filename)
	switch {
	case strings.HasSuffix(lower, ".whl"):
		w, err := ParseWheelFilename(f.Filename)
		if err != nil {
			return "its name is not a valid wheel filename"
		}
		f.Kind, f.Wheel, f.Version = KindWheel, w, w.Version
		if w.Name != project {
			return fmt.Sprintf("it is a wheel of %s, not %s", w.Name, project)
		}
	case isSdistName(lower):
		n, v, err := parseSdistFilename(f.Filename)
		if err != nil {
			return "its name is not a valid sdist filename"
		}
		f.Kind, f.Version = KindSdist, v
		if n != project {
			return fmt.Sprintf("it is an sdist of %s, not %s", n, project)
		}
	default:
		return "it is neither a wheel nor an sdist"
	}
	return ""
}

func (f File) check() error {
	if f.Refused != "" {
		return fmt.Errorf("%w: %s: %s", ErrRefusedFile, f.Filename, f.Refused)
	}
	if !sha256RE.MatchString(f.SHA256) {
		return fmt.Errorf("%w: %s: the index publishes no sha256 for it", ErrRefusedFile, f.Filename)
	}
	return nil
}

// Download streams f to w, at most MaxArtifactBytes, hashing it on the
// way, and returns the bytes written. A hash mismatch is ErrHashMismatch:
// w has then received bytes that are not f, so a caller that keeps them
// must throw them away (Cache.Fetch does).
func (c *Client) Download(ctx context.Context, f File, w io.Writer) (int64, error) {
	return c.download(ctx, f, w, c.maxArtifact())
}

func (c *Client) download(ctx context.Context, f File, w io.Writer, max int64) (int64, error) {
	if err := f.check(); err != nil {
		return 0, err
	}
	u, err := url.Parse(f.URL)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: its URL does not parse", ErrRefusedFile, f.Filename)
	}
	if why := c.checkURL(u, nil); why != "" {
		return 0, fmt.Errorf("%w: %s: %s", ErrRefusedFile, f.Filename, why)
	}
	var n int64
	h := sha256.New()
	err = c.get(ctx, u, "*/*", c.dlTimeout(), "downloading "+f.Filename, func(resp *http.Response) error {
		hint := "the operator can raise the per-artifact limit"
		if resp.ContentLength > max {
			return limitf(hint, "%s is %d bytes, over the %d-byte limit", f.Filename, resp.ContentLength, max)
		}
		var err error
		n, err = io.Copy(io.MultiWriter(w, h), io.LimitReader(resp.Body, max+1))
		if err != nil {
			return err
		}
		if n > max {
			return limitf(hint, "%s is over the %d-byte limit", f.Filename, max)
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return n, fmt.Errorf("%w: %s: the index published sha256 %s, the download has %s", ErrHashMismatch, f.Filename, f.SHA256, got)
	}
	return n, nil
}

// Metadata fetches f's PEP 658 metadata file (URL + ".metadata"), verifies
// it against the hash the index published for it and returns its bytes.
// A file without published metadata hash is ErrNoMatch: the caller reads
// METADATA from the wheel instead.
func (c *Client) Metadata(ctx context.Context, f File) ([]byte, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if f.MetadataSHA256 == "" {
		return nil, fmt.Errorf("%w: the index offers no verifiable metadata for %s", ErrNoMatch, f.Filename)
	}
	u, err := url.Parse(f.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: its URL does not parse", ErrRefusedFile, f.Filename)
	}
	u.Path += ".metadata"
	u.RawPath = ""
	if why := c.checkURL(u, nil); why != "" {
		return nil, fmt.Errorf("%w: %s: %s", ErrRefusedFile, f.Filename, why)
	}
	var b []byte
	what := "the metadata of " + f.Filename
	err = c.get(ctx, u, "*/*", c.timeout(), what, func(resp *http.Response) error {
		var err error
		b, err = readBounded(resp, c.maxMetadata(), what, "")
		return err
	})
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != f.MetadataSHA256 {
		return nil, fmt.Errorf("%w: %s.metadata: the index published sha256 %s, the download has %s", ErrHashMismatch, f.Filename, f.MetadataSHA256, got)
	}
	return b, nil
}
