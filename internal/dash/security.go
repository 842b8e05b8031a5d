package dash

import (
	"net/http"
	"slices"
	"strings"

	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/store/history"
)

// maxEventsShown bounds the events a page lists.
const maxEventsShown = 200

type kindCount struct {
	Kind string
	N    int64
}

func kindCounts(m map[string]int64) []kindCount {
	var out []kindCount
	for _, k := range mcp.EventKinds {
		if m[k] > 0 {
			out = append(out, kindCount{k, m[k]})
		}
	}
	return out
}

func firstEvents(e *mcp.Events) []mcp.Event {
	l := e.List()
	return l[:min(len(l), maxEventsShown)]
}

// securityPage shows what a tenant should know was refused or went wrong:
// its tool calls refused or failed, and its runs that met a limit
// (timeouts, out of memory, output past its bound).
func (d *Dash) securityPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	data := map[string]any{"Counts": kindCounts(v.t.Events.Counts()), "Events": firstEvents(v.t.Events), "HasEvents": v.t.Events != nil}
	if v.t.History != nil {
		runs, err := v.t.History.List(r.Context(), history.Filter{Limit: metricRuns})
		if err != nil {
			d.errorPage(w, r, v, statusOf(err), "Reading the history failed: "+err.Error())
			return
		}
		var limited []history.Run
		for _, run := range runs {
			if run.Status == "timeout" || run.Status == "oom" || run.OOMKilled || run.StdoutTruncated || run.StderrTruncated {
				limited = append(limited, run)
				if len(limited) == 50 {
					break
				}
			}
		}
		data["Limited"], data["Runs"] = limited, len(runs)
	}
	d.render(w, r, http.StatusOK, "security", v, data)
}

// operatorPage shows an operator every tenant and the server's refusals.
// To anyone else it does not exist.
func (d *Dash) operatorPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	if !v.operator || d.cfg.Summaries == nil {
		d.notFound(w, r, v, "such page")
		return
	}
	list, err := d.cfg.Summaries(r.Context())
	if err != nil {
		d.errorPage(w, r, v, statusOf(err), "Listing the tenants failed: "+err.Error())
		return
	}
	slices.SortFunc(list, func(a, b TenantSummary) int { return strings.Compare(a.Name, b.Name) })
	type row struct {
		TenantSummary
		Counts []kindCount
	}
	rows := make([]row, len(list))
	for i, t := range list {
		rows[i] = row{t, kindCounts(t.Refusals)}
	}
	d.render(w, r, http.StatusOK, "operator", v, map[string]any{
		"Tenants": rows, "Counts": kindCounts(d.cfg.ServerEvents.Counts()), "Events": firstEvents(d.cfg.ServerEvents),
	})
}
