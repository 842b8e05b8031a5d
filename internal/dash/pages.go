package dash

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/packages"
	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/store/history"
	"github.com/sandpit-dev/sandpit/store/snapshot"
)

type snapshotT = snapshot.Snapshot

// Page bounds.
const (
	runsPerPage     = 50
	previewBytes    = 256 << 10 // a file's preview
	csvRows         = 200
	csvCols         = 50
	listEntries     = 1000 // a directory's entries shown
	cancelWait      = 10 * time.Second
	maxDownloadRead = 1 << 20 // one read of a download
)

// Run statuses and languages the history filter offers.
var (
	statusNames = []string{"success", "error", "timeout", "oom", "compile_error", "cancelled", "session_lost"}
	sinceNames  = []struct{ Value, Label string }{{"", "any time"}, {"1h", "last hour"}, {"24h", "last 24 hours"}, {"168h", "last 7 days"}}
)

// --- Live ---

type liveData struct {
	Runs        []mcp.LiveRun
	Sessions    []sandpit.SessionInfo
	HasRuns     bool // the server tracks runs in flight
	HasSessions bool
}

func (d *Dash) live(v *viewer) liveData {
	var ld liveData
	if v.t.Runs != nil {
		ld.HasRuns = true
		ld.Runs = v.t.Runs.Live()
	}
	if v.t.Sessions != nil {
		ld.HasSessions = true
		ld.Sessions = v.t.Sessions()
		slices.SortFunc(ld.Sessions, func(a, b sandpit.SessionInfo) int { return strings.Compare(a.Name, b.Name) })
	}
	return ld
}

func (d *Dash) livePage(w http.ResponseWriter, r *http.Request, v *viewer) {
	d.render(w, r, http.StatusOK, "live", v, d.live(v))
}

// liveFragment is the live section alone, which the page's script fetches
// to refresh it.
func (d *Dash) liveFragment(w http.ResponseWriter, r *http.Request, v *viewer) {
	d.renderFragment(w, "live", "livesection", v, d.live(v))
}

// --- History ---

type runsData struct {
	Runs                          []history.Run
	Status, Language, Text, Since string
	Statuses                      []string
	Languages                     []string
	Sinces                        []struct{ Value, Label string }
	Next                          template.URL // the query of the next (older) page
	First                         bool
	FilterQuery                   template.URL // each value query-escaped here
	Tenants                       []string     // for an operator: whose history to read
	Viewing                       string
}

func (d *Dash) runsPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	if v.t.History == nil {
		d.errorPage(w, r, v, http.StatusNotFound, "This server keeps no history.")
		return
	}
	q := r.URL.Query()
	rd := runsData{
		Status: q.Get("status"), Language: q.Get("language"), Text: strings.TrimSpace(q.Get("q")), Since: q.Get("since"),
		Statuses: statusNames, Languages: []string{"python", "bash", "javascript", "c", "cpp"}, Sinces: sinceNames,
	}
	f := history.Filter{Limit: runsPerPage + 1, Status: rd.Status, Language: rd.Language, Text: rd.Text, BeforeID: q.Get("before")}
	if rd.Status != "" && !slices.Contains(statusNames, rd.Status) {
		d.errorPage(w, r, v, http.StatusBadRequest, "Unknown status "+strconv.Quote(rd.Status)+": choose one from the list.")
		return
	}
	if len(rd.Text) > 1000 {
		d.errorPage(w, r, v, http.StatusBadRequest, "The search text is too long (1000 bytes at most).")
		return
	}
	if rd.Since != "" {
		dur, err := time.ParseDuration(rd.Since)
		if err != nil || dur <= 0 {
			d.errorPage(w, r, v, http.StatusBadRequest, "Unknown time range "+strconv.Quote(rd.Since)+".")
			return
		}
		f.After = d.cfg.Now().Add(-dur)
	}
	runs, err := v.t.History.List(r.Context(), f)
	if err != nil {
		if errors.Is(err, sandpit.ErrNotFound) {
			d.errorPage(w, r, v, http.StatusNotFound, "The page cursor names no run (it may have been pruned): start from the newest.")
			return
		}
		d.errorPage(w, r, v, statusOf(err), "Reading the history failed: "+err.Error())
		return
	}
	if v.operator {
		rd.Tenants, rd.Viewing = d.tenantNames(r.Context()), v.other
	}
	filter := make([]string, 0, 5)
	for _, kv := range [][2]string{{"tenant", v.other}, {"status", rd.Status}, {"language", rd.Language}, {"q", rd.Text}, {"since", rd.Since}} {
		if kv[1] != "" {
			filter = append(filter, kv[0]+"="+urlQueryEscape(kv[1]))
		}
	}
	rd.FilterQuery = template.URL(strings.Join(filter, "&"))
	if len(runs) > runsPerPage {
		runs = runs[:runsPerPage]
		rd.Next = template.URL(strings.Join(append(filter, "before="+urlQueryEscape(runs[len(runs)-1].ID)), "&"))
	}
	rd.Runs, rd.First = runs, q.Get("before") == ""
	d.render(w, r, http.StatusOK, "runs", v, rd)
}

