package chart

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
)

// data is what a chart draws, after bounds and cleaning.
type data struct {
	names  []string // of the drawn series
	counts []int    // usable points of each drawn series
	drawn  int      // points (or bars' segments) drawn
	// Extents of the usable data; lo > hi when there is none.
	xlo, xhi, ylo, yhi float64
	xExtend            bool    // widen the X domain to whole ticks
	xPad               float64 // widen the X domain by this on each side
	notes              []string

	lines [][]Point // Line: each series in X order, NaN Y breaks
	dots  [][]Point // Scatter
	bars  *bars     // StackedBars
}

// bars holds a StackedBars chart: sums[i][j] is series i at centers[j].
type bars struct {
	centers []float64
	width   float64 // of a bar's slot, in X units
	sums    [][]float64
}

func newData() *data {
	return &data{xlo: math.Inf(1), xhi: math.Inf(-1), ylo: math.Inf(1), yhi: math.Inf(-1)}
}

func (d *data) add(p Point) {
	d.xlo, d.xhi = min(d.xlo, p.X), max(d.xhi, p.X)
	d.ylo, d.yhi = min(d.ylo, p.Y), max(d.yhi, p.Y)
}

// name returns series i's name as shown.
func name(s Series, i int) string {
	if n := clipMiddle(s.Name, maxNameRunes); n != "" {
		return n
	}
	return "Series " + strconv.Itoa(i+1)
}

// dropSeries keeps the first MaxSeries series and notes how many it drops.
func (d *data) dropSeries(ss []Series) []Series {
	if len(ss) <= MaxSeries {
		return ss
	}
	d.notes = append(d.notes, fmt.Sprintf("%d more series not shown.", len(ss)-MaxSeries))
	return ss[:MaxSeries]
}

func (d *data) noteSkipped(n int, log bool) {
	if n == 0 {
		return
	}
	why := "NaN or infinite"
	if log {
		why = "NaN, infinite or not positive on a log scale"
	}
	d.notes = append(d.notes, fmt.Sprintf("%d points skipped (%s).", n, why))
}

func (d *data) noteDownsampled(total int) {
	if d.drawn < total {
		d.notes = append(d.notes, fmt.Sprintf("Downsampled: %d of %d points drawn.", d.drawn, total))
	}
}

func prepareLine(c Chart, xlog, ylog bool) *data {
	d := newData()
	ss := d.dropSeries(c.Series)
	skipped, total := 0, 0
	for i, s := range ss {
		pts := make([]Point, 0, len(s.Points))
		n := 0
		for _, p := range s.Points {
			switch {
			case !usable(p.X, xlog):
				skipped++
			case math.IsNaN(p.Y):
				pts = append(pts, Point{X: p.X, Y: p.Y})
			case !usable(p.Y, ylog):
				skipped++
			default:
				pts = append(pts, p)
				d.add(p)
				n++
			}
		}
		byX := func(a, b Point) int { return cmp.Compare(a.X, b.X) }
		if !slices.IsSortedFunc(pts, byX) {
			slices.SortStableFunc(pts, byX)
		}
		d.names = append(d.names, name(s, i))
		d.counts = append(d.counts, n)
		d.lines = append(d.lines, pts)
		total += n
	}
	for i, b := range share(d.counts, MaxPoints) {
		if d.counts[i] > b {
			d.lines[i] = minMax(d.lines[i], b)
		}
		for _, p := range d.lines[i] {
			if !isGap(p) {
				d.drawn++
			}
		}
	}
	d.noteSkipped(skipped, xlog || ylog)
	d.noteDownsampled(total)
	return d
}

func prepareScatter(c Chart, xlog, ylog bool) *data {
	d := newData()
	d.xExtend = true
	ss := d.dropSeries(c.Series)
	ok := func(p Point) bool { return usable(p.X, xlog) && usable(p.Y, ylog) }
	skipped, total := 0, 0
	for i, s := range ss {
		n := 0
		for _, p := range s.Points {
			if ok(p) {
				d.add(p)
				n++
			}
		}
		skipped += len(s.Points) - n
		total += n
		d.names = append(d.names, name(s, i))
		d.counts = append(d.counts, n)
	}
	for i, b := range share(d.counts, MaxPoints) {
		dots := stride(ss[i].Points, ok, d.counts[i], b)
		d.dots = append(d.dots, dots)
		d.drawn += len(dots)
	}
	d.noteSkipped(skipped, xlog || ylog)
	d.noteDownsampled(total)
	return d
}

func prepareBars(c Chart) *data {
	d := newData()
	ss := c.Series
	if len(ss) > MaxSeries {
		// Sums stay true when the smallest layers are lumped together.
		other := Series{Name: "other"}
		for _, s := range ss[MaxSeries-1:] {
			other.Points = append(other.Points, s.Points...)
		}
		d.notes = append(d.notes, fmt.Sprintf("%d series added up as other.", len(ss)-MaxSeries+1))
		ss = append(ss[:MaxSeries-1:MaxSeries-1], other)
	}
	ok := func(p Point) bool { return usable(p.X, false) && usable(p.Y, false) }
	var xs []float64
	skipped := 0
	for i, s := range ss {
		n := 0
		for _, p := range s.Points {
			if ok(p) {
				xs = append(xs, p.X)
				n++
			}
		}
		skipped += len(s.Points) - n
		d.names = append(d.names, name(s, i))
		d.counts = append(d.counts, n)
	}
	d.noteSkipped(skipped, false)
	if len(xs) == 0 {
		return d
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)

	b := &bars{sums: make([][]float64, len(ss))}
	var slot func(x float64) int
	if len(xs) <= MaxBars {
		b.centers = xs
		b.width = math.Inf(1)
		for j := 1; j < len(xs); j++ {
			b.width = min(b.width, xs[j]-xs[j-1])
		}
		if len(xs) == 1 {
			b.width = max(1, math.Abs(xs[0])/1e3) // wide enough not to look like one value
			if c.X.Time {
				b.width = 60
			}
		}
		d.xPad = b.width / 2
		slot = func(x float64) int { return sort.SearchFloat64s(xs, x) }
	} else {
		lo, hi := xs[0], xs[len(xs)-1]
		b.width = (hi - lo) / MaxBars
		for j := range MaxBars {
			b.centers = append(b.centers, lo+(float64(j)+0.5)*b.width)
		}
		slot = func(x float64) int { return min(max(int((x-lo)/b.width), 0), MaxBars-1) }
		d.notes = append(d.notes, fmt.Sprintf(
			"%d distinct X values summed into %d bars of equal X width.", len(xs), MaxBars))
	}
	for i, s := range ss {
		b.sums[i] = make([]float64, len(b.centers))
		for _, p := range s.Points {
			if ok(p) {
				b.sums[i][slot(p.X)] += p.Y
			}
		}
	}
	d.bars = b
	d.xlo, d.xhi = xs[0], xs[len(xs)-1]
	d.ylo, d.yhi = 0, 0
	for j := range b.centers {
		pos, neg := 0.0, 0.0
		for i := range b.sums {
			if v := b.sums[i][j]; v > 0 {
				pos += v
				d.drawn++
			} else if v < 0 {
				neg += v
				d.drawn++
			}
		}
		d.ylo, d.yhi = min(d.ylo, neg), max(d.yhi, pos)
	}
	if d.ylo == 0 && d.yhi == 0 {
		d.yhi = 1
	}
	return d
}
