package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testbrowser"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// toolMeta is a tool's _meta as a client decodes it from tools/list.
func toolMeta(t *testing.T, tool mcpgo.Tool) map[string]any {
	t.Helper()
	b, err := json.Marshal(tool)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Meta map[string]any `json:"_meta"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v.Meta
}

// run_code names the run app in _meta exactly as the MCP Apps
// specification (2026-01-26) says: _meta.ui.resourceUri, and the deprecated
// flat ui/resourceUri that older hosts read; the app is a resource of the
// specification's MIME type, listed and readable. Without a runner there is
// neither.
func TestRunAppDeclared(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantApp bool
	}{
		{"with a runner", nil, true},
		{"without a runner", func(c *Config) { c.Runner = nil }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.mutate)
			tools, err := f.c.ListTools(t.Context(), mcpgo.ListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, tool := range tools.Tools {
				meta := toolMeta(t, tool)
				if tool.Name != "run_code" && tool.Name != "get_run" {
					if _, ok := meta["ui"]; ok {
						t.Errorf("%s declares a UI: %v", tool.Name, meta)
					}
					continue
				}
				found = found || tool.Name == "run_code"
				ui, _ := meta["ui"].(map[string]any)
				if got := ui["resourceUri"]; got != "ui://sandpit/run" {
					t.Errorf("%s _meta.ui.resourceUri = %v, want ui://sandpit/run (_meta %v)", tool.Name, got, meta)
				}
				if got := meta["ui/resourceUri"]; got != "ui://sandpit/run" {
					t.Errorf("%s _meta[ui/resourceUri] = %v, want ui://sandpit/run", tool.Name, got)
				}
			}
			if found != tt.wantApp {
				t.Errorf("run_code listed: %v, want %v", found, tt.wantApp)
			}

			list, err := f.c.ListResources(t.Context(), mcpgo.ListResourcesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var app *mcpgo.Resource
			for i, r := range list.Resources {
				if r.URI == runAppURI {
					app = &list.Resources[i]
				}
			}
			if (app != nil) != tt.wantApp {
				t.Fatalf("ui://sandpit/run listed: %v, want %v", app != nil, tt.wantApp)
			}
			if app == nil {
				return
			}
			if app.MIMEType != "text/html;profile=mcp-app" {
				t.Errorf("mimeType = %q, want text/html;profile=mcp-app", app.MIMEType)
			}
			if app.Meta == nil || fmt.Sprint(app.Meta.AdditionalFields["ui"]) != "map[prefersBorder:true]" {
				t.Errorf("resource _meta = %+v, want ui.prefersBorder and no csp (the spec's restrictive default)", app.Meta)
			}

			req := mcpgo.ReadResourceRequest{}
			req.Params.URI = runAppURI
			read, err := f.c.ReadResource(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if len(read.Contents) != 1 {
				t.Fatalf("resources/read: %d contents, want 1", len(read.Contents))
			}
			c, ok := read.Contents[0].(mcpgo.TextResourceContents)
			if !ok {
				t.Fatalf("resources/read: %T, want text", read.Contents[0])
			}
			if c.URI != runAppURI || c.MIMEType != "text/html;profile=mcp-app" || c.Text != runAppHTML ||
				!strings.HasPrefix(c.Text, "<!DOCTYPE html>") {
				t.Errorf("resources/read: uri %q mimeType %q, %d bytes of HTML", c.URI, c.MIMEType, len(c.Text))
			}
		})
	}
}

// Declaring the app changes nothing in run_code's result: clients without
// the extension read the same text and structured content as before.
func TestRunAppLeavesResultAlone(t *testing.T) {
	f := newFixture(t, nil)
	var out RunCodeResult
	res := f.call(t, "run_code", map[string]any{"language": "python", "code": "print('ok')"}, &out)
	if res.IsError || out.Stdout != "ok\n" {
		t.Fatalf("isError %v, stdout %q", res.IsError, out.Stdout)
	}
	if res.Meta != nil {
		for k := range res.Meta.AdditionalFields {
			if strings.HasPrefix(k, "ui") {
				t.Errorf("the result's _meta has %s: %+v", k, res.Meta)
			}
		}
	}
	if len(res.Content) != 1 || !strings.HasPrefix(text(res), "status: success (exit code 0)") {
		t.Errorf("content = %+v", res.Content)
	}
}

// The app's HTML, read as text: what the program printed only ever becomes
// text (no HTML sink anywhere), it asks nothing of any origin, and it
// speaks the specification's messages.
func TestRunAppHTML(t *testing.T) {
	forbidden := []struct {
		name string
		re   string
	}{
		{"innerHTML", `innerHTML`},
		{"outerHTML", `outerHTML`},
		{"insertAdjacentHTML", `insertAdjacentHTML`},
		{"document.write", `document\.write`},
		{"srcdoc", `srcdoc`},
		{"eval", `\beval\s*\(`},
		{"Function constructor", `\bFunction\s*\(`},
		{"string timers", `set(Timeout|Interval)\s*\(\s*["'\x60]`},
		{"an http or https URL", `(?i)https?:`},
		{"a protocol-relative URL", `["'(=]\s*//[a-z0-9]`},
		{"an external script", `(?i)<script[^>]*\bsrc\s*=`},
		{"a link element", `(?i)<link\b`},
		{"a CSS import or url()", `(?i)@import|url\(`},
		{"fetch", `\bfetch\s*\(`},
		{"XMLHttpRequest", `XMLHttpRequest`},
		{"WebSocket", `WebSocket`},
		{"EventSource", `EventSource`},
		{"sendBeacon", `sendBeacon`},
		{"a form", `(?i)<form\b`},
		{"a nested frame", `(?i)<i?frame\b`},
		{"storage", `localStorage|sessionStorage|document\.cookie`},
	}
	for _, tt := range forbidden {
		t.Run("no "+tt.name, func(t *testing.T) {
			if loc := regexp.MustCompile(tt.re).FindStringIndex(runAppHTML); loc != nil {
				from := max(0, loc[0]-60)
				t.Errorf("%s at byte %d: %q", tt.name, loc[0], runAppHTML[from:min(len(runAppHTML), loc[1]+60)])
			}
		})
	}
	t.Run("one inline script", func(t *testing.T) {
		if got := regexp.MustCompile(`(?i)<script\b[^>]*>`).FindAllString(runAppHTML, -1); !slices.Equal(got, []string{"<script>"}) {
			t.Errorf("script tags %q, want one bare <script>", got)
		}
	})
	for _, want := range []string{
		`"ui/initialize"`, `"ui/notifications/initialized"`, `"ui/notifications/tool-input"`,
		`"ui/notifications/tool-result"`, `"ui/notifications/tool-cancelled"`,
		`"ui/notifications/host-context-changed"`, `"ui/notifications/size-changed"`, `"ui/resource-teardown"`,
		`"ping"`, `"resources/read"`, `PROTOCOL_VERSION = "2026-01-26"`, `jsonrpc: "2.0"`,
		`ev.source !== host`, // messages from anything but the host are ignored
		`.textContent`,
	} {
		if !strings.Contains(runAppHTML, want) {
			t.Errorf("the app lacks %s", want)
		}
	}
}

// printingRunner is writingRunner whose run also prints.
type printingRunner struct {
	writingRunner
	stdout, stderr string
}

func (r *printingRunner) Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	res, err := r.writingRunner.Run(ctx, req)
	if err != nil {
		return nil, err
	}
	res.Stdout, res.Stderr = r.stdout, r.stderr
	res.StdoutBytes, res.StderrBytes = int64(len(r.stdout)), int64(len(r.stderr))
	res.DurationMS = 1234
	return res, nil
}

// appHostPage stands for an MCP Apps host: it frames the app (another
// origin, sandboxed, as hosts do; allow-modals so that a script the app ran
// by mistake could open a dialog the test sees), answers ui/initialize,
// sends the tool's input and result once the app says initialized, proxies
// resources/read to the server, pings the app and records what it hears.
const appHostPage = `<!DOCTYPE html>
<html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>host</title></head>
<body>
<iframe id="app" sandbox="allow-scripts allow-modals" src="APP_URL" style="width:900px;height:700px;border:0"></iframe>
<script>
"use strict";
const frame = document.getElementById("app");
const result = fetch("/result.json").then(r => r.json());
window.hostLog = [];
window.sizes = 0;
window.pong = null;
window.appInit = null;
function post(m) { frame.contentWindow.postMessage(m, "*"); }
// sendRecord sends get_run's result, as a host would for another call.
window.sendRecord = async () =>
  post({jsonrpc: "2.0", method: "ui/notifications/tool-result", params: await (await fetch("/record.json")).json()});
window.addEventListener("message", async (ev) => {
  if (ev.source !== frame.contentWindow) return;
  const m = ev.data;
  window.hostLog.push(m.method || ("response " + m.id));
  switch (m.method) {
  case "ui/initialize":
    window.appInit = m.params;
    post({jsonrpc: "2.0", id: m.id, result: {protocolVersion: "2026-01-26", hostInfo: {name: "test-host", version: "1"},
      hostCapabilities: {serverResources: {}}, hostContext: {theme: "dark", displayMode: "inline"}}});
    break;
  case "ui/notifications/initialized":
    post({jsonrpc: "2.0", method: "ui/notifications/tool-input", params: {arguments: {language: "python", code: "plot()"}}});
    post({jsonrpc: "2.0", method: "ui/notifications/tool-result", params: await result});
    post({jsonrpc: "2.0", id: "ping-1", method: "ping", params: {}});
    break;
  case "resources/read":
    const r = await fetch("/read", {method: "POST", body: JSON.stringify(m.params)});
    post({jsonrpc: "2.0", id: m.id, result: await r.json()});
    break;
  case "ui/notifications/size-changed":
    window.sizes++;
    break;
  case undefined:
    if (m.id === "ping-1") window.pong = m.result;
  }
});
</script>
</body></html>`

// appFacts is what the test reads of the app's page once it has drawn.
type appFacts struct {
	Status, Exit, Duration, Language, RunID string
	Stdout, Stderr, StderrNote              string
	StdoutCtl, StderrCtl                    []string
	Scripts, Elements                       int
	Images                                  []struct {
		Width int
		Src   string
	}
	Table [][]string
	Files []string
	Theme string
}

// appFactsJS reads appFacts in the app's frame, once the image has loaded
// and the table has come (null, polled again, until then).
const appFactsJS = `(() => {
  const img = document.querySelector("#images img");
  if (!img || !img.complete || !document.querySelector("#table td")) return null;
  const text = id => document.getElementById(id).textContent;
  const all = sel => Array.from(document.querySelectorAll(sel));
  return {
    Status: text("status"), Exit: text("exit"), Duration: text("duration"), Language: text("language"), RunID: text("run-id"),
    Stdout: text("stdout"), Stderr: text("stderr"), StderrNote: text("stderr-note"),
    StdoutCtl: all("#stdout .ctl").map(e => e.textContent), StderrCtl: all("#stderr .ctl").map(e => e.textContent),
    Scripts: document.scripts.length,
    Elements: all("#stdout *, #stderr *, #table td *, #files li span span").filter(e => e.className !== "ctl").length,
    Images: all("#images img").map(i => ({Width: i.naturalWidth, Src: i.src.slice(0, 22)})),
    Table: all("#table tr").map(tr => Array.from(tr.children).map(c => c.textContent)),
    Files: all("#files li").map(li => li.textContent),
    Theme: document.documentElement.getAttribute("data-theme") || "",
  };
})()`

// hostFacts is what the host page heard from the app.
type hostFacts struct {
	Log   []string
	Sizes int
	Pong  map[string]any
	Init  struct {
		ProtocolVersion string         `json:"protocolVersion"`
		AppInfo         map[string]any `json:"appInfo"`
		AppCapabilities map[string]any `json:"appCapabilities"`
	}
}

// The run app in a real browser, framed by a stand-in host on another
// origin and fed a real run_code result over the specification's
// postMessage protocol: what the program printed (a script tag, an ANSI
// escape, a bidi override) shows as text with the control characters
// visible, no dialog opens, the image the run wrote loads from its data:
// URI, the CSV it wrote is previewed as a table read through the host,
// output past the app's bound is cut with a note, and no page logs an
// error or asks another origin for anything.
func TestRunAppBrowser(t *testing.T) {
	bin := testbrowser.Path(t)

	ws, err := workspace.Open(filepath.Join(t.TempDir(), "ws"), workspace.Options{MaxReadBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	const (
		stdout  = "<script>alert(1)</script>\x1b[31m"
		longLen = 150_000
	)
	stderr := "\u202eexe.txt\n" + strings.Repeat("e", longLen)
	f := newFixture(t, func(c *Config) {
		c.Runner = &printingRunner{
			writingRunner: writingRunner{ws: ws, files: map[string]map[string][]byte{"plot()": {
				"plot.png": pngOf(t, 24, 16),
				"data.csv": []byte("name,value\n<b>x</b>,1\n\"a,\"\"b\"\"\",2\n"),
			}}},
			stdout: stdout, stderr: stderr,
		}
		c.Workspace, c.Files = ws, ws
	})
	res := f.call(t, "run_code", map[string]any{"language": "python", "code": "plot()"}, nil)
	if res.IsError {
		t.Fatal(text(res))
	}
	result, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	res = f.call(t, "get_run", map[string]any{"id": "run-1"}, nil)
	if res.IsError {
		t.Fatal(text(res))
	}
	record, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	req := mcpgo.ReadResourceRequest{}
	req.Params.URI = runAppURI
	read, err := f.c.ReadResource(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	appHTML := read.Contents[0].(mcpgo.TextResourceContents).Text

	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/app" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(appHTML))
	}))
	t.Cleanup(app.Close)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(strings.Replace(appHostPage, "APP_URL", app.URL+"/app", 1)))
	})
	mux.HandleFunc("GET /result.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(result)
	})
	mux.HandleFunc("GET /record.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(record)
	})
	mux.HandleFunc("POST /read", func(w http.ResponseWriter, r *http.Request) {
		var p struct{ URI string }
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req := mcpgo.ReadResourceRequest{}
		req.Params.URI = p.URI
		out, err := f.c.ReadResource(r.Context(), req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	host := httptest.NewServer(mux)
	t.Cleanup(host.Close)

	// A sandboxed frame stays in the page's process (Chromium gives it a
	// process of its own by default), so that the test can read its page
	// and hear its console: the sandbox itself is unchanged.
	tb := testbrowser.Open(t, bin, testbrowser.Options{Origins: []string{host.URL, app.URL}, Width: 1000, Height: 800,
		Flags: map[string]any{"disable-features": "Translate,BlinkGenPropertyTrees,IsolateSandboxedIframes"}})
	testbrowser.Run(t, tb, "open the host page", chromedp.Navigate(host.URL+"/"))
	frames := testbrowser.Run(t, tb, "find the app's frame", chromedp.Nodes(chromedp.CSS("#app")))
	// Navigate waits for the load event, which waits for the frame's.
	got := testbrowser.Run(t, tb, "read the app", chromedp.Poll[appFacts](appFactsJS, chromedp.WithPollingInFrame(frames[0]),
		chromedp.WithPollingTimeout(testenv.Patience)))
	heard := testbrowser.Run(t, tb, "read the host", chromedp.Poll[hostFacts](
		`window.pong && {Log: window.hostLog, Sizes: window.sizes, Pong: window.pong, Init: window.appInit}`,
		chromedp.WithPollingTimeout(testenv.Patience)))

	tb.Screenshot(t, "run-app")

	if got.Status != "success" || got.Exit != "exit code 0" || got.Duration != "1.23 s" || got.Language != "python" || got.RunID != "run-1" {
		t.Errorf("header: status %q, %q, %q, %q, %q", got.Status, got.Exit, got.Duration, got.Language, got.RunID)
	}
	if want := `<script>alert(1)</script>\x1b[31m`; got.Stdout != want {
		t.Errorf("stdout shows %q, want %q", got.Stdout, want)
	}
	if !slices.Equal(got.StdoutCtl, []string{`\x1b`}) {
		t.Errorf("stdout's marked control characters %q, want [\\x1b]", got.StdoutCtl)
	}
	if len(got.StderrCtl) != 1 || got.StderrCtl[0] != `\u202e` || !strings.HasPrefix(got.Stderr, `\u202eexe.txt`) {
		t.Errorf("stderr starts %q, marked %q: want the bidi override shown as \\u202e", got.Stderr[:min(len(got.Stderr), 30)], got.StderrCtl)
	}
	// 100,000 characters of stderr shown, the escape standing for one.
	if n := len(got.Stderr) - len(`\u202e`) + 1; n != 100_000 || !strings.Contains(got.StderrNote, "more not shown") {
		t.Errorf("stderr: %d characters shown, note %q; want 100,000 and a note", n, got.StderrNote)
	}
	if got.Scripts != 1 || got.Elements != 0 {
		t.Errorf("the page has %d scripts and %d elements made of output, want 1 (its own) and 0", got.Scripts, got.Elements)
	}
	if len(got.Images) != 1 || got.Images[0].Width != 24 || got.Images[0].Src != "data:image/png;base64," {
		t.Errorf("images %+v, want one 24 px wide PNG from a data: URI", got.Images)
	}
	if want := [][]string{{"name", "value"}, {"<b>x</b>", "1"}, {`a,"b"`, "2"}}; !slices.EqualFunc(got.Table, want, slices.Equal) {
		t.Errorf("table %q, want %q", got.Table, want)
	}
	if !slices.Equal(got.Files, []string{"createddata.csv", "createdplot.png"}) {
		t.Errorf("files %q", got.Files)
	}
	if got.Theme != "dark" {
		t.Errorf("theme %q: the host context's theme was not applied", got.Theme)
	}

	if len(heard.Log) < 2 || heard.Log[0] != "ui/initialize" || heard.Log[1] != "ui/notifications/initialized" {
		t.Errorf("the host heard %q, want ui/initialize then ui/notifications/initialized first", heard.Log)
	}
	for _, want := range []string{"resources/read", "response ping-1"} {
		if !slices.Contains(heard.Log, want) {
			t.Errorf("the host heard %q, not %s", heard.Log, want)
		}
	}
	if heard.Init.ProtocolVersion != "2026-01-26" || heard.Init.AppInfo["name"] == nil || heard.Init.AppCapabilities == nil {
		t.Errorf("ui/initialize params %+v", heard.Init)
	}
	if heard.Sizes == 0 {
		t.Error("the app sent no ui/notifications/size-changed")
	}

	// A second result (get_run's record, whose output is heads) replaces
	// the first: its heads shown as such, the first one's image and table
	// gone.
	testbrowser.Run(t, tb, "send get_run's result", chromedp.Evaluate[bool](`window.sendRecord().then(() => true)`, chromedp.EvalAwaitPromise))
	type recordFacts struct {
		Stdout, StderrNote string
		Images             int
		Table              bool
	}
	rec := testbrowser.Run(t, tb, "read the app again", chromedp.Poll[recordFacts](`document.getElementById("stderr-note").textContent && {
	  Stdout: document.getElementById("stdout").textContent, StderrNote: document.getElementById("stderr-note").textContent,
	  Images: document.querySelectorAll("#images img").length, Table: !document.getElementById("table-section").hidden}`,
		chromedp.WithPollingInFrame(frames[0]), chromedp.WithPollingTimeout(testenv.Patience)))
	if rec.Stdout != `<script>alert(1)</script>\x1b[31m` || rec.StderrNote != "the first 1,024 of 150,011 bytes" || rec.Images != 0 || rec.Table {
		t.Errorf("get_run's result shows %+v", rec)
	}

	// Opened on its own, not in a host, it says so and sends nothing.
	testbrowser.Run(t, tb, "open the app alone", chromedp.Navigate(app.URL+"/app"))
	if s := testbrowser.Run(t, tb, "read its status", chromedp.Poll[string](`document.getElementById("status").textContent`)); s != "no host" {
		t.Errorf("alone, the app says %q", s)
	}
	tb.Check(t)
}