// --- One run ---

type runData struct {
	Run         history.Run
	Live        *mcp.LiveRun
	Files       *sandpit.Changes
	Images      []string
	Limits      map[string]any
	StdoutShown int64
	StderrShown int64
	StdoutCut   bool // what the page shows is less than the run printed
	StderrCut   bool
	Cancelled   bool
	CanRerun    bool
	Diffs       bool // the files changed link to diffs
}

var imageExts = []string{".png", ".jpg", ".jpeg", ".gif", ".webp"}

func (d *Dash) runPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	id := r.PathValue("id")
	if l := d.liveRun(v, id); l != nil {
		d.render(w, r, http.StatusOK, "run", v, runData{Live: l})
		return
	}
	run, ok := d.getRun(w, r, v)
	if !ok {
		return
	}
	rd := runData{Run: run, Cancelled: r.URL.Query().Get("cancelled") != "", CanRerun: v.t.Rerun != nil && (run.Code != "" || run.Path != ""), Diffs: diffable(v.t)}
	if len(run.Files) > 0 {
		var c sandpit.Changes
		if json.Unmarshal(run.Files, &c) == nil {
			rd.Files = &c
			for _, p := range slices.Concat(c.Created, c.Modified) {
				if slices.Contains(imageExts, strings.ToLower(path.Ext(p))) && len(rd.Images) < 20 {
					rd.Images = append(rd.Images, p)
				}
			}
		}
	}
	if len(run.Limits) > 0 {
		json.Unmarshal(run.Limits, &rd.Limits)
	}
	rd.StdoutShown, rd.StderrShown = int64(len(run.Stdout)), int64(len(run.Stderr))
	rd.StdoutCut = rd.StdoutShown < run.StdoutBytes || run.StdoutTruncated
	rd.StderrCut = rd.StderrShown < run.StderrBytes || run.StderrTruncated
	d.render(w, r, http.StatusOK, "run", v, rd)
}

func (d *Dash) liveRun(v *viewer, id string) *mcp.LiveRun {
	if v.t.Runs == nil {
		return nil
	}
	for _, l := range v.t.Runs.Live() {
		if l.ID == id {
			return &l
		}
	}
	return nil
}

