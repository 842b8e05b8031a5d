// Package chart draws small SVG charts on the server, for the dashboard page
// a person looks at: runs per minute by status, latency over time, CPU
// against memory per run, the warm pool's size.
//
// Output is one complete, well-formed SVG document that a page with a strict
// Content-Security-Policy can serve or inline: it holds no script, no style
// element or attribute and no reference to anything outside itself. Colours,
// strokes and fonts are presentation attributes, and each part has a class
// the page's own stylesheet may override: chart-bg, chart-title,
// chart-legend, chart-grid, chart-axis (and chart-zero, the line at Y = 0),
// chart-tick (tick labels), chart-label (axis titles), chart-empty ("No
// data"), and series-0 … series-7 on each series' group, in the legend too.
// The root has class "chart" and one of chart-line, chart-scatter or
// chart-bars, so a rule can colour lines by stroke and bars by fill. All
// text a caller gives is XML-escaped, with control and bidi characters
// replaced: a series name is only ever shown as text.
//
// Output is bounded whatever the input. A chart draws at most MaxSeries
// series and MaxPoints points (a StackedBars chart at most MaxBars bars);
// past that it downsamples deterministically, and its <desc> says what was
// left out. Texts are cut to fixed lengths and the size is clamped to
// MaxWidth × MaxHeight, so a chart stays under MaxBytes however much data it
// is given. The same input always gives the same bytes.
package chart

import (
	"math"
	"strings"
	"unicode/utf8"
)

// Bounds of a chart.
const (
	// MaxSeries is the most series drawn. Line and Scatter drop the rest;
	// StackedBars adds them up into a last series named "other".
	MaxSeries = 8
	// MaxPoints is the most points drawn in one chart, shared out among its
	// series. Past it Line keeps the lowest and highest point of each of
	// MaxPoints/2 equal slices of X, and Scatter keeps every k-th point
	// plus each series' extremes.
	MaxPoints = 5000
	// MaxBars is the most bars (X positions) in a StackedBars chart. Past
	// it the X range is cut into MaxBars equal slices, each summed into one
	// bar.
	MaxBars = 600
	// MaxBytes bounds the SVG that any input gives.
	MaxBytes = 320 << 10

	// DefaultWidth and DefaultHeight are the size of a chart that gives
	// none.
	DefaultWidth  = 640
	DefaultHeight = 240
	// MaxWidth and MaxHeight clamp a chart's size.
	MaxWidth  = 4096
	MaxHeight = 4096
	minWidth  = 160
	minHeight = 120

	// maxAbs is the largest magnitude drawn: larger values are skipped like
	// infinite ones, so sums and spans of drawn values stay finite.
	maxAbs = 1e150

	maxTitleRunes = 120
	maxDescRunes  = 1000
	maxLabelRunes = 60
	maxUnitRunes  = 16
	maxNameRunes  = 32
)

// Point is one value: Y at X.
type Point struct{ X, Y float64 }

// Series is one named line, set of points or layer of bars.
type Series struct {
	Name   string
	Points []Point
}

// Axis says how to show one axis.
type Axis struct {
	// Label names what the axis measures, such as "Latency".
	Label string
	// Unit follows the label in parentheses, such as "ms" or "MiB".
	Unit string
	// Time says values are Unix seconds; ticks are shown as UTC times
	// (HH:MM, or HH:MM:SS for ranges of a few minutes).
	Time bool
	// Log shows values on a base-10 log scale; values ≤ 0 are skipped.
	// Ignored with Time and by StackedBars.
	Log bool
}

// Chart is what to draw.
type Chart struct {
	// Title is shown above the chart and is its accessible name.
	Title string
	// Desc starts the chart's accessible description; a summary of the
	// series, axes and anything left out follows it.
	Desc string
	// Width and Height are in pixels; zero means DefaultWidth and
	// DefaultHeight.
	Width, Height int
	X, Y          Axis
	Series        []Series
}

// Line draws one line per series, through its points in X order. A point
// whose Y is NaN breaks the line; other non-finite values are skipped.
func Line(c Chart) []byte { return render(c, kindLine) }

// Scatter draws one circle per point.
func Scatter(c Chart) []byte { return render(c, kindScatter) }

// StackedBars draws one bar per distinct X, made of each series' value at
// that X stacked in series order: positive values upwards from zero,
// negative ones downwards. Points of one series at the same X add up.
func StackedBars(c Chart) []byte { return render(c, kindBars) }

type kind int

const (
	kindLine kind = iota
	kindScatter
	kindBars
)

func (k kind) String() string {
	switch k {
	case kindLine:
		return "Line chart"
	case kindScatter:
		return "Scatter chart"
	default:
		return "Stacked bar chart"
	}
}

func (k kind) class() string {
	switch k {
	case kindLine:
		return "chart-line"
	case kindScatter:
		return "chart-scatter"
	default:
		return "chart-bars"
	}
}

// palette is based on Okabe and Ito's colour-blind-safe set. Its orange and
// yellow are too light for a line on white, and orange darkened looks like
// vermilion, so those two give way to a wine red and a dark yellow; sky blue
// is darkened and black eased to a dark grey. Each has at least 3:1 contrast
// with white. No eight colours stay apart for every reader: the first four
// are the safest.
var palette = [MaxSeries]string{
	"#0072B2", // blue
	"#D55E00", // vermilion
	"#009E73", // bluish green
	"#CC79A7", // reddish purple
	"#4D4D4D", // dark grey
	"#3C8DC4", // darker sky blue
	"#882255", // wine
	"#8A7A00", // dark yellow
}

// clip cuts s to at most n runes, marking the cut with an ellipsis, and
// replaces characters that would reorder or hide the text around them.
func clip(s string, n int) string {
	cut := false
	k := 0
	for i := range s {
		if _, size := utf8.DecodeRuneInString(s[i:]); k == n-1 && i+size < len(s) {
			s, cut = s[:i], true
			break
		}
		k++
	}
	s = strings.TrimSpace(strings.Map(safeRune, s))
	if cut {
		s += "…"
	}
	return s
}

func safeRune(r rune) rune {
	switch {
	case r == '\t' || r == '\n' || r == '\r':
		return ' '
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return utf8.RuneError
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
		r == 0x200e, r == 0x200f, r == 0x061c:
		return utf8.RuneError // bidi controls
	}
	return r
}

// clipMiddle is clip with the cut in the middle, for names that may differ
// only at their ends.
func clipMiddle(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return clip(s, n)
	}
	head := clip(s, n/2+1) // ends in the ellipsis
	r := []rune(s[max(len(s)-4*n, 0):])
	return head + strings.TrimSpace(strings.Map(safeRune, string(r[max(len(r)-(n-n/2-1), 0):])))
}

// axisTitle is the text shown beside an axis: its label, then its unit and
// any extra note in parentheses.
func axisTitle(a Axis, extra string) string {
	l, u := clip(a.Label, maxLabelRunes), clip(a.Unit, maxUnitRunes)
	switch {
	case u == "":
		u = extra
	case extra != "":
		u += ", " + extra
	}
	switch {
	case u == "":
		return l
	case l == "":
		return u
	}
	return l + " (" + u + ")"
}

// usable reports whether v can be drawn, on a log scale if log.
func usable(v float64, log bool) bool {
	if math.IsNaN(v) || math.Abs(v) > maxAbs {
		return false
	}
	return !log || v > 0
}

// isLog reports whether a is drawn on a log scale in a chart of kind k.
func isLog(a Axis, k kind) bool { return a.Log && !a.Time && k != kindBars }
