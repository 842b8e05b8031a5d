package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sandpit-dev/sandpit/internal/packages"
	"github.com/sandpit-dev/sandpit/internal/testbrowser"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// login logs tb in with token on the login page that opening next leads
// to.
func login(t *testing.T, tb *testbrowser.Tab, base, token, next string) {
	t.Helper()
	tb.Do(t, "open "+next, chromedp.Navigate(base+next), chromedp.WaitVisible(chromedp.ID("token")))
	if loc := testbrowser.Run(t, tb, "location", chromedp.Location()); !strings.HasPrefix(loc, base+"/login?next=") {
		t.Fatalf("not logged in, %s went to %s, not the login page", next, loc)
	}
	audit(t, tb, "login")
	tb.Do(t, "log in", chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("tenant")))
}

// auditJS checks what a page owes people using a keyboard, a screen
// reader, or weak eyes: a language, one h1, alt text on every image, a
// label on every field, a name on every link and button, and text
// contrast of at least 4.5:1 (WCAG AA) against the background it sits on.
// It returns the problems found.
const auditJS = `(() => {
  const out = [];
  if (!document.documentElement.lang) out.push("no lang on <html>");
  if (document.querySelectorAll("h1").length !== 1) out.push(document.querySelectorAll("h1").length + " h1 elements");
  document.querySelectorAll("img").forEach(i => { if (!i.getAttribute("alt")) out.push("image without alt: " + i.src); });
  document.querySelectorAll("input:not([type=hidden]), select, textarea").forEach(f => {
    if (!(f.labels && f.labels.length) && !f.getAttribute("aria-label")) out.push("field without a label: " + (f.name || f.id));
  });
  document.querySelectorAll("a, button").forEach(e => {
    if (!(e.textContent.trim() || e.getAttribute("aria-label"))) out.push("link or button without a name: " + e.outerHTML.slice(0, 80));
  });
  const rgb = c => (c.match(/[\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const bg = el => { for (let e = el; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor); if (c.length === 3 || (c.length === 4 && c[3] > 0.9)) return c.slice(0, 3); } return [255, 255, 255]; };
  document.querySelectorAll("body *").forEach(el => {
    if (!Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim())) return;
    const st = getComputedStyle(el);
    if (st.visibility === "hidden" || st.display === "none" || el.closest(".sr-only, .skip")) return;
    const a = lum(rgb(st.color).slice(0, 3)), b = lum(bg(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) out.push("contrast " + ratio.toFixed(2) + " for " + el.tagName.toLowerCase() + "." + el.className + ": " + el.textContent.trim().slice(0, 40));
  });
  return out.slice(0, 20);
})()`