// runOutput downloads what the history kept of a run's stdout or stderr.
func (d *Dash) runOutput(w http.ResponseWriter, r *http.Request, v *viewer) {
	stream := r.PathValue("stream")
	if stream != "stdout" && stream != "stderr" {
		d.notFound(w, r, v, "such page")
		return
	}
	run, ok := d.getRun(w, r, v)
	if !ok {
		return
	}
	out := run.Stdout
	if stream == "stderr" {
		out = run.Stderr
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="run-%s-%s.txt"`, safeFileName(run.ID), stream))
	io.WriteString(w, out)
}

func (d *Dash) cancelConfirm(w http.ResponseWriter, r *http.Request, v *viewer) {
	l := d.liveRun(v, r.PathValue("id"))
	if l == nil {
		d.notFound(w, r, v, "run in flight with that id (it may have ended)")
		return
	}
	d.render(w, r, http.StatusOK, "confirm", v, map[string]any{
		"Question": "Cancel run " + l.ID + "?",
		"Detail":   "Its sandbox is stopped now; it is recorded as cancelled by a person, with its output so far, and its workspace changes are kept.",
		"Action":   "/runs/" + l.ID + "/cancel",
		"Button":   "Cancel the run",
		"Back":     "/runs/" + l.ID,
	})
}

func (d *Dash) cancel(w http.ResponseWriter, r *http.Request, v *viewer) {
	id := r.PathValue("id")
	if v.t.Runs == nil {
		d.notFound(w, r, v, "run in flight with that id")
		return
	}
	found, _, err := v.t.Runs.CancelByPerson(r.Context(), id, cancelWait)
	switch {
	case err != nil:
		d.errorPage(w, r, v, statusOf(err), "Cancelling failed: "+err.Error())
	case !found:
		d.notFound(w, r, v, "run in flight with that id (it may have ended)")
	default:
		d.log.Info("dashboard: run cancelled by a person", "tenant", v.p.Tenant, "run", id)
		http.Redirect(w, r, "/runs/"+urlPathEscape(id)+"?cancelled=1", http.StatusSeeOther)
	}
}

// getRun reads the recorded run the path's {id} names; one not recorded
// (or of another tenant) is "not found", as is every run where the
// server keeps no history.
func (d *Dash) getRun(w http.ResponseWriter, r *http.Request, v *viewer) (history.Run, bool) {
	if v.t.History == nil {
		d.notFound(w, r, v, "run with that id")
		return history.Run{}, false
	}
	run, err := v.t.History.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		if errors.Is(err, sandpit.ErrNotFound) {
			d.notFound(w, r, v, "run with that id")
		} else {
			d.errorPage(w, r, v, statusOf(err), "Reading the run failed: "+err.Error())
		}
		return history.Run{}, false
	}
	return run, true
}

// recorded is getRun for a run to start again.
func (d *Dash) recorded(w http.ResponseWriter, r *http.Request, v *viewer) (history.Run, bool) {
	if v.t.Rerun == nil {
		d.notFound(w, r, v, "run with that id")
		return history.Run{}, false
	}
	return d.getRun(w, r, v)
}

func (d *Dash) rerunConfirm(w http.ResponseWriter, r *http.Request, v *viewer) {
	run, ok := d.recorded(w, r, v)
	if !ok {
		return
	}
	what := "its code"
	if run.Path != "" {
		what = "the workspace file " + run.Path + " as it is now"
	}
	d.render(w, r, http.StatusOK, "confirm", v, map[string]any{
		"Question": "Run " + run.ID + " again?",
		"Detail":   "It runs " + what + " in a fresh sandbox, in the background, with the workspace as it is now; it may change files there. It is a new run in the history.",
		"Action":   "/runs/" + run.ID + "/rerun",
		"Button":   "Run it again",
		"Back":     "/runs/" + run.ID,
	})
}

func (d *Dash) rerun(w http.ResponseWriter, r *http.Request, v *viewer) {
	run, ok := d.recorded(w, r, v)
	if !ok {
		return
	}
	id, err := v.t.Rerun(r.Context(), run)
	if err != nil {
		d.errorPage(w, r, v, statusOf(err), "It could not run again: "+err.Error())
		return
	}
	d.log.Info("dashboard: run started again by a person", "tenant", v.p.Tenant, "run", run.ID, "new_run", id)
	http.Redirect(w, r, "/runs/"+urlPathEscape(id), http.StatusSeeOther)
}

// --- Workspace ---

type wsData struct {
	Path    string
	Crumbs  []crumb
	Entries []wsEntry
	More    bool
	// At the workspace's root: its package layer, as sandpit.lock says.
	Root        bool
	Packages    []packages.Package
	PackagesErr string
}

type crumb struct{ Name, Path string }

type wsEntry struct {
	Name, Path, Type string
	Size             int64
	ModTime          time.Time
}

func crumbs(p string) []crumb {
	out := []crumb{{"workspace", ""}}
	if p == "" {
		return out
	}
	parts := strings.Split(p, "/")
	for i, n := range parts {
		out = append(out, crumb{n, strings.Join(parts[:i+1], "/")})
	}
	return out
}

// cleanPath is a workspace path from a query: relative, without ./ or
// trailing slashes; the workspace itself refuses what leaves it.
func cleanPath(p string) string {
	p = strings.Trim(p, "/")
	if p == "" || p == "." {
		return ""
	}
	return path.Clean(p)
}

func (d *Dash) workspacePage(w http.ResponseWriter, r *http.Request, v *viewer) {
	if v.t.Files == nil {
		d.errorPage(w, r, v, http.StatusNotFound, "This server has no workspace.")
		return
	}
	p := cleanPath(r.URL.Query().Get("path"))
	l, err := v.t.Files.List(r.Context(), p, false)
	if err != nil {
		d.fileError(w, r, v, p, err)
		return
	}
	wd := wsData{Path: p, Crumbs: crumbs(p), More: l.Truncated}
	for _, e := range l.Entries {
		rel := strings.TrimPrefix(e.Path, "/")
		if rel == p && e.Type != "dir" {
			// p is a file: show it instead.
			http.Redirect(w, r, "/workspace/view?path="+urlQueryEscape(p), http.StatusSeeOther)
			return
		}
		if len(wd.Entries) >= listEntries {
			wd.More = true
			break
		}
		wd.Entries = append(wd.Entries, wsEntry{Name: path.Base(rel), Path: rel, Type: e.Type, Size: e.Size, ModTime: e.ModTime})
	}
	slices.SortFunc(wd.Entries, func(a, b wsEntry) int {
		if (a.Type == "dir") != (b.Type == "dir") {
			if a.Type == "dir" {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	if p == "" {
		wd.Root = true
		wd.Packages, wd.PackagesErr = workspacePackages(r.Context(), v.t.Files)
	}
	d.render(w, r, http.StatusOK, "workspace", v, wd)
}

// workspacePackages reads the workspace's package layer from its lock:
// what agents installed is what a person most wants to see of a supply.
func workspacePackages(ctx context.Context, f Files) ([]packages.Package, string) {
	c, err := f.Read(ctx, packages.LockFile, 0, packages.MaxLockBytes)
	if errors.Is(err, sandpit.ErrNotFound) {
		return nil, ""
	}
	if err != nil {
		return nil, err.Error()
	}
	if !c.EOF {
		return nil, packages.LockFile + " is over the size a lock may have"
	}
	l, err := packages.ParseLockOrEmpty(c.Data)
	if err != nil {
		return nil, err.Error()
	}
	return l.Packages(), ""
}

func (d *Dash) fileError(w http.ResponseWriter, r *http.Request, v *viewer, p string, err error) {
	if errors.Is(err, sandpit.ErrNotFound) {
		d.notFound(w, r, v, "file or directory "+strconv.Quote(p)+" in the workspace")
		return
	}
	d.errorPage(w, r, v, statusOf(err), err.Error())
}

type fileData struct {
	Path   string
	Crumbs []crumb
	Size   int64
	Kind   string // text, image, csv, binary
	Text   string
	Rows   [][]string
	Cut    bool // the preview shows less than the file
}

func (d *Dash) filePage(w http.ResponseWriter, r *http.Request, v *viewer) {
	if v.t.Files == nil {
		d.errorPage(w, r, v, http.StatusNotFound, "This server has no workspace.")
		return
	}
	p := cleanPath(r.URL.Query().Get("path"))
	c, err := v.t.Files.Read(r.Context(), p, 0, previewBytes)
	if err != nil {
		if errors.Is(err, sandpit.ErrInvalidArgument) && strings.Contains(err.Error(), "is a directory") {
			http.Redirect(w, r, "/workspace?path="+urlQueryEscape(p), http.StatusSeeOther)
			return
		}
		d.fileError(w, r, v, p, err)
		return
	}
	fd := fileData{Path: p, Crumbs: crumbs(p), Size: c.Size, Cut: !c.EOF}
	ct := http.DetectContentType(c.Data)
	switch {
	case isImage(ct):
		fd.Kind = "image"
	case strings.EqualFold(path.Ext(p), ".csv") && utf8.Valid(c.Data):
		fd.Kind = "csv"
		fd.Rows, fd.Cut = csvPreview(c.Data, !c.EOF)
		if fd.Rows == nil {
			fd.Kind, fd.Text = "text", string(c.Data)
		}
	case utf8.Valid(c.Data) || (!c.EOF && utf8.Valid(trimPartialRune(c.Data))):
		fd.Kind, fd.Text = "text", string(c.Data)
	default:
		fd.Kind = "binary"
	}
	d.render(w, r, http.StatusOK, "file", v, fd)
}

func isImage(ct string) bool {
	switch ct {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return true
	}
	return false
}

func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size != 1 {
			break
		}
		b = b[:len(b)-1]
	}
	return b
}

// csvPreview parses the first csvRows rows (csvCols columns) of data; nil
// when it is not CSV.
func csvPreview(data []byte, partial bool) ([][]string, bool) {
	if partial {
		// The last line may be cut: drop it.
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			data = data[:i+1]
		}
	}
	cr := csv.NewReader(bytes.NewReader(data))
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	var rows [][]string
	cut := partial
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false
		}
		if len(rows) == csvRows {
			cut = true
			break
		}
		if len(rec) > csvCols {
			rec, cut = rec[:csvCols], true
		}
		rows = append(rows, rec)
	}
	return rows, cut
}

// fileRaw sends a workspace file: images inline, everything else as a
// download, never as a page of this origin (an HTML or SVG file a program
// wrote must not run as the dashboard).
func (d *Dash) fileRaw(w http.ResponseWriter, r *http.Request, v *viewer) {
	if v.t.Files == nil {
		d.errorPage(w, r, v, http.StatusNotFound, "This server has no workspace.")
		return
	}
	p := cleanPath(r.URL.Query().Get("path"))
	c, err := v.t.Files.Read(r.Context(), p, 0, maxDownloadRead)
	if err != nil {
		d.fileError(w, r, v, p, err)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	ct := http.DetectContentType(c.Data)
	if isImage(ct) && r.URL.Query().Get("download") == "" {
		h.Set("Content-Type", ct)
	} else {
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, safeFileName(path.Base(p))))
	}
	h.Set("Content-Length", strconv.FormatInt(c.Size, 10))
	if _, err := w.Write(c.Data); err != nil {
		return
	}
	// The rest in bounded reads; a file that changes meanwhile ends the
	// download short (the length said is then not met: the client sees a
	// failed download, not a wrong file).
	for off := int64(len(c.Data)); !c.EOF && off < c.Size; {
		c, err = v.t.Files.Read(r.Context(), p, off, maxDownloadRead)
		if err != nil || len(c.Data) == 0 {
			return
		}
		if _, err := w.Write(c.Data); err != nil {
			return
		}
		off += int64(len(c.Data))
	}
}

// safeFileName keeps a name fit for a Content-Disposition header.
func safeFileName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '"' || r == '\\' || r == '/' || r >= 0x80 {
			return '_'
		}
		return r
	}, s)
	if s == "" || s == "." || s == ".." {
		return "download"
	}
	return s
}

// --- Snapshots ---

func (d *Dash) snapshotsPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	if v.t.Snapshots == nil {
		d.errorPage(w, r, v, http.StatusNotFound, "This server keeps no snapshots.")
		return
	}
	list, err := v.t.Snapshots.List(r.Context())
	if err != nil {
		d.errorPage(w, r, v, statusOf(err), "Listing snapshots failed: "+err.Error())
		return
	}
	slices.SortFunc(list, func(a, b snapshotT) int { return b.Created.Compare(a.Created) })
	d.render(w, r, http.StatusOK, "snapshots", v, map[string]any{"Snapshots": list, "Restored": r.URL.Query().Get("restored")})
}

func (d *Dash) snapshotPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	s, ok := d.findSnapshot(w, r, v)
	if !ok {
		return
	}
	diff, err := v.t.Snapshots.Diff(r.Context(), s.ID)
	if err != nil {
		d.errorPage(w, r, v, statusOf(err), "Comparing failed: "+err.Error())
		return
	}
	d.render(w, r, http.StatusOK, "snapshot", v, map[string]any{"Snapshot": s, "Diff": diff})
}

func (d *Dash) findSnapshot(w http.ResponseWriter, r *http.Request, v *viewer) (snapshotT, bool) {
	if v.t.Snapshots == nil {
		d.notFound(w, r, v, "snapshot with that id")
		return snapshotT{}, false
	}
	list, err := v.t.Snapshots.List(r.Context())
	if err != nil {
		d.errorPage(w, r, v, statusOf(err), "Listing snapshots failed: "+err.Error())
		return snapshotT{}, false
	}
	id := r.PathValue("id")
	for _, s := range list {
		if s.ID == id {
			return s, true
		}
	}
	d.notFound(w, r, v, "snapshot with that id")
	return snapshotT{}, false
}

func (d *Dash) restoreConfirm(w http.ResponseWriter, r *http.Request, v *viewer) {
	s, ok := d.findSnapshot(w, r, v)
	if !ok {
		return
	}
	d.render(w, r, http.StatusOK, "confirm", v, map[string]any{
		"Question": "Restore the workspace to snapshot " + s.ID + "?",
		"Detail":   fmt.Sprintf("The workspace becomes exactly what it was at %s (%q): files made since are deleted, changed files rewritten. Take a snapshot first if you may want today's state back.", s.Created.UTC().Format("2006-01-02 15:04:05 UTC"), s.Description),
		"Action":   "/snapshots/" + s.ID + "/restore",
		"Button":   "Restore",
		"Back":     "/snapshots",
	})
}

func (d *Dash) restore(w http.ResponseWriter, r *http.Request, v *viewer) {
	s, ok := d.findSnapshot(w, r, v)
	if !ok {
		return
	}
	if err := v.t.Snapshots.Restore(r.Context(), s.ID); err != nil {
		d.errorPage(w, r, v, statusOf(err), "Restoring failed: "+err.Error())
		return
	}
	d.log.Info("dashboard: workspace restored by a person", "tenant", v.p.Tenant, "snapshot", s.ID)
	http.Redirect(w, r, "/snapshots?restored="+urlQueryEscape(s.ID), http.StatusSeeOther)
}

func urlPathEscape(s string) string { return strings.ReplaceAll(urlQueryEscape(s), "+", "%20") }
