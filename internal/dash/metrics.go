package dash

import (
	"context"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/sandpit-dev/sandpit/internal/chart"
	"github.com/sandpit-dev/sandpit/store/history"
)

// The metrics pages draw the newest runs (at most history.MaxLimit).
const metricRuns = history.MaxLimit

type chartDef struct {
	Name, Title, Alt string
}

var charts = []chartDef{
	{"runs-per-minute.svg", "Runs per minute, by status (last hour)", "Stacked bars: how many runs started each minute of the last hour, by how they ended."},
	{"latency.svg", "Run duration percentiles over time", "Lines: the 50th, 90th and 99th percentile of run duration, in milliseconds, over the newest runs."},
	{"cpu-memory.svg", "CPU time and peak memory per run", "Scatter: each of the newest runs by its CPU time and its peak memory."},
	{"pool.svg", "Warm pool: sandboxes ready and wanted (last hour)", "Lines: how many started sandboxes wait for a run, and how many the pool aims for, shared by every tenant."},
	{"pool-hits.svg", "Warm pool hit rate (last hour)", "Line: the share of runs that found a sandbox ready, per 10 seconds."},
	{"sessions-memory.svg", "Sessions' memory (last hour)", "Line: the memory this tenant's sessions hold, in MiB."},
}

// available are the charts this server and tenant can draw.
func (d *Dash) available(v *viewer) []chartDef {
	var out []chartDef
	for _, c := range charts {
		switch c.Name {
		case "pool.svg", "pool-hits.svg":
			if d.cfg.Pool == nil {
				continue
			}
		case "sessions-memory.svg":
			if v.t.SessionMemory == nil {
				continue
			}
		default:
			if v.t.History == nil {
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

// metricsPage shows the charts (as images served beside it: the CSP
// allows no inline SVG style).
func (d *Dash) metricsPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	if v.t.History == nil {
		d.errorPage(w, r, v, http.StatusNotFound, "This server keeps no history.")
		return
	}
	runs, err := d.recent(r.Context(), v)
	if err != nil {
		d.errorPage(w, r, v, statusOf(err), "Reading the history failed: "+err.Error())
		return
	}
	counts := map[string]int{}
	for _, run := range runs {
		counts[run.Status]++
	}
	type count struct {
		Status string
		N      int
	}
	var cs []count
	for _, s := range statusNames {
		if counts[s] > 0 {
			cs = append(cs, count{s, counts[s]})
		}
	}
	d.render(w, r, http.StatusOK, "metrics", v, map[string]any{
		"Charts": d.available(v), "Runs": len(runs), "Counts": cs,
	})
}

func (d *Dash) recent(ctx context.Context, v *viewer) ([]history.Run, error) {
	return v.t.History.List(ctx, history.Filter{Limit: metricRuns})
}

// metricsChart draws one chart as SVG.
func (d *Dash) metricsChart(w http.ResponseWriter, r *http.Request, v *viewer) {
	name := r.PathValue("chart")
	avail := d.available(v)
	i := slices.IndexFunc(avail, func(c chartDef) bool { return c.Name == name })
	if i < 0 {
		d.notFound(w, r, v, "such chart")
		return
	}
	now := d.cfg.Now()
	var svg []byte
	var runs []history.Run
	if name == "runs-per-minute.svg" || name == "latency.svg" || name == "cpu-memory.svg" {
		var err error
		if runs, err = d.recent(r.Context(), v); err != nil {
			d.errorPage(w, r, v, statusOf(err), "Reading the history failed: "+err.Error())
			return
		}
	}
	charts := avail
	switch name {
	case "pool.svg":
		svg = chart.Line(poolChart(d.cfg.Pool(), charts[i]))
	case "pool-hits.svg":
		svg = chart.Line(poolHits(d.cfg.Pool(), charts[i]))
	case "sessions-memory.svg":
		svg = chart.Line(sessionMemory(v.t.SessionMemory(), charts[i]))
	case "runs-per-minute.svg":
		svg = chart.StackedBars(runsPerMinute(runs, now, charts[i]))
	case "latency.svg":
		svg = chart.Line(latency(runs, charts[i]))
	case "cpu-memory.svg":
		svg = chart.Scatter(cpuMemory(runs, charts[i]))
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Write(svg)
}

// runsPerMinute counts the last hour's runs per minute and status.
func runsPerMinute(runs []history.Run, now time.Time, def chartDef) chart.Chart {
	end := now.Truncate(time.Minute)
	start := end.Add(-59 * time.Minute)
	idx := map[string]int{}
	var series []chart.Series
	for _, s := range statusNames {
		idx[s] = len(series)
		pts := make([]chart.Point, 60)
		for m := range pts {
			pts[m] = chart.Point{X: float64(start.Add(time.Duration(m) * time.Minute).Unix())}
		}
		series = append(series, chart.Series{Name: s, Points: pts})
	}
	for _, run := range runs {
		if run.Started.Before(start) {
			continue
		}
		m := int(run.Started.Sub(start) / time.Minute)
		j, ok := idx[run.Status]
		if !ok || m < 0 || m >= 60 {
			continue
		}
		series[j].Points[m].Y++
	}
	// Statuses no run had stay out of the legend.
	series = slices.DeleteFunc(series, func(s chart.Series) bool {
		return !slices.ContainsFunc(s.Points, func(p chart.Point) bool { return p.Y > 0 })
	})
	return chart.Chart{Title: def.Title, Desc: def.Alt, X: chart.Axis{Label: "Minute", Time: true}, Y: chart.Axis{Label: "Runs"}, Series: series}
}

// latency draws duration percentiles over up to 20 equal time buckets of
// the runs given.
func latency(runs []history.Run, def chartDef) chart.Chart {
	c := chart.Chart{Title: def.Title, Desc: def.Alt, X: chart.Axis{Label: "Time", Time: true}, Y: chart.Axis{Label: "Duration", Unit: "ms", Log: true}}
	if len(runs) == 0 {
		return c
	}
	lo, hi := runs[len(runs)-1].Started, runs[0].Started
	const buckets = 20
	width := hi.Sub(lo)/buckets + time.Second
	byBucket := make([][]float64, buckets)
	for _, run := range runs {
		b := min(int(run.Started.Sub(lo)/width), buckets-1)
		byBucket[b] = append(byBucket[b], float64(max(run.DurationMS, 1)))
	}
	names := []string{"p50", "p90", "p99"}
	qs := []float64{0.5, 0.9, 0.99}
	for k, q := range qs {
		s := chart.Series{Name: names[k]}
		for b, ds := range byBucket {
			x := float64(lo.Add(time.Duration(b)*width + width/2).Unix())
			if len(ds) == 0 {
				s.Points = append(s.Points, chart.Point{X: x, Y: math.NaN()})
				continue
			}
			slices.Sort(ds)
			s.Points = append(s.Points, chart.Point{X: x, Y: ds[min(len(ds)-1, int(q*float64(len(ds))))]})
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// cpuMemory places each run by CPU time and peak memory, one series per
// outcome: success, or anything else.
func cpuMemory(runs []history.Run, def chartDef) chart.Chart {
	ok := chart.Series{Name: "success"}
	bad := chart.Series{Name: "other outcomes"}
	for _, run := range runs {
		p := chart.Point{X: float64(run.CPUUserMS + run.CPUSystemMS), Y: float64(run.MemoryPeakBytes) / (1 << 20)}
		if run.Status == "success" {
			ok.Points = append(ok.Points, p)
		} else {
			bad.Points = append(bad.Points, p)
		}
	}
	return chart.Chart{Title: def.Title, Desc: def.Alt, X: chart.Axis{Label: "CPU time", Unit: "ms"}, Y: chart.Axis{Label: "Peak memory", Unit: "MiB"}, Series: []chart.Series{ok, bad}}
}

func poolChart(ps []PoolSample, def chartDef) chart.Chart {
	ready, target := chart.Series{Name: "ready"}, chart.Series{Name: "wanted"}
	for _, p := range ps {
		x := float64(p.Time.Unix())
		ready.Points = append(ready.Points, chart.Point{X: x, Y: float64(p.Ready)})
		target.Points = append(target.Points, chart.Point{X: x, Y: float64(p.Target)})
	}
	return chart.Chart{Title: def.Title, Desc: def.Alt, X: chart.Axis{Label: "Time", Time: true}, Y: chart.Axis{Label: "Sandboxes"}, Series: []chart.Series{ready, target}}
}

func poolHits(ps []PoolSample, def chartDef) chart.Chart {
	hits := chart.Series{Name: "found one ready"}
	for _, p := range ps {
		y := math.NaN() // no runs then: a gap, not a zero
		if p.HitRate >= 0 {
			y = 100 * p.HitRate
		}
		hits.Points = append(hits.Points, chart.Point{X: float64(p.Time.Unix()), Y: y})
	}
	return chart.Chart{Title: def.Title, Desc: def.Alt, X: chart.Axis{Label: "Time", Time: true}, Y: chart.Axis{Label: "Runs", Unit: "%"}, Series: []chart.Series{hits}}
}

func sessionMemory(ms []MemorySample, def chartDef) chart.Chart {
	mem := chart.Series{Name: "sessions"}
	for _, m := range ms {
		mem.Points = append(mem.Points, chart.Point{X: float64(m.Time.Unix()), Y: float64(m.Bytes) / (1 << 20)})
	}
	return chart.Chart{Title: def.Title, Desc: def.Alt, X: chart.Axis{Label: "Time", Time: true}, Y: chart.Axis{Label: "Memory", Unit: "MiB"}, Series: []chart.Series{mem}}
}