// audit fails t with the page's accessibility problems (auditJS), and
// checks that the keyboard's first stop is the skip link.
func audit(t *testing.T, tb *testbrowser.Tab, page string) {
	t.Helper()
	for _, p := range testbrowser.Run(t, tb, "audit "+page, chromedp.Evaluate[[]string](auditJS)) {
		t.Errorf("%s: %s", page, p)
	}
	if page == "login" {
		return // its token field has the focus (autofocus): typing is the first thing to do
	}
	// The keyboard: the first Tab reaches the skip link.
	tb.Do(t, "tab on "+page, chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur()`), chromedp.KeyEvent(kb.Tab))
	if got := testbrowser.Run(t, tb, "focus on "+page, chromedp.Evaluate[string](`document.activeElement.className`)); got != "skip" {
		t.Errorf("%s: the first Tab focuses %q, not the skip link", page, got)
	}
}

// The dashboard in a real browser (issue 28): log in with a token; a run
// appears in Live while it runs, is cancelled from the page, and is in
// History as cancelled by a person; a run's page shows its output, an
// inline plot and the files it changed; what a program prints renders as
// text (no dialog opens); a snapshot is restored from the timeline; tenant
// B's browser gets 404 for tenant A's run; no page asks another origin for
// anything or logs an error.
func TestDashboardBrowser(t *testing.T) {
	bin := testbrowser.Path(t)
	data := filepath.Join(t.TempDir(), "data")
	ta, tbTok := token(t, data, "alice"), token(t, data, "bob")
	srv := startHTTP(t, data, "--operator", "bob")
	alice := httpClient(t, srv.url, ta)
	// A call the server refuses, and a request with no token: the security
	// and operator pages show them.
	if r := call(t, alice, "run_code", map[string]any{"language": "python", "code": "1", "timeout_seconds": 1e9}); !r.IsError {
		t.Fatalf("an absurd timeout was accepted: %s", text(r))
	}
	if res, err := http.Post(srv.url, "application/json", strings.NewReader("{}")); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST without a token: %v %v", res, err)
	} else {
		res.Body.Close()
	}

	// alice's state: a run with a plot, a hostile run, a snapshot.
	plot := runResult(t, call(t, alice, "run_code", map[string]any{"language": "python", "code": strings.Join([]string{
		"# a plot, and a file", "import matplotlib", "matplotlib.use('Agg')", "import matplotlib.pyplot as plt",
		"plt.plot([1, 2, 3], [1, 4, 9])", "plt.savefig('plot.png')", "open('notes.txt', 'w').write('hello\\n')", "print('plotted 3 points')",
	}, "\n")}))
	if plot.Status != "success" {
		t.Fatalf("plot run: %+v", plot)
	}
	hostile := runResult(t, call(t, alice, "run_code", map[string]any{"language": "python",
		"code": `print("<script>alert(1)</script><img src=x onerror=alert(2)>\x1b[31mred\x1b[0m")`}))
	if hostile.Status != "success" {
		t.Fatalf("hostile run: %+v", hostile)
	}
	snap := structuredMap(t, call(t, alice, "create_state_snapshot", map[string]any{"description": "before later.txt"}))
	snapID, _ := snap["snapshot_id"].(string)
	if r := call(t, alice, "write_file", map[string]any{"path": "later.txt", "content": "made after the snapshot"}); r.IsError || snapID == "" {
		t.Fatalf("write_file: %s; snapshot %v", text(r), snap)
	}

	a := testbrowser.Open(t, bin, testbrowser.Options{Origins: []string{srv.base}})
	login(t, a, srv.base, ta, "/")
	a.Screenshot(t, "live-empty")
	audit(t, a, "live")

	// A run appears in Live while it runs (the page refreshes itself).
	bg := runResult(t, call(t, alice, "run_code", map[string]any{"language": "bash", "code": "echo started; sleep 55", "background": true, "timeout_seconds": 58}))
	row := `tr[data-run="` + bg.ID + `"]`
	a.Do(t, "the background run appears in Live", chromedp.WaitVisible(chromedp.CSS(row)))
	// With its memory as it runs (the page refreshes the row).
	if !testenv.Poll(testenv.Patience, func() bool {
		m := testbrowser.Run(t, a, "the live row's memory", chromedp.Evaluate[string](`(document.querySelector('`+row+` td.mem') || {}).textContent || ""`))
		return m != "" && m != "0 B"
	}) {
		t.Error("Live never showed the running sandbox's memory")
	}
	a.Screenshot(t, "live-running")
	// Cancelled from the page, through its confirmation.
	a.Do(t, "cancel it", chromedp.Click(chromedp.CSS(row+` a.danger`)), chromedp.WaitVisible(chromedp.ID("confirm")))
	a.Screenshot(t, "confirm-cancel")
	a.Do(t, "confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("run-status")))
	if st := a.Text(t, "#run-status"); st != "cancelled" {
		t.Errorf("the cancelled run's page says %q", st)
	}
	if !strings.Contains(a.Text(t, "main"), "cancelled by a person") {
		t.Error("the run's page does not say a person cancelled it")
	}
	// ...and it is in History.
	a.Do(t, "history", chromedp.Navigate(srv.base+"/runs"), chromedp.WaitVisible(chromedp.CSS(`#runs `+row)))
	if st := a.Text(t, row+" .status"); st != "cancelled" {
		t.Errorf("History shows the cancelled run as %q", st)
	}
	a.Screenshot(t, "history")
	audit(t, a, "history")

	// The plot run's page: its output, the plot inline, the files it made.
	a.Do(t, "the plot run's page", chromedp.Navigate(srv.base+"/runs/"+plot.ID), chromedp.WaitVisible(chromedp.ID("stdout")))
	if out := a.Text(t, "#stdout"); !strings.Contains(out, "plotted 3 points") {
		t.Errorf("the run's output on its page: %q", out)
	}
	files := a.Text(t, "#files")
	if !strings.Contains(files, "plot.png") || !strings.Contains(files, "notes.txt") {
		t.Errorf("files changed: %q", files)
	}
	loaded := testbrowser.Run(t, a, "the plot loaded", chromedp.Evaluate[bool](`(() => { const i = document.querySelector('.images img'); return !!i && i.complete && i.naturalWidth > 100; })()`))
	if !loaded {
		t.Error("the plot is not shown inline (no image, or it did not load)")
	}
	a.Screenshot(t, "run-plot")
	audit(t, a, "run")
	// Run again, in a fresh sandbox: a new run, in the history like any.
	a.Do(t, "run it again", chromedp.Click(chromedp.ID("rerun")), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("run-id")))
	again := a.Text(t, "#run-id")
	if again == plot.ID || again == "" {
		t.Errorf("running again gave run %q (the first was %s)", again, plot.ID)
	}
	// It runs in the background; the restore below waits for no run.
	if !testenv.Poll(testenv.Patience, func() bool {
		r := call(t, alice, "get_run", map[string]any{"id": again})
		return !r.IsError && structuredMap(t, r)["status"] != "running"
	}) {
		t.Errorf("the run started again (%s) did not end, or is unknown to the agent", again)
	}
	// What it did to a file, as a diff.
	a.Do(t, "the diff of notes.txt", chromedp.Navigate(srv.base+"/runs/"+plot.ID+"/diff?path=notes.txt"), chromedp.WaitVisible(chromedp.ID("diff")))
	if d := a.Text(t, "#diff"); !strings.Contains(d, "+hello") {
		t.Errorf("the diff of the file the run made: %q", d)
	}
	a.Screenshot(t, "run-diff")
	audit(t, a, "diff")

	// What a program prints is text: no dialog, the markup and the escape
	// codes visible as written.
	a.Do(t, "the hostile run's page", chromedp.Navigate(srv.base+"/runs/"+hostile.ID), chromedp.WaitVisible(chromedp.ID("stdout")))
	out := a.Text(t, "#stdout")
	for _, want := range []string{"<script>alert(1)</script>", "<img src=x onerror=alert(2)>", `\x1b[31mred\x1b[0m`} {
		if !strings.Contains(out, want) {
			t.Errorf("the hostile output does not read %q as text: %q", want, out)
		}
	}
	if n := testbrowser.Run(t, a, "count injected elements", chromedp.Evaluate[int](`document.querySelectorAll('main script, main img[src="x"]').length`)); n != 0 {
		t.Errorf("the hostile output made %d elements", n)
	}
	a.Screenshot(t, "run-hostile")

	// The workspace and a file's preview, with the packages its lock
	// records (written here, after the snapshot: the restore below takes
	// it away before any later run would look for its layer).
	lock := packages.Lock{Version: packages.LockVersion, Requested: packages.Requested{Python: []string{"sp-greet==1.0"}},
		Python: []packages.PyEntry{{Name: "sp-greet", Version: "1.0", Filename: "sp_greet-1.0-py3-none-any.whl",
			URL: "https://idx.example/f/sp_greet-1.0-py3-none-any.whl", SHA256: strings.Repeat("ab", 32), Size: 1000}}}
	if r := call(t, alice, "write_file", map[string]any{"path": packages.LockFile, "content": string(lock.Marshal())}); r.IsError {
		t.Fatal(text(r))
	}
	a.Do(t, "workspace", chromedp.Navigate(srv.base+"/workspace"), chromedp.WaitVisible(chromedp.ID("entries")))
	if ws := a.Text(t, "#entries"); !strings.Contains(ws, "later.txt") || !strings.Contains(ws, "plot.png") {
		t.Errorf("workspace listing: %q", ws)
	}
	if pk := a.Text(t, "#packages"); !strings.Contains(pk, "sp-greet") || !strings.Contains(pk, "requested") {
		t.Errorf("workspace packages: %q", pk)
	}
	a.Screenshot(t, "workspace")
	audit(t, a, "workspace")

	// A snapshot restored from the timeline, through its confirmation.
	a.Do(t, "snapshots", chromedp.Navigate(srv.base+"/snapshots"), chromedp.WaitVisible(chromedp.CSS(`li[data-snapshot="`+snapID+`"]`)))
	a.Screenshot(t, "snapshots")
	audit(t, a, "snapshots")
	a.Do(t, "restore", chromedp.Click(chromedp.CSS(`li[data-snapshot="`+snapID+`"] a.danger`)), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("restored")))
	if r := call(t, alice, "read_file", map[string]any{"path": "later.txt"}); !r.IsError {
		t.Errorf("later.txt survived restoring the snapshot taken before it: %s", text(r))
	}

	// Metrics: the charts load as images.
	a.Do(t, "metrics", chromedp.Navigate(srv.base+"/metrics"), chromedp.WaitVisible(chromedp.CSS(".charts")))
	// Runs per minute, latency, CPU and memory, the pool, its hit rate, sessions' memory.
	if !testenv.Poll(testenv.Patience, func() bool {
		n := testbrowser.Run(t, a, "charts loaded", chromedp.Evaluate[int](`Array.from(document.querySelectorAll('.charts img')).filter(i => i.complete && i.naturalWidth > 0).length`))
		return n == 6
	}) {
		t.Errorf("not all 6 charts loaded")
	}
	a.Screenshot(t, "metrics")
	audit(t, a, "metrics")
	a.Do(t, "security", chromedp.Navigate(srv.base+"/security"), chromedp.WaitVisible(chromedp.ID("events")))
	if ev := a.Text(t, "#events"); !strings.Contains(ev, "refused") || !strings.Contains(ev, "timeout") {
		t.Errorf("alice's security page: %q", ev)
	}
	a.Screenshot(t, "security")
	audit(t, a, "security")
	a.Check(t)

	// Tenant B's browser: alice's run is "not found", as one that never was.
	b := testbrowser.Open(t, bin, testbrowser.Options{Origins: []string{srv.base}})
	login(t, b, srv.base, tbTok, "/runs")
	b.Expect404(srv.base+"/runs/"+plot.ID, srv.base+"/runs/0123456789abcdef")
	resp, err := chromedp.RunResponse(b.Ctx, chromedp.Navigate(srv.base+"/runs/"+plot.ID))
	if err != nil {
		t.Fatal(err)
	}
	theirs := b.Text(t, "main")
	resp2, err := chromedp.RunResponse(b.Ctx, chromedp.Navigate(srv.base+"/runs/0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	never := b.Text(t, "main")
	if resp.Status != 404 || resp2.Status != 404 || theirs != never {
		t.Errorf("bob's browser on alice's run: %d %q; on a run that never was: %d %q", resp.Status, theirs, resp2.Status, never)
	}
	if strings.Contains(b.Text(t, "body"), "plotted") {
		t.Error("bob's page shows alice's output")
	}
	b.Screenshot(t, "other-tenant-404")
	audit(t, b, "not found")
	// bob is an operator: every tenant, and the request refused for want
	// of a token.
	b.Do(t, "operator", chromedp.Navigate(srv.base+"/operator"), chromedp.WaitVisible(chromedp.CSS(`tr[data-tenant="alice"]`)))
	if ev := b.Text(t, "#server-events"); !strings.Contains(ev, "HTTP 401") {
		t.Errorf("the operator's refused requests: %q", ev)
	}
	b.Screenshot(t, "operator")
	audit(t, b, "operator")
	// ...and reads alice's history from there, read-only.
	b.Do(t, "alice's history, as an operator", chromedp.Click(chromedp.CSS(`tr[data-tenant="alice"] a`)), chromedp.WaitVisible(chromedp.ID("viewing")))
	if h := b.Text(t, "#runs"); !strings.Contains(h, plot.ID) {
		t.Errorf("the operator's view of alice's history lacks run %s", plot.ID)
	}
	audit(t, b, "operator's view of a tenant")
	b.Check(t)
	// A page that exists still shows bob his own (empty) history.
	b.Do(t, "bob's history", chromedp.Navigate(srv.base+"/runs"), chromedp.WaitVisible(chromedp.ID("no-runs")))
}
