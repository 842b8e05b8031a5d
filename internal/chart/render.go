package chart

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Layout, in pixels.
const (
	fontSize      = 11
	titleSize     = 14
	charWidth     = 0.6 // of the font size: a generous mean for sans-serif
	margin        = 8
	legendRow     = 16
	swatch        = 10
	tickLength    = 4
	ticksPerPixel = 1.0 / 80 // at most one X tick label per 80 px
	rowsPerPixel  = 1.0 / 30 // at most one Y tick label per 30 px
	maxBarWidth   = 60
	minPlot       = 20
)

// Colours of the frame: dark enough on white for text (WCAG AA) and lines.
const (
	textColour  = "#222"
	tickColour  = "#444"
	axisColour  = "#666"
	gridColour  = "#e3e3e3"
	emptyColour = "#555"
)

func textWidth(s string, size float64) float64 {
	return float64(utf8.RuneCountInString(s)) * size * charWidth
}

func clampSize(v, def, lo, hi int) int {
	if v <= 0 {
		return def
	}
	return min(max(v, lo), hi)
}

func render(c Chart, k kind) []byte {
	w := clampSize(c.Width, DefaultWidth, minWidth, MaxWidth)
	h := clampSize(c.Height, DefaultHeight, minHeight, MaxHeight)
	xlog, ylog := isLog(c.X, k), isLog(c.Y, k)
	var d *data
	switch k {
	case kindLine:
		d = prepareLine(c, xlog, ylog)
	case kindScatter:
		d = prepareScatter(c, xlog, ylog)
	default:
		d = prepareBars(c)
	}
	title := clip(c.Title, maxTitleRunes)
	xTitle := axisTitle(c.X, timeNote(c.X, d.xlo, d.xhi))
	yTitle := axisTitle(c.Y, timeNote(c.Y, d.ylo, d.yhi))

	// Top to bottom: title, legend, plot, X tick labels, X title.
	top := float64(margin)
	if title != "" {
		top += titleSize + 8
	}
	legend, rows := layoutLegend(d.names, float64(w), top)
	plotTop := top + float64(rows)*legendRow + 6
	plotBottom := float64(h) - margin - fontSize - tickLength - 6
	if xTitle != "" {
		plotBottom -= fontSize + 6
	}
	plotBottom = max(plotBottom, plotTop+minPlot)

	ny := clampTicks((plotBottom - plotTop) * rowsPerPixel)
	ys := newScale(c.Y, ylog, d.ylo, d.yhi, true, ny)
	ys.p0, ys.p1 = plotBottom, plotTop

	// Left: Y title and tick labels. Both sides: room for half the end X
	// tick labels.
	left := float64(margin)
	if yTitle != "" {
		left += fontSize + 6
	}
	labelW := 0.0
	for _, l := range ys.labels {
		labelW = max(labelW, textWidth(l, fontSize))
	}
	left += labelW + tickLength + 4
	right := float64(w) - margin
	xlo, xhi := d.xlo-d.xPad, d.xhi+d.xPad
	guess := newScale(c.X, xlog, xlo, xhi, d.xExtend, clampTicks((right-left)*ticksPerPixel))
	if n := len(guess.labels); n > 0 {
		// Room for the first and last labels, centred on ticks that may sit
		// at the ends.
		left = max(left, textWidth(guess.labels[0], fontSize)/2+margin/2)
		right = float64(w) - max(margin, textWidth(guess.labels[n-1], fontSize)/2+margin/2)
	}
	right = max(right, left+minPlot)
	xs := newScale(c.X, xlog, xlo, xhi, d.xExtend, clampTicks((right-left)*ticksPerPixel))
	xs.p0, xs.p1 = left, right

	var b svg
	if title != "" {
		b.raw(`<text class="chart-title" x="`)
		b.num(margin)
		b.raw(`" y="`)
		b.num(margin + titleSize - 2)
		b.raw(`" font-size="14" font-weight="bold" fill="` + textColour + `">`)
		b.text(title)
		b.raw("</text>\n")
	}
	b.legend(k, d.names, legend)
	b.grid(&xs, &ys)
	switch k {
	case kindLine:
		b.lines(d.lines, &xs, &ys)
	case kindScatter:
		b.dots(d.dots, d.drawn, &xs, &ys)
	default:
		b.bars(d.bars, &xs, &ys)
	}
	b.axes(&xs, &ys)
	if xTitle != "" {
		b.raw(`<text class="chart-label" x="`)
		b.num((left + right) / 2)
		b.raw(`" y="`)
		b.num(float64(h) - margin)
		b.raw(`" text-anchor="middle" fill="` + textColour + `">`)
		b.text(xTitle)
		b.raw("</text>\n")
	}
	if yTitle != "" {
		// Rotated a quarter turn about the origin: x runs up the page.
		b.raw(`<text class="chart-label" transform="rotate(-90)" x="`)
		b.num(-(plotTop + plotBottom) / 2)
		b.raw(`" y="`)
		b.num(margin + fontSize - 2)
		b.raw(`" text-anchor="middle" fill="` + textColour + `">`)
		b.text(yTitle)
		b.raw("</text>\n")
	}
	if d.drawn == 0 && d.bars == nil {
		b.raw(`<text class="chart-empty" x="`)
		b.num((left + right) / 2)
		b.raw(`" y="`)
		b.num((plotTop + plotBottom) / 2)
		b.raw(`" text-anchor="middle" fill="` + emptyColour + `">No data</text>` + "\n")
	}

	name := title
	if name == "" {
		name = k.String()
	}
	desc := describe(c, k, d, xTitle, yTitle)
	hash := fnv.New32a()
	hash.Write([]byte(name + "\x00" + desc + "\x00"))
	hash.Write(b.Bytes())
	id := fmt.Sprintf("chart-%08x", hash.Sum32())

	var out svg
	out.Grow(b.Len() + 1024)
	fmt.Fprintf(&out.Buffer, `<svg xmlns="http://www.w3.org/2000/svg" class="chart %s" width="%d" height="%d" viewBox="0 0 %d %d"`,
		k.class(), w, h, w, h)
	fmt.Fprintf(&out.Buffer, ` role="img" aria-labelledby="%s-t" aria-describedby="%s-d" font-family="sans-serif" font-size="%d">`+"\n",
		id, id, fontSize)
	out.raw(`<title id="` + id + `-t">`)
	out.text(name)
	out.raw("</title>\n")
	out.raw(`<desc id="` + id + `-d">`)
	out.text(desc)
	out.raw("</desc>\n")
	fmt.Fprintf(&out.Buffer, `<rect class="chart-bg" width="%d" height="%d" fill="#fff"/>`+"\n", w, h)
	out.Write(b.Bytes())
	out.raw("</svg>\n")
	return out.Bytes()
}

