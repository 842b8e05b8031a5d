package dash

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/alecthomas/chroma/v2"
	chromahtml "github.com/alecthomas/chroma/v2/formatters/html"
	"github.com/alecthomas/chroma/v2/lexers"
	"github.com/alecthomas/chroma/v2/styles"
)

// page is what every template gets.
type page struct {
	Title  string
	Nav    string // the nav entry to mark current
	Tenant string
	CSRF   string
	Login  bool // a login session: show the logout form
	// Actions: the viewer may cancel, restore and run again (not in a
	// read-only view).
	Actions  bool
	Operator bool // show the operator's page in the menu
	// Viewing is the other tenant an operator reads; TQ and TA carry it
	// in links ("?tenant=NAME", "&tenant=NAME"), empty otherwise.
	Viewing string
	TQ, TA  template.URL
	Data    any
}

func (d *Dash) parse() error {
	funcs := template.FuncMap{
		"bytes":   humanBytes,
		"ubytes":  func(n uint64) string { return humanBytes(int64(min(n, 1<<62))) },
		"add":     func(a, b int64) int64 { return a + b },
		"ms":      humanMS,
		"visible": visible,
		"code":    highlight,
		"ago":     func(t time.Time) string { return humanAgo(d.cfg.Now().Sub(t)) },
		"since":   func(t time.Time) string { return humanDur(d.cfg.Now().Sub(t)) },
		"utc":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
		"iso":     func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"q":       url.QueryEscape,
		"base":    path.Base,
		"dir":     parentDir,
	}
	base, err := template.New("layout").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return fmt.Errorf("dash templates: %w", err)
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return err
	}
	d.pages = map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(path.Base(n), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return fmt.Errorf("dash template %s: %w", n, err)
		}
		d.pages[name] = t
	}
	return nil
}

// render writes page name, whole (layout and content) or, for a fragment,
// the template named fragment alone.
func (d *Dash) render(w http.ResponseWriter, r *http.Request, status int, name string, v *viewer, data any) {
	d.renderPage(w, status, name, "layout", v, data)
}

func (d *Dash) renderFragment(w http.ResponseWriter, name, fragment string, v *viewer, data any) {
	d.renderPage(w, http.StatusOK, name, fragment, v, data)
}

func (d *Dash) renderPage(w http.ResponseWriter, status int, name, entry string, v *viewer, data any) {
	t := d.pages[name]
	if t == nil {
		d.plain(w, http.StatusInternalServerError, "no page "+name)
		return
	}
	p := page{Title: titles[name], Nav: name, Data: data, Actions: !d.cfg.ReadOnly}
	if v != nil {
		p.Tenant, p.CSRF, p.Login, p.Operator = v.p.Tenant, v.csrf(), v.login != nil, v.operator
		if v.other != "" {
			p.Viewing, p.Actions = v.other, false
			p.TQ, p.TA = template.URL("?tenant="+url.QueryEscape(v.other)), template.URL("&tenant="+url.QueryEscape(v.other))
		}
	}
	// Rendered whole before a byte is sent: a template error is a 500,
	// not half a page.
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, entry, p); err != nil {
		d.log.Error("dashboard: rendering", "page", name, "err", err)
		d.plain(w, http.StatusInternalServerError, "the page could not be rendered")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

var titles = map[string]string{
	"login": "Log in", "live": "Live", "runs": "History", "run": "Run", "confirm": "Confirm",
	"workspace": "Workspace", "file": "File", "snapshots": "Snapshots", "snapshot": "Snapshot",
	"metrics": "Metrics", "error": "Error", "security": "Security", "operator": "Operator", "diff": "Diff", "loggedin": "Logged in",
}

// errorPage renders a message with status; v may be nil (not logged in).
func (d *Dash) errorPage(w http.ResponseWriter, r *http.Request, v *viewer, status int, msg string) {
	d.render(w, r, status, "error", v, map[string]any{"Status": status, "StatusText": http.StatusText(status), "Message": msg})
}

// notFound is the one answer for what does not exist and for what belongs
// to another tenant.
func (d *Dash) notFound(w http.ResponseWriter, r *http.Request, v *viewer, what string) {
	d.errorPage(w, r, v, http.StatusNotFound, "No "+what+" here.")
}

// visible shows text a program wrote as text: control characters other
// than newline and tab are written as Go escapes (ESC is \x1b, so an ANSI
// colour code reads as \x1b[31m: every font has these glyphs, unlike the
// Unicode control pictures), and bidirectional overrides, which can make
// text read differently from what it is, are written as \u202e. Invalid
// UTF-8 becomes U+FFFD.
func visible(s string) string {
	if !needsVisible(s) {
		return s
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20, r == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", r)
		case r >= 0x80 && r < 0xa0, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func needsVisible(s string) bool {
	if !utf8.ValidString(s) {
		return true
	}
	for _, r := range s {
		if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f {
			return true
		}
	}
	return false
}

// maxHighlight bounds the code highlighted; longer code is shown plain.
const maxHighlight = 256 << 10

var codeFormatter = chromahtml.New(chromahtml.WithClasses(true), chromahtml.WithLineNumbers(true), chromahtml.LineNumbersInTable(false))

var codeStyle = styles.Get("github")

// highlight renders code in language as HTML with classes (the CSP allows
// no inline style). Its text is escaped by chroma; control characters are
// made visible first.
func highlight(language, code string) template.HTML {
	code = visible(code)
	lexer := lexers.Get(lexerName(language))
	if lexer == nil || len(code) > maxHighlight {
		return template.HTML(`<pre class="chroma plain">` + template.HTMLEscapeString(code) + `</pre>`)
	}
	it, err := chroma.Coalesce(lexer).Tokenise(nil, code)
	if err != nil {
		return template.HTML(`<pre class="chroma plain">` + template.HTMLEscapeString(code) + `</pre>`)
	}
	var b bytes.Buffer
	if err := codeFormatter.Format(&b, codeStyle, it); err != nil {
		return template.HTML(`<pre class="chroma plain">` + template.HTMLEscapeString(code) + `</pre>`)
	}
	return template.HTML(b.String())
}

func lexerName(language string) string {
	switch language {
	case "bash", "sh", "shell":
		return "bash"
	case "javascript", "node", "js":
		return "javascript"
	case "c":
		return "c"
	case "cpp", "c++":
		return "cpp"
	}
	return language
}

// codeCSS is the stylesheet for highlighted code.
func codeCSS() []byte {
	var b bytes.Buffer
	codeFormatter.WriteCSS(&b, codeStyle)
	return b.Bytes()
}

func (d *Dash) serveCodeCSS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=3600")
	w.Write(d.codeCSS)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func humanMS(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return humanDur(time.Duration(ms) * time.Millisecond)
}

func humanDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
}

func humanAgo(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return humanDur(d.Truncate(time.Second)) + " ago"
}

// parentDir is p's directory in the workspace ("" at the root).
func parentDir(p string) string {
	d := path.Dir(p)
	if d == "." || d == "/" {
		return ""
	}
	return d
}
