package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite testdata/*.svg from the current output")

// doc is a parsed chart.
type doc struct {
	root  xml.StartElement
	title string // text of <title>
	desc  string // text of <desc>
	texts []string
	// data counts drawn marks per element name, outside the legend.
	data map[string]int
	// bySeries counts drawn marks per series class, outside the legend.
	bySeries map[string]int
	paths    []string // d of each drawn path
	all      []xml.StartElement
}

// parse decodes an SVG strictly and fails t if it is not well-formed or
// holds anything a strict Content-Security-Policy or a careful page would
// refuse.
func parse(t *testing.T, svg []byte) doc {
	t.Helper()
	d := doc{data: map[string]int{}, bySeries: map[string]int{}}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	dec.Strict = true
	type open struct {
		name   string
		legend bool
		series string
	}
	var stack []open
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, head(svg))
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			tok = tok.Copy()
			d.all = append(d.all, tok)
			if len(stack) == 0 {
				d.root = tok
			} else if len(d.root.Name.Local) == 0 {
				t.Fatal("more than one root")
			}
			o := open{name: tok.Name.Local}
			if len(stack) > 0 {
				o.legend, o.series = stack[len(stack)-1].legend, stack[len(stack)-1].series
			}
			for _, a := range tok.Attr {
				checkAttr(t, tok.Name.Local, a)
				if a.Name.Local == "class" {
					for c := range strings.FieldsSeq(a.Value) {
						if c == "chart-legend" {
							o.legend = true
						}
						if strings.HasPrefix(c, "series-") {
							o.series = c
						}
					}
				}
			}
			switch tok.Name.Local {
			case "script", "style", "foreignObject", "image", "use", "a", "iframe":
				t.Errorf("element <%s> is not allowed", tok.Name.Local)
			case "circle", "rect", "path", "polyline":
				if !o.legend && o.series != "" {
					d.data[tok.Name.Local]++
					d.bySeries[o.series]++
					if tok.Name.Local == "path" {
						d.paths = append(d.paths, tok.Attr[0].Value)
					}
				}
			}
			stack = append(stack, o)
			text.Reset()
		case xml.EndElement:
			s := text.String()
			switch tok.Name.Local {
			case "title":
				d.title = s
			case "desc":
				d.desc = s
			case "text":
				d.texts = append(d.texts, s)
			}
			stack = stack[:len(stack)-1]
			text.Reset()
		case xml.CharData:
			text.Write(tok)
		case xml.ProcInst, xml.Directive:
			t.Errorf("unexpected %T", tok)
		}
	}
	if d.root.Name.Local != "svg" || d.root.Name.Space != "http://www.w3.org/2000/svg" {
		t.Fatalf("root is %v, want svg in the SVG namespace", d.root.Name)
	}
	attr := func(n string) string {
		for _, a := range d.root.Attr {
			if a.Name.Local == n {
				return a.Value
			}
		}
		return ""
	}
	if attr("role") != "img" || attr("viewBox") == "" {
		t.Errorf("root lacks role=img or viewBox: %v", d.root.Attr)
	}
	ids := map[string]bool{}
	for _, e := range d.all {
		for _, a := range e.Attr {
			if a.Name.Local == "id" {
				ids[e.Name.Local+"#"+a.Value] = true
			}
		}
	}
	if !ids["title#"+attr("aria-labelledby")] || !ids["desc#"+attr("aria-describedby")] {
		t.Errorf("aria-labelledby/describedby do not name the <title> and <desc>: %v", d.root.Attr)
	}
	if d.title == "" || d.desc == "" {
		t.Errorf("empty <title> %q or <desc> %q", d.title, d.desc)
	}
	return d
}

// numeric attributes and how far outside the view they may reach: none.
var coordAttrs = map[string]bool{
	"x": true, "y": true, "x1": true, "y1": true, "x2": true, "y2": true,
	"cx": true, "cy": true, "r": true, "width": true, "height": true,
}

func checkAttr(t *testing.T, elem string, a xml.Attr) {
	t.Helper()
	n := strings.ToLower(a.Name.Local)
	switch {
	case n == "style" || strings.HasPrefix(n, "on") || strings.Contains(n, "href") || n == "src":
		t.Errorf("<%s> has attribute %s=%q", elem, a.Name.Local, a.Value)
	case strings.Contains(a.Value, "url("):
		t.Errorf("<%s %s> refers to %q", elem, a.Name.Local, a.Value)
	case strings.Contains(a.Value, "NaN") || strings.Contains(a.Value, "Inf"):
		t.Errorf("<%s %s=%q>", elem, a.Name.Local, a.Value)
	case coordAttrs[n] && elem != "svg":
		v, err := strconv.ParseFloat(a.Value, 64)
		if err != nil || v < -MaxHeight || v > MaxWidth {
			t.Errorf("<%s %s=%q> is not a coordinate in the view", elem, a.Name.Local, a.Value)
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 2000)] }

var kinds = []struct {
	name string
	draw func(Chart) []byte
}{
	{"line", Line},
	{"scatter", Scatter},
	{"bars", StackedBars},
}

func pts(ys ...float64) []Point {
	var p []Point
	for i, y := range ys {
		p = append(p, Point{X: float64(i), Y: y})
	}
	return p
}

// ones is n points of value 1, X from 0 one apart.
func ones(n int) []Point {
	p := make([]Point, n)
	for i := range p {
		p[i] = Point{X: float64(i), Y: 1}
	}
	return p
}

// ramp is n points on a line, X from x0 one apart.
func ramp(n int, x0 float64) []Point {
	p := make([]Point, n)
	for i := range p {
		p[i] = Point{X: x0 + float64(i), Y: float64(i%97) - 20}
	}
	return p
}

func TestEdgeCases(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name  string
		c     Chart
		drawn bool // whether any data is drawn
		// bars, if set, is how StackedBars differs: "marks" if it draws
		// some (it has no log scale), "zero" if it draws zero-high bars.
		bars string
	}{
		{"zero chart", Chart{}, false, ""},
		{"no series", Chart{Title: "t"}, false, ""},
		{"empty series", Chart{Series: []Series{{Name: "a"}, {Name: "b", Points: []Point{}}}}, false, ""},
		{"single point", Chart{Series: []Series{{Points: []Point{{X: 5, Y: 7}}}}}, true, ""},
		{"single time point", Chart{X: Axis{Time: true}, Series: []Series{{Points: []Point{{X: 1.7e9, Y: 7}}}}}, true, ""},
		{"all equal", Chart{Series: []Series{{Points: []Point{{1, 3}, {1, 3}, {1, 3}}}}}, true, ""},
		{"all zero", Chart{Series: []Series{{Points: pts(0, 0, 0)}}}, true, "zero"},
		{"negative", Chart{Series: []Series{{Points: pts(-5, -1, -30)}, {Points: pts(4, -2, 8)}}}, true, ""},
		{"nan and inf", Chart{Series: []Series{{Points: []Point{
			{0, 1}, {1, nan}, {2, inf}, {3, -inf}, {nan, 1}, {inf, 2}, {4, 2}, {5, 3},
		}}}}, true, ""},
		{"only nan", Chart{Series: []Series{{Points: pts(nan, nan)}}}, false, ""},
		{"huge values", Chart{Series: []Series{{Points: []Point{{-1e150, 1e150}, {1e150, -1e150}, {0, 1e300}}}}}, true, ""},
		{"tiny span", Chart{Series: []Series{{Points: []Point{{1e9, 1}, {1e9 + 1e-7, 1 + 1e-15}}}}}, true, ""},
		{"tiny values", Chart{Series: []Series{{Points: []Point{{0, 1e-300}, {1e-300, 2e-300}}}}}, true, ""},
		{"log with zeros", Chart{Y: Axis{Log: true}, Series: []Series{{Points: pts(0, -1, 10, 1000)}}}, true, ""},
		{"log all invalid", Chart{Y: Axis{Log: true}, Series: []Series{{Points: pts(0, -1)}}}, false, "marks"},
		{"log one value", Chart{Y: Axis{Log: true}, X: Axis{Log: true}, Series: []Series{{Points: []Point{{100, 100}}}}}, true, ""},
		{"log wide", Chart{Y: Axis{Log: true}, Series: []Series{{Points: pts(1e-300, 1, 1e150)}}}, true, ""},
		{"unsorted", Chart{Series: []Series{{Points: []Point{{3, 1}, {1, 2}, {2, 3}, {1, 4}}}}}, true, ""},
		{"negative size", Chart{Width: -5, Height: -1, Series: []Series{{Points: pts(1, 2)}}}, true, ""},
		{"tiny size", Chart{Width: 1, Height: 1, Title: "a title", X: Axis{Label: "x"}, Y: Axis{Label: "y"},
			Series: []Series{{Name: strings.Repeat("n", 100), Points: pts(1, 2)}}}, true, ""},
		{"huge size", Chart{Width: 1 << 30, Height: 1 << 30, Series: []Series{{Points: pts(1, 2)}}}, true, ""},
		{"time far away", Chart{X: Axis{Time: true}, Series: []Series{{Points: []Point{{-1e140, 1}, {1e140, 2}}}}}, true, ""},
		{"time and log", Chart{X: Axis{Time: true, Log: true}, Series: []Series{{Points: []Point{{0, 1}, {-60, 2}}}}}, true, ""},
	}
	for _, tt := range tests {
		for _, k := range kinds {
			t.Run(tt.name+"/"+k.name, func(t *testing.T) {
				svg := k.draw(tt.c)
				d := parse(t, svg)
				marks := d.data["path"] + d.data["circle"] + d.data["rect"]
				wantMarks, wantEmpty := tt.drawn, !tt.drawn
				if k.name == "bars" && tt.bars != "" {
					wantMarks, wantEmpty = tt.bars == "marks", false
				}
				if got := marks > 0; got != wantMarks {
					t.Errorf("drew data: %v, want %v\n%s", got, wantMarks, svg)
				}
				if got := slices.Contains(d.texts, "No data"); got != wantEmpty {
					t.Errorf(`"No data" shown: %v, want %v`, got, wantEmpty)
				}
			})
		}
	}
}

func TestSize(t *testing.T) {
	tests := []struct {
		name          string
		width, height int
		want          string
	}{
		{"default", 0, 0, "0 0 640 240"},
		{"given", 800, 300, "0 0 800 300"},
		{"too small", 10, 10, "0 0 160 120"},
		{"too large", 1e6, 1e6, "0 0 4096 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := parse(t, Line(Chart{Width: tt.width, Height: tt.height}))
			for _, a := range d.root.Attr {
				if a.Name.Local == "viewBox" && a.Value != tt.want {
					t.Errorf("viewBox %q, want %q", a.Value, tt.want)
				}
			}
		})
	}
}

func TestMarks(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name   string
		series []Series
		// Marks drawn by Line (paths), Scatter (circles) and StackedBars
		// (rects).
		paths, circles, rects int
	}{
		{"one series", []Series{{Points: pts(1, 2, 3)}}, 1, 3, 3},
		{"three series", []Series{{Points: pts(1, 2)}, {Points: pts(3)}, {Points: pts(4, 5, 6)}}, 3, 6, 6},
		{"gaps stay one path", []Series{{Points: pts(1, nan, 2, nan, nan, 3)}}, 1, 3, 3},
		{"empty series draws nothing", []Series{{Points: pts(1)}, {}}, 1, 1, 1},
		{"all NaN draws nothing", []Series{{Points: pts(math.NaN())}}, 0, 0, 0},
		{"zero bars are not drawn", []Series{{Points: pts(0, 1, 0)}}, 1, 3, 1},
		{"same X adds up", []Series{{Points: []Point{{1, 1}, {1, 2}, {2, 3}}}}, 1, 3, 2},
		{"at the bound", []Series{{Points: ones(MaxPoints)}}, 1, MaxPoints, MaxBars},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Chart{Series: tt.series}
			if got := parse(t, Line(c)).data["path"]; got != tt.paths {
				t.Errorf("Line: %d paths, want %d", got, tt.paths)
			}
			if got := parse(t, Scatter(c)).data["circle"]; got != tt.circles {
				t.Errorf("Scatter: %d circles, want %d", got, tt.circles)
			}
			if got := parse(t, StackedBars(c)).data["rect"]; got != tt.rects {
				t.Errorf("StackedBars: %d rects, want %d", got, tt.rects)
			}
		})
	}
}

func TestLineGaps(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name string
		ys   []float64
		want string // the path's commands
	}{
		{"no gap", []float64{1, 2, 3}, "ML"},
		{"NaN breaks", []float64{1, 2, nan, 3, 4}, "MLML"},
		{"Inf is skipped", []float64{1, 2, inf, 3, 4}, "ML"},
		{"lone point is a dot", []float64{1, nan, 2, 3}, "MhML"},
		{"leading and trailing NaN", []float64{nan, 1, 2, nan}, "ML"},
		{"many NaN are one break", []float64{1, 2, nan, nan, nan, 3, 4}, "MLML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := parse(t, Line(Chart{Series: []Series{{Points: pts(tt.ys...)}}}))
			if len(d.paths) != 1 {
				t.Fatalf("%d paths, want 1", len(d.paths))
			}
			got := strings.Map(func(r rune) rune {
				if r >= 'A' && r <= 'z' {
					return r
				}
				return -1
			}, d.paths[0])
			if got != tt.want {
				t.Errorf("path commands %q, want %q", got, tt.want)
			}
		})
	}
}

func TestEscaping(t *testing.T) {
	evil := `<script>alert(1)</script>`
	c := Chart{
		Title:  `Runs & "failures" <b>`,
		Desc:   evil,
		X:      Axis{Label: evil, Unit: `"></text><script>`},
		Y:      Axis{Label: "y\u202eevil", Unit: "ms"},
		Series: []Series{{Name: evil, Points: pts(1, 2)}, {Name: "a\x00b\x1b[31m", Points: pts(3)}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			svg := k.draw(c)
			if bytes.Contains(bytes.ToLower(svg), []byte("<script")) {
				t.Fatalf("output holds a raw <script>:\n%s", svg)
			}
			d := parse(t, svg)
			if d.title != c.Title {
				t.Errorf("title %q, want %q", d.title, c.Title)
			}
			if !slices.Contains(d.texts, evil) {
				t.Errorf("series name not shown as text: %q", d.texts)
			}
			if !strings.Contains(d.desc, evil) {
				t.Errorf("desc %q lacks %q", d.desc, evil)
			}
			for _, s := range append(d.texts, d.desc) {
				if strings.ContainsAny(s, "\u202e\x00\x1b") {
					t.Errorf("control or bidi character kept in %q", s)
				}
			}
		})
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"short", "abc", 5, "abc"},
		{"exact", "abcde", 5, "abcde"},
		{"cut", "abcdef", 5, "abcd…"},
		{"runes", "ééééééé", 3, "éé…"},
		{"controls", "a\tb\nc\x07", 10, "a b c\uFFFD"},
		{"bidi", "a\u202eb\u2066c", 10, "a\uFFFDb\uFFFDc"},
		{"trimmed", "  a  ", 10, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := clip(tt.in, tt.n); got != tt.want {
				t.Errorf("clip(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
			}
		})
	}
}

func TestClipMiddle(t *testing.T) {
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"short", "abc", 5, "abc"},
		{"cut", "series number 10", 10, "serie…r 10"},
		{"runes", "éééééééééé-ü", 6, "ééé…-ü"},
		{"long", strings.Repeat("é", 1000) + "end", 8, "éééé…end"},
		{"controls at the end", "abcdefgh\x07", 6, "abc…h\uFFFD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := clipMiddle(tt.in, tt.n)
			if got != tt.want {
				t.Errorf("clipMiddle(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
			}
			if n := utf8.RuneCountInString(got); n > tt.n {
				t.Errorf("%d runes, more than %d", n, tt.n)
			}
		})
	}
}

// labels returns the tick labels of a chart's X or Y axis.
func labels(t *testing.T, svg []byte, anchor string) []string {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var got []string
	in := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return got
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if tok.Name.Local == "g" {
				in = slices.Contains(tok.Attr, xml.Attr{Name: xml.Name{Local: "class"}, Value: "chart-tick"}) &&
					slices.Contains(tok.Attr, xml.Attr{Name: xml.Name{Local: "text-anchor"}, Value: anchor})
			}
		case xml.EndElement:
			if tok.Name.Local == "g" {
				in = false
			}
		case xml.CharData:
			if in && strings.TrimSpace(string(tok)) != "" {
				got = append(got, string(tok))
			}
		}
	}
}

func TestTicks(t *testing.T) {
	const t0 = 1767225600 // 2026-01-01 00:00 UTC
	tests := []struct {
		name  string
		axis  Axis
		kind  kind
		lo    float64
		hi    float64
		want  string
		width int
	}{
		{"0 to 100", Axis{}, kindScatter, 0, 100, "0 20 40 60 80 100", 0},
		{"3 to 97", Axis{}, kindScatter, 3, 97, "0 20 40 60 80 100", 0},
		{"0 to 1", Axis{}, kindScatter, 0, 1, "0 0.2 0.4 0.6 0.8 1.0", 0},
		{"-5 to 5", Axis{}, kindScatter, -5, 5, "-6 -4 -2 0 2 4 6", 0},
		{"0 to 7", Axis{}, kindScatter, 0, 7, "0 2 4 6 8", 0},
		{"one value", Axis{}, kindScatter, 50, 50, "44 46 48 50 52 54 56", 0},
		{"zero", Axis{}, kindScatter, 0, 0, "-1.0 -0.5 0 0.5 1.0", 0},
		{"small", Axis{}, kindScatter, 0.001, 0.0042, "0.001 0.002 0.003 0.004 0.005", 0},
		{"thousands", Axis{}, kindScatter, 0, 2e6, "0 0.5M 1.0M 1.5M 2.0M", 0},
		{"tens of thousands", Axis{}, kindScatter, 10000, 50000, "10k 20k 30k 40k 50k", 0},
		{"near a big number", Axis{}, kindScatter, 10000, 10010, "10000 10002 10004 10006 10008 10010", 0},
		{"line X is exact", Axis{}, kindLine, 3, 97, "20 40 60 80", 0},
		{"narrow chart, fewer ticks", Axis{}, kindScatter, 0, 100, "0 50 100", 200},
		{"hour in minutes", Axis{Time: true}, kindLine, t0, t0 + 3600, "00:00 00:15 00:30 00:45 01:00", 0},
		{"two hours", Axis{Time: true}, kindLine, t0 + 3*60, t0 + 2*3600 + 3*60, "00:30 01:00 01:30 02:00", 0},
		{"two minutes", Axis{Time: true}, kindLine, t0, t0 + 120, "00:00:00 00:00:30 00:01:00 00:01:30 00:02:00", 0},
		{"a day", Axis{Time: true}, kindLine, t0, t0 + 86400, "00:00 06:00 12:00 18:00 00:00", 0},
		{"a month", Axis{Time: true}, kindLine, t0, t0 + 30*86400, "Jan 1 Jan 8 Jan 15 Jan 22 Jan 29", 0},
		{"log 1 to 1000", Axis{Log: true}, kindScatter, 1, 1000, "1 10 100 1000", 0},
		{"log 3 to 30", Axis{Log: true}, kindScatter, 3, 30, "1 2 5 10 20 50 100", 0},
		{"log wide", Axis{Log: true}, kindScatter, 1e-3, 1e9, "0.001 1 1000 1M 1G", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Chart{X: tt.axis, Width: tt.width, Series: []Series{{Points: []Point{{tt.lo, 1}, {tt.hi, 2}}}}}
			var svg []byte
			if tt.kind == kindLine {
				svg = Line(c)
			} else {
				svg = Scatter(c)
			}
			parse(t, svg)
			if got := strings.Join(labels(t, svg, "middle"), " "); got != tt.want {
				t.Errorf("X ticks %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNiceStep(t *testing.T) {
	tests := []struct{ raw, want float64 }{
		{1, 1}, {1.2, 2}, {2, 2}, {3, 5}, {5, 5}, {7, 10}, {0.013, 0.02}, {4e9, 5e9},
		{0, 1}, {-3, 1}, {math.Inf(1), 1}, {math.NaN(), 1},
	}
	for _, tt := range tests {
		if got := niceStep(tt.raw); math.Abs(got-tt.want) > 1e-12*tt.want {
			t.Errorf("niceStep(%g) = %g, want %g", tt.raw, got, tt.want)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"value zero", formatValue(0), "0"},
		{"value", formatValue(123.456), "123"},
		{"value k", formatValue(12345), "12.3k"},
		{"value M", formatValue(-2.5e6), "-2.5M"},
		{"value tiny", formatValue(1.5e-5), "1.5e-05"},
		{"tick -0", formatTick(math.Copysign(0, -1), 1, 1), "0"},
		{"tick decimals", formatTick(0.30000000000000004, 0.1, 1), "0.3"},
		{"tick huge", formatTick(2e20, 1e20, 1e21), "2e+20"},
		{"data time", formatData(1767225600, Axis{Time: true}), "2026-01-01 00:00:00 UTC"},
		{"data unit", formatData(12, Axis{Unit: "ms"}), "12 ms"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestShare(t *testing.T) {
	tests := []struct {
		counts []int
		budget int
		want   []int
	}{
		{nil, 10, []int{}},
		{[]int{3, 4}, 10, []int{3, 4}},
		{[]int{100, 100}, 10, []int{5, 5}},
		{[]int{2, 100, 100}, 10, []int{2, 4, 4}},
		{[]int{100, 1, 100, 0}, 11, []int{5, 1, 5, 0}},
	}
	for _, tt := range tests {
		got := share(tt.counts, tt.budget)
		if !slices.Equal(got, tt.want) {
			t.Errorf("share(%v, %d) = %v, want %v", tt.counts, tt.budget, got, tt.want)
		}
	}
}

func TestMinMaxKeepsExtremes(t *testing.T) {
	p := ramp(100000, 0)
	p[31337].Y, p[77777].Y = 1e6, -1e6
	p[50000].Y = math.NaN()
	got := minMax(p, 500)
	n := 0
	var top, bottom float64
	breaks := 0
	for i, q := range got {
		if isGap(q) {
			breaks++
			continue
		}
		n++
		top, bottom = max(top, q.Y), min(bottom, q.Y)
		if i > 0 && !isGap(got[i-1]) && got[i-1].X > q.X {
			t.Fatalf("not in X order at %d", i)
		}
	}
	if n > 500 || top != 1e6 || bottom != -1e6 || breaks != 1 {
		t.Errorf("kept %d points (want ≤ 500), top %g, bottom %g, %d breaks (want 1)", n, top, bottom, breaks)
	}
}

func TestStrideKeepsExtremes(t *testing.T) {
	p := ramp(100001, 0)
	p[12345] = Point{X: 12345, Y: 1e9}
	ok := func(p Point) bool { return true }
	got := stride(p, ok, len(p), 1000)
	if len(got) > 1000 {
		t.Errorf("kept %d points, want ≤ 1000", len(got))
	}
	for _, want := range []Point{p[0], p[len(p)-1], p[12345]} {
		if !slices.Contains(got, want) {
			t.Errorf("dropped extreme %v", want)
		}
	}
}

// TestBounds checks each bound with an input at it and one just past it, and
// that a million points still give a small chart.
func TestBounds(t *testing.T) {
	many := func(series, points int) []Series {
		s := make([]Series, series)
		for i := range s {
			s[i] = Series{Name: fmt.Sprint("s", i), Points: ramp(points, 0)}
		}
		return s
	}
	tests := []struct {
		name   string
		draw   func(Chart) []byte
		series []Series
		elem   string
		want   int    // drawn marks of elem, or at most this with atMost
		atMost bool   // want is a bound, not an exact count
		note   string // in <desc>
	}{
		{"scatter at MaxPoints", Scatter, many(1, MaxPoints), "circle", MaxPoints, false, ""},
		{"scatter past MaxPoints", Scatter, many(1, MaxPoints+1), "circle", MaxPoints, true, "Downsampled: "},
		{"scatter, a million", Scatter, many(1, 1e6), "circle", MaxPoints, true, "of 1000000 points drawn"},
		{"scatter, 8 × 200k", Scatter, many(8, 2e5), "circle", MaxPoints, true, "of 1600000 points drawn"},
		{"line at MaxSeries", Line, many(MaxSeries, 2), "path", MaxSeries, false, ""},
		{"line past MaxSeries", Line, many(MaxSeries+1, 2), "path", MaxSeries, false, "1 more series not shown."},
		{"line, a million", Line, many(1, 1e6), "path", 1, false, "of 1000000 points drawn"},
		{"line, 8 × 200k", Line, many(8, 2e5), "path", 8, false, "of 1600000 points drawn"},
		{"bars at MaxBars", StackedBars, []Series{{Points: ramp(MaxBars, 1)}}, "rect", MaxBars, true, ""},
		{"bars past MaxBars", StackedBars, []Series{{Points: ramp(MaxBars+1, 1)}}, "rect", MaxBars, true, "601 distinct X values summed into 600 bars"},
		{"bars past MaxSeries", StackedBars, many(MaxSeries+3, 3), "rect", MaxSeries * 3, true, "4 series added up as other."},
		{"bars, a million", StackedBars, many(MaxSeries+1, 111112), "rect", MaxSeries * MaxBars, true, "summed into 600 bars"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svg := tt.draw(Chart{Series: tt.series})
			if len(svg) > MaxBytes {
				t.Errorf("%d bytes, more than MaxBytes %d", len(svg), MaxBytes)
			}
			d := parse(t, svg)
			got := d.data[tt.elem]
			if got > tt.want || (!tt.atMost && got != tt.want) {
				t.Errorf("%d <%s> drawn, want %d (at most: %v)", got, tt.elem, tt.want, tt.atMost)
			}
			if len(d.bySeries) > MaxSeries {
				t.Errorf("%d series drawn", len(d.bySeries))
			}
			if tt.note != "" && !strings.Contains(d.desc, tt.note) {
				t.Errorf("desc %q lacks %q", d.desc, tt.note)
			}
			if tt.note == "" && strings.Contains(d.desc, "Downsampled") {
				t.Errorf("desc %q says downsampled", d.desc)
			}
			if tt.elem == "path" {
				// Points in a line's path: pairs of numbers.
				n := 0
				for _, p := range d.paths {
					n += len(strings.FieldsFunc(p, func(r rune) bool {
						return r == ' ' || r == 'M' || r == 'L' || r == 'h'
					})) / 2
				}
				if n > MaxPoints {
					t.Errorf("%d points in paths, more than MaxPoints", n)
				}
			}
		})
	}
}

// TestWorstCaseSize draws the largest output each kind can make: the largest
// size, every text at its limit and made of characters that escape long,
// every series full and no bar segment zero.
func TestWorstCaseSize(t *testing.T) {
	long := strings.Repeat("&", 1<<12)
	c := Chart{Title: long, Desc: long, Width: MaxWidth, Height: MaxHeight,
		X: Axis{Label: long, Unit: long}, Y: Axis{Label: long, Unit: long}}
	for i := range MaxSeries + 1 {
		p := make([]Point, 100000)
		for j := range p {
			y := 1e6 + float64(j%1000)
			if (i+j)%2 == 0 {
				y = -y
			}
			p[j] = Point{X: float64(j), Y: y}
			if i == 0 && j%2 == 1 {
				p[j].Y = math.NaN() // as many breaks as points
			}
		}
		c.Series = append(c.Series, Series{Name: long, Points: p})
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			svg := k.draw(c)
			t.Logf("%d bytes", len(svg))
			if len(svg) > MaxBytes {
				t.Errorf("%d bytes, more than MaxBytes %d", len(svg), MaxBytes)
			}
			parse(t, svg)
		})
	}
}

func TestLongText(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	c := Chart{Title: long, Desc: long, X: Axis{Label: long, Unit: long}, Y: Axis{Label: long}}
	for i := range 100 {
		c.Series = append(c.Series, Series{Name: long, Points: pts(float64(i))})
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			svg := k.draw(c)
			if len(svg) > 16<<10 {
				t.Errorf("%d bytes for 100 one-point series with 1 MiB names", len(svg))
			}
			parse(t, svg)
		})
	}
}

func TestDeterministic(t *testing.T) {
	c := sample("latency")
	before := slices.Clone(c.Series[0].Points)
	for _, k := range kinds {
		if a, b := k.draw(c), k.draw(c); !bytes.Equal(a, b) {
			t.Errorf("%s: two renderings differ", k.name)
		}
	}
	if !slices.EqualFunc(before, c.Series[0].Points, func(a, b Point) bool {
		return a.X == b.X && (a.Y == b.Y || math.IsNaN(a.Y) && math.IsNaN(b.Y))
	}) {
		t.Error("rendering changed its input")
	}
	// Different charts get different ids, so several can share a page.
	a, b := parse(t, Line(sample("latency"))), parse(t, Line(sample("pool")))
	if a.all[1].Attr[0].Value == b.all[1].Attr[0].Value {
		t.Errorf("two charts share the id %s", a.all[1].Attr[0].Value)
	}
}

// luminance is the WCAG relative luminance of a #rrggbb colour.
func luminance(t *testing.T, hex string) float64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(hex, "#"), 16, 32)
	if err != nil || len(hex) != 7 {
		t.Fatalf("bad colour %q", hex)
	}
	var l float64
	for i, w := range []float64{0.2126, 0.7152, 0.0722} {
		c := float64(v>>(16-8*i)&0xff) / 255
		if c <= 0.03928 {
			c /= 12.92
		} else {
			c = math.Pow((c+0.055)/1.055, 2.4)
		}
		l += w * c
	}
	return l
}

func TestPaletteContrast(t *testing.T) {
	seen := map[string]bool{}
	for i, c := range palette {
		if ratio := 1.05 / (luminance(t, c) + 0.05); ratio < 3 {
			t.Errorf("series-%d %s: contrast %.2f:1 with white, want ≥ 3:1", i, c, ratio)
		}
		if seen[c] {
			t.Errorf("series-%d %s repeats a colour", i, c)
		}
		seen[c] = true
	}
}

// sample returns one of the dashboard's charts, with made-up data.
func sample(name string) Chart {
	const t0 = 1767225600 // 2026-01-01 00:00 UTC
	var seed uint64 = 42
	rnd := func() float64 { // xorshift: the same numbers on every Go
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return float64(seed>>11) / (1 << 53)
	}
	switch name {
	case "runs":
		c := Chart{
			Title: "Runs per minute by status",
			X:     Axis{Label: "Time", Time: true},
			Y:     Axis{Label: "Runs"},
		}
		for i, s := range []string{"ok", "error", "timeout", "oom-killed"} {
			sr := Series{Name: s}
			for m := range 60 {
				v := math.Floor(rnd() * []float64{30, 6, 3, 1.5}[i])
				if i == 0 {
					v += 10 + 10*math.Sin(float64(m)/9)
				}
				sr.Points = append(sr.Points, Point{X: t0 + float64(m*60), Y: v})
			}
			c.Series = append(c.Series, sr)
		}
		return c
	case "latency":
		c := Chart{
			Title: "Run latency percentiles",
			Desc:  "Wall-clock time from request to result",
			X:     Axis{Label: "Time", Time: true},
			Y:     Axis{Label: "Latency", Unit: "ms", Log: true},
		}
		for i, s := range []string{"p50", "p90", "p99"} {
			sr := Series{Name: s}
			for m := range 180 {
				y := []float64{40, 120, 600}[i] * (1 + 0.3*math.Sin(float64(m)/15) + 0.4*rnd()*float64(i))
				if m >= 95 && m < 100 {
					y = math.NaN() // the server was down
				}
				sr.Points = append(sr.Points, Point{X: t0 + float64(m*60), Y: y})
			}
			c.Series = append(c.Series, sr)
		}
		return c
	case "usage":
		c := Chart{
			Title: "CPU time and peak memory per run",
			X:     Axis{Label: "CPU time", Unit: "s"},
			Y:     Axis{Label: "Peak memory", Unit: "MiB"},
		}
		for i, s := range []string{"python", "node", "go"} {
			sr := Series{Name: s}
			for range 150 {
				cpu := rnd() * []float64{4, 2, 1}[i] * (1 + rnd())
				sr.Points = append(sr.Points, Point{X: cpu, Y: []float64{40, 60, 12}[i] + cpu*[]float64{30, 20, 8}[i]*(0.5+rnd())})
			}
			c.Series = append(c.Series, sr)
		}
		return c
	case "pool":
		c := Chart{
			Title: "Warm pool size",
			X:     Axis{Label: "Time", Time: true},
			Y:     Axis{Label: "Sandboxes"},
		}
		idle, busy := Series{Name: "idle"}, Series{Name: "busy"}
		n := 8.0
		for m := range 24 * 60 / 5 {
			x := t0 + float64(m*300)
			b := math.Round(4 + 4*math.Sin(float64(m)/40) + 3*rnd())
			n = math.Max(2, math.Round(n+rnd()*2-1))
			idle.Points = append(idle.Points, Point{X: x, Y: n})
			busy.Points = append(busy.Points, Point{X: x, Y: b})
		}
		c.Series = []Series{idle, busy}
		return c
	}
	panic("no sample " + name)
}

// TestGolden keeps the dashboard's charts in testdata, so a change to what
// they look like shows up in review. Refresh with go test -update.
func TestGolden(t *testing.T) {
	tests := []struct {
		name string
		draw func(Chart) []byte
	}{
		{"runs", StackedBars},
		{"latency", Line},
		{"usage", Scatter},
		{"pool", Line},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.draw(sample(tt.name))
			parse(t, got)
			path := filepath.Join("testdata", tt.name+".svg")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (hint: go test -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the output (hint: look at both, then go test -update)", path)
			}
		})
	}
}

func benchmark(b *testing.B, draw func(Chart) []byte) {
	c := Chart{Title: "bench", X: Axis{Time: true}}
	for i := range 4 {
		c.Series = append(c.Series, Series{Name: fmt.Sprint(i), Points: ramp(2500, 1.7e9)})
	}
	b.ReportAllocs()
	for b.Loop() {
		draw(c)
	}
}

// Benchmarks draw 10,000 points: four series of 2,500.
func BenchmarkLine(b *testing.B)        { benchmark(b, Line) }
func BenchmarkScatter(b *testing.B)     { benchmark(b, Scatter) }
func BenchmarkStackedBars(b *testing.B) { benchmark(b, StackedBars) }

func BenchmarkLineMillion(b *testing.B) {
	c := Chart{Series: []Series{{Points: ramp(1e6, 0)}}}
	b.ReportAllocs()
	for b.Loop() {
		Line(c)
	}
}