func clampTicks(n float64) int { return min(max(int(n), 2), 5) }

// timeNote tells the time zone of a time axis and the dates its data spans.
func timeNote(a Axis, lo, hi float64) string {
	if !a.Time {
		return ""
	}
	t0, ok0 := unixTime(lo)
	t1, ok1 := unixTime(hi)
	if lo > hi || !ok0 || !ok1 {
		return "UTC"
	}
	dates := t0.Format("2006-01-02")
	if d1 := t1.Format("2006-01-02"); d1 != dates {
		dates += " – " + d1
	}
	return "UTC, " + dates
}

// describe is the chart's <desc>: the caller's text, then what the chart
// shows and what it left out.
func describe(c Chart, k kind, d *data, xTitle, yTitle string) string {
	var s strings.Builder
	if desc := clip(c.Desc, maxDescRunes); desc != "" {
		s.WriteString(desc)
		if !strings.HasSuffix(desc, ".") {
			s.WriteByte('.')
		}
		s.WriteByte(' ')
	}
	s.WriteString(k.String())
	if len(d.names) == 0 {
		s.WriteString(" with no series.")
	} else {
		fmt.Fprintf(&s, " of %d series:", len(d.names))
		for i, n := range d.names {
			sep := ";"
			if i == len(d.names)-1 {
				sep = "."
			}
			fmt.Fprintf(&s, " %s, %d points%s", n, d.counts[i], sep)
		}
	}
	if d.xlo <= d.xhi {
		for _, a := range []struct {
			name, title string
			axis        Axis
			lo, hi      float64
		}{{"X", xTitle, c.X, d.xlo, d.xhi}, {"Y", yTitle, c.Y, d.ylo, d.yhi}} {
			fmt.Fprintf(&s, " %s axis", a.name)
			if a.title != "" {
				fmt.Fprintf(&s, ": %s,", a.title)
			}
			if k == kindBars && a.name == "Y" {
				fmt.Fprintf(&s, " stacks from %s to %s.", formatData(a.lo, a.axis), formatData(a.hi, a.axis))
			} else {
				fmt.Fprintf(&s, " from %s to %s.", formatData(a.lo, a.axis), formatData(a.hi, a.axis))
			}
		}
	}
	for _, n := range d.notes {
		s.WriteString(" " + n)
	}
	return s.String()
}

