package dash

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/aymanbagabas/go-udiff"

	"github.com/sandpit-dev/sandpit/store/snapshot"
)

// RunFiles is what a Snapshots may also do: give a file before and after
// a run (the snapshot store's undo states).
type RunFiles interface {
	RunFile(ctx context.Context, runID, path string, limit int64) (snapshot.RunFile, error)
}

// diffBytes bounds each side of a diff; diffLines bounds the lines shown.
const (
	diffBytes = 256 << 10
	diffLines = 5000
)

type diffLine struct {
	Kind string // add, del, hunk, ctx
	Text string
}

// runDiff shows what run id changed in one file: a unified diff of text,
// sizes of anything else.
func (d *Dash) runDiff(w http.ResponseWriter, r *http.Request, v *viewer) {
	id, p := r.PathValue("id"), cleanPath(r.URL.Query().Get("path"))
	rf, ok := v.t.Snapshots.(RunFiles)
	if !ok {
		d.notFound(w, r, v, "such page")
		return
	}
	if _, ok := d.getRun(w, r, v); !ok {
		return
	}
	f, err := rf.RunFile(r.Context(), id, p, diffBytes)
	if err != nil {
		if errors.Is(err, snapshot.ErrRunStateGone) {
			d.errorPage(w, r, v, http.StatusNotFound, "The workspace's state before this run is no longer kept (only the newest runs' are), so its changes to "+p+" cannot be shown.")
			return
		}
		d.errorPage(w, r, v, statusOf(err), "Reading the file failed: "+err.Error())
		return
	}
	data := map[string]any{"Run": id, "Path": p, "Before": f.Before, "After": f.After, "AfterIsNow": f.AfterIsNow}
	text := func(v snapshot.Version) bool { return !v.Existed || (!v.Dir && utf8.Valid(v.Data)) }
	switch {
	case f.Before.Dir || f.After.Dir:
		data["Kind"] = "dir"
	case !text(f.Before) || !text(f.After):
		data["Kind"] = "binary"
	case string(f.Before.Data) == string(f.After.Data) && f.Before.Existed == f.After.Existed && f.Before.Size == f.After.Size:
		data["Kind"] = "same"
	default:
		data["Kind"] = "text"
		u := udiff.Unified("before/"+p, "after/"+p, string(f.Before.Data), string(f.After.Data))
		lines := strings.Split(strings.TrimSuffix(u, "\n"), "\n")
		cut := len(lines) > diffLines
		lines = lines[:min(len(lines), diffLines)]
		out := make([]diffLine, 0, len(lines))
		for _, l := range lines {
			k := "ctx"
			switch {
			case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
				k = "file"
			case strings.HasPrefix(l, "@@"):
				k = "hunk"
			case strings.HasPrefix(l, "+"):
				k = "add"
			case strings.HasPrefix(l, "-"):
				k = "del"
			}
			out = append(out, diffLine{k, l})
		}
		data["Lines"], data["LinesCut"] = out, cut
		data["Partial"] = int64(len(f.Before.Data)) < f.Before.Size || int64(len(f.After.Data)) < f.After.Size
	}
	d.render(w, r, http.StatusOK, "diff", v, data)
}

// diffable reports whether the run page offers a diff of the run's files.
func diffable(t *Tenant) bool {
	_, ok := t.Snapshots.(RunFiles)
	return ok
}
