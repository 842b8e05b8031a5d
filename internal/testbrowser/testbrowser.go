// Package testbrowser drives Debian's Chromium for sandpit's page tests
// (the dashboard, the MCP App) through chromedp, and watches what a page
// must never do: open a dialog, throw, log an error or warning, or ask an
// origin other than the test's for anything. Tests only; a package of its
// own so that only the tests that drive a browser compile chromedp.
package testbrowser

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// Path is the Chromium to drive: SANDPIT_BROWSER (scripts/test.sh sets it,
// and then its absence fails the test), else chromium on PATH; without
// one, the test fails when integration is required and is skipped,
// saying why, otherwise.
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("SANDPIT_BROWSER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("SANDPIT_BROWSER=%s: %v", p, err)
		}
		return p
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv(testenv.EnvRequire) == "1" {
			t.Fatal("no chromium (install Debian's chromium, or run scripts/test.sh, which does)")
		}
		t.Skip("no chromium on PATH and SANDPIT_BROWSER unset: this test drives Debian's chromium (scripts/test.sh installs it)")
	}
	return p
}

// Options shape a Tab.
type Options struct {
	// Origins the pages may ask for anything (data: URLs always).
	Origins []string
	// Width and Height of the window; default 1280×900.
	Width, Height int
	// Flags are extra command-line flags for Chromium.
	Flags map[string]any
}

// Tab is one browser with a profile of its own (its cookies are not
// shared), and what it has seen.
type Tab struct {
	Ctx  context.Context
	opts Options

	mu       sync.Mutex
	problems []string
	requests int
	expected map[string]bool
}

// Open starts Chromium at bin and watches its tab.
func Open(t testing.TB, bin string, o Options) *Tab {
	t.Helper()
	if o.Width == 0 {
		o.Width, o.Height = 1280, 900
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(o.Width, o.Height),
		chromedp.Flag("no-proxy-server", true))
	for k, v := range o.Flags {
		opts = append(opts, chromedp.Flag(k, v))
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	tb := &Tab{Ctx: ctx, opts: o}
	if err := chromedp.Do(ctx); err != nil { // opens the tab before listening
		t.Fatalf("starting %s: %v", bin, err)
	}
	if err := chromedp.Listen(ctx, tb.event); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, log.Enable, struct{}{}); err != nil {
		t.Fatal(err)
	}
	return tb
}

// Expect404 says the test asks for these URLs knowing they are not
// found: their 404s are not problems.
func (tb *Tab) Expect404(urls ...string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.expected == nil {
		tb.expected = map[string]bool{}
	}
	for _, u := range urls {
		tb.expected[u] = true
	}
}

func (tb *Tab) event(ev any) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	switch e := ev.(type) {
	case *page.EventJavascriptDialogOpening:
		tb.problems = append(tb.problems, "a dialog opened: "+e.Message)
		go chromedp.Call(tb.Ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
	case *cdpruntime.EventExceptionThrown:
		tb.problems = append(tb.problems, "exception: "+e.ExceptionDetails.Text)
	case *cdpruntime.EventConsoleAPICalled:
		if e.Type == cdpruntime.ConsoleAPICalledTypeError || e.Type == cdpruntime.ConsoleAPICalledTypeWarning {
			tb.problems = append(tb.problems, fmt.Sprintf("console %s", e.Type))
		}
	case *log.EventEntryAdded:
		if tb.expected[e.Entry.URL] && e.Entry.Source == log.EntrySourceNetwork {
			return
		}
		if e.Entry.Level == log.EntryLevelError || e.Entry.Level == log.EntryLevelWarning {
			tb.problems = append(tb.problems, fmt.Sprintf("log %s (%s): %s %s", e.Entry.Level, e.Entry.Source, e.Entry.Text, e.Entry.URL))
		}
	case *network.EventRequestWillBeSent:
		tb.requests++
		u, err := url.Parse(e.Request.URL)
		if err != nil || (u.Scheme != "data" && !slices.Contains(tb.opts.Origins, u.Scheme+"://"+u.Host)) {
			tb.problems = append(tb.problems, "a request to another origin: "+e.Request.URL)
		}
	}
}

// Check fails t with what the pages did that they must not.
func (tb *Tab) Check(t testing.TB) {
	t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, p := range tb.problems {
		t.Errorf("browser: %s", p)
	}
	if tb.requests == 0 {
		t.Error("the browser saw no request at all: the network watch is not working")
	}
}

// Do runs steps, within testenv.Patience; a failure says where the
// browser is and what it shows.
func (tb *Tab) Do(t testing.TB, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.Ctx, testenv.Patience)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tb.Explain(t)
		t.Fatalf("%s: %v", what, err)
	}
}

// Run runs a and returns its value, as Do.
func Run[T any](t testing.TB, tb *Tab, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.Ctx, testenv.Patience)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		tb.Explain(t)
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// Text is the text of the first element sel (a CSS selector) matches.
func (tb *Tab) Text(t testing.TB, sel string) string {
	t.Helper()
	return Run(t, tb, "text of "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// Explain logs where the browser is, what it shows and what it has seen.
func (tb *Tab) Explain(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.Ctx, 10*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : "(no body)"`))
	tb.mu.Lock()
	problems := slices.Clone(tb.problems)
	tb.mu.Unlock()
	t.Logf("browser at %s, problems so far %q, showing:\n%s", loc, problems, body)
}

// Screenshot writes the page as a PNG test artifact (SANDPIT_ARTIFACTS,
// else a directory under the system's temp dir) for a person to look at;
// nothing compares it.
func (tb *Tab) Screenshot(t testing.TB, name string) {
	t.Helper()
	dir := os.Getenv("SANDPIT_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "sandpit-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png := Run(t, tb, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
