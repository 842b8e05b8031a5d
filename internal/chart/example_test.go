package chart_test

import (
	"fmt"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/chart"
)

func Example() {
	start := 1767225600.0 // 2026-01-01 00:00 UTC
	ok := chart.Series{Name: "ok"}
	failed := chart.Series{Name: "failed"}
	for m, n := range []float64{12, 15, 9, 20, 18} {
		x := start + float64(m*60)
		ok.Points = append(ok.Points, chart.Point{X: x, Y: n})
		failed.Points = append(failed.Points, chart.Point{X: x, Y: float64(m % 3)})
	}
	svg := chart.StackedBars(chart.Chart{
		Title:  "Runs per minute by status",
		X:      chart.Axis{Label: "Time", Time: true},
		Y:      chart.Axis{Label: "Runs"},
		Series: []chart.Series{ok, failed},
	})

	// Serve it as image/svg+xml, or put it in the page as it is. Its <desc>
	// tells a screen reader what it shows.
	s := string(svg)
	fmt.Println(strings.HasPrefix(s, `<svg xmlns="http://www.w3.org/2000/svg"`))
	desc := s[strings.Index(s, "<desc"):strings.Index(s, "</desc>")]
	fmt.Println(desc[strings.Index(desc, ">")+1:])
	// Output:
	// true
	// Stacked bar chart of 2 series: ok, 5 points; failed, 5 points. X axis: Time (UTC, 2026-01-01), from 2026-01-01 00:00:00 UTC to 2026-01-01 00:04:00 UTC. Y axis: Runs, stacks from 0 to 20.
}