// svg writes SVG text.
type svg struct{ bytes.Buffer }

func (b *svg) raw(s string) { b.WriteString(s) }

// text writes s XML-escaped.
func (b *svg) text(s string) { _ = xml.EscapeText(b, []byte(s)) }

// num writes v compactly, rounded to a tenth: "12", "12.5", "-0.3".
func (b *svg) num(v float64) {
	if !(math.Abs(v) < 1e12) {
		v = 0 // never reached: scales map drawn data inside the view
	}
	tenths := int64(math.Round(v * 10))
	if tenths < 0 {
		b.WriteByte('-')
		tenths = -tenths
	}
	b.Write(strconv.AppendInt(b.AvailableBuffer(), tenths/10, 10))
	if d := tenths % 10; d != 0 {
		b.WriteByte('.')
		b.WriteByte(byte('0' + d))
	}
}

// attrs writes name="v" pairs, each preceded by a space.
func (b *svg) attrs(kv ...any) {
	for i := 0; i+1 < len(kv); i += 2 {
		b.raw(" " + kv[i].(string) + `="`)
		switch v := kv[i+1].(type) {
		case float64:
			b.num(v)
		case string:
			b.raw(v) // only our own constants
		}
		b.raw(`"`)
	}
}

type legendItem struct{ x, y float64 }

// layoutLegend places one item per name in rows from top, wrapping at the
// chart's width; it returns where each goes and how many rows they take.
func layoutLegend(names []string, width, top float64) ([]legendItem, int) {
	if len(names) == 0 {
		return nil, 0
	}
	items := make([]legendItem, len(names))
	x, row := float64(margin), 0
	for i, n := range names {
		w := swatch + 4 + textWidth(n, fontSize)
		if x > margin && x+w > width-margin {
			x, row = margin, row+1
		}
		items[i] = legendItem{x, top + float64(row)*legendRow}
		x += w + 14
	}
	return items, row + 1
}

func (b *svg) legend(k kind, names []string, items []legendItem) {
	if len(names) == 0 {
		return
	}
	b.raw(`<g class="chart-legend" fill="` + textColour + `">` + "\n")
	for i, n := range names {
		it := items[i]
		fmt.Fprintf(b, `<g class="series-%d"`, i)
		switch k {
		case kindLine:
			b.attrs("fill", "none", "stroke", palette[i], "stroke-width", "2")
			b.raw(`><path d="M`)
			b.num(it.x)
			b.raw(" ")
			b.num(it.y + 6)
			b.raw(`h10"/>`)
		case kindScatter:
			b.attrs("fill", palette[i])
			b.raw("><circle")
			b.attrs("cx", it.x+5, "cy", it.y+6, "r", "4")
			b.raw("/>")
		default:
			b.attrs("fill", palette[i])
			b.raw("><rect")
			b.attrs("x", it.x, "y", it.y+1, "width", "10", "height", "10")
			b.raw("/>")
		}
		b.raw("</g><text")
		b.attrs("x", it.x+swatch+4, "y", it.y+10)
		b.raw(">")
		b.text(n)
		b.raw("</text>\n")
	}
	b.raw("</g>\n")
}

func (b *svg) grid(xs, ys *scale) {
	b.raw(`<g class="chart-grid" stroke="` + gridColour + `" stroke-width="1" shape-rendering="crispEdges">` + "\n")
	for _, t := range ys.ticks {
		y := ys.px(t)
		b.raw("<line")
		b.attrs("x1", xs.p0, "y1", y, "x2", xs.p1, "y2", y)
		b.raw("/>\n")
	}
	for _, t := range xs.ticks {
		x := xs.px(t)
		b.raw("<line")
		b.attrs("x1", x, "y1", ys.p0, "x2", x, "y2", ys.p1)
		b.raw("/>\n")
	}
	b.raw("</g>\n")
}

func (b *svg) axes(xs, ys *scale) {
	b.raw(`<g class="chart-axis" stroke="` + axisColour + `" stroke-width="1" fill="none" shape-rendering="crispEdges">` + "\n")
	b.raw(`<path d="M`)
	b.num(xs.p0)
	b.raw(" ")
	b.num(ys.p1)
	b.raw("V")
	b.num(ys.p0)
	b.raw("H")
	b.num(xs.p1)
	for _, t := range ys.ticks {
		b.raw("M")
		b.num(xs.p0 - tickLength)
		b.raw(" ")
		b.num(ys.px(t))
		b.raw("h4")
	}
	for _, t := range xs.ticks {
		b.raw("M")
		b.num(xs.px(t))
		b.raw(" ")
		b.num(ys.p0)
		b.raw("v4")
	}
	b.raw(`"/>` + "\n")
	if !ys.log && ys.lo < 0 && ys.hi > 0 {
		// Zero, where bars and values change sign.
		b.raw(`<line class="chart-zero"`)
		b.attrs("x1", xs.p0, "y1", ys.px(0), "x2", xs.p1, "y2", ys.px(0))
		b.raw("/>\n")
	}
	b.raw("</g>\n")

	b.raw(`<g class="chart-tick" fill="` + tickColour + `" text-anchor="end">` + "\n")
	for i, t := range ys.ticks {
		b.raw("<text")
		b.attrs("x", xs.p0-tickLength-3, "y", ys.px(t)+4)
		b.raw(">")
		b.text(ys.labels[i])
		b.raw("</text>\n")
	}
	b.raw("</g>\n")
	b.raw(`<g class="chart-tick" fill="` + tickColour + `" text-anchor="middle">` + "\n")
	for i, t := range xs.ticks {
		b.raw("<text")
		b.attrs("x", xs.px(t), "y", ys.p0+tickLength+fontSize+1)
		b.raw(">")
		b.text(xs.labels[i])
		b.raw("</text>\n")
	}
	b.raw("</g>\n")
}

func (b *svg) lines(lines [][]Point, xs, ys *scale) {
	for i, pts := range lines {
		if !slices.ContainsFunc(pts, func(p Point) bool { return !isGap(p) }) {
			continue // an empty d attribute is an error in SVG 1.1
		}
		fmt.Fprintf(b, `<g class="series-%d" fill="none" stroke="%s" stroke-width="1.5" stroke-linejoin="round" stroke-linecap="round">`,
			i, palette[i])
		b.raw(`<path d="`)
		run := 0 // points in the current piece of line
		for _, p := range pts {
			if isGap(p) {
				if run == 1 {
					b.raw("h0") // a dot, drawn by the round cap
				}
				run = 0
				continue
			}
			switch run {
			case 0:
				b.raw("M")
			case 1:
				b.raw("L")
			default:
				b.raw(" ")
			}
			b.num(xs.px(p.X))
			b.raw(" ")
			b.num(ys.px(p.Y))
			run++
		}
		if run == 1 {
			b.raw("h0")
		}
		b.raw(`"/></g>` + "\n")
	}
}

func (b *svg) dots(dots [][]Point, drawn int, xs, ys *scale) {
	r := "3"
	if drawn > 500 {
		r = "2"
	}
	for i, pts := range dots {
		if len(pts) == 0 {
			continue
		}
		fmt.Fprintf(b, `<g class="series-%d" fill="%s" fill-opacity="0.75">`+"\n", i, palette[i])
		for _, p := range pts {
			b.raw("<circle")
			b.attrs("cx", xs.px(p.X), "cy", ys.px(p.Y), "r", r)
			b.raw("/>\n")
		}
		b.raw("</g>\n")
	}
}

func (b *svg) bars(bs *bars, xs, ys *scale) {
	if bs == nil {
		return
	}
	slot := bs.width / (xs.hi - xs.lo) * (xs.p1 - xs.p0)
	w := slot * 0.8
	if slot < 4 {
		w = slot // no room for gaps between bars
	}
	w = min(max(w, 0.5), maxBarWidth)
	pos := make([]float64, len(bs.centers))
	neg := make([]float64, len(bs.centers))
	for i, sums := range bs.sums {
		fmt.Fprintf(b, `<g class="series-%d" fill="%s" shape-rendering="crispEdges">`+"\n", i, palette[i])
		for j, v := range sums {
			var lo, hi float64
			switch {
			case v > 0:
				lo, hi = pos[j], pos[j]+v
				pos[j] = hi
			case v < 0:
				lo, hi = neg[j]+v, neg[j]
				neg[j] = lo
			default:
				continue
			}
			y0, y1 := ys.px(hi), ys.px(lo)
			if y1-y0 < 0.05 {
				continue // rounds to nothing
			}
			b.raw("<rect")
			b.attrs("x", xs.px(bs.centers[j])-w/2, "y", y0, "width", w, "height", y1-y0)
			b.raw("/>\n")
		}
		b.raw("</g>\n")
	}
}
