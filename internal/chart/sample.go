package chart

import (
	"cmp"
	"math"
	"slices"
)

// share splits budget among series of counts points: each gets its fair
// share or all its points if fewer, and what a small series leaves over goes
// to the larger ones. The shares add up to at most budget.
func share(counts []int, budget int) []int {
	order := make([]int, len(counts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(counts[a], counts[b]) })
	out := make([]int, len(counts))
	left := budget
	for k, i := range order {
		out[i] = min(counts[i], left/(len(order)-k))
		left -= out[i]
	}
	return out
}

// gap marks a break in a line.
var gap = Point{Y: math.NaN()}

func isGap(p Point) bool { return math.IsNaN(p.Y) }

// minMax thins pts, in X order with NaN Y marking breaks, to at most budget
// points: it cuts X into budget/2 equal slices and keeps the lowest and the
// highest point of each, in X order, so peaks and dips survive. A break
// within a slice moves to the slice's edge.
func minMax(pts []Point, budget int) []Point {
	n := max(budget/2, 1)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		if !isGap(p) {
			lo, hi = min(lo, p.X), max(hi, p.X)
		}
	}
	if lo > hi {
		return nil
	}
	width := (hi - lo) / float64(n)
	slice := func(x float64) int {
		if width == 0 {
			return 0
		}
		return min(max(int((x-lo)/width), 0), n-1)
	}

	out := make([]Point, 0, 2*n+2)
	var (
		cur                 = -1
		have                bool
		low, high           Point
		gapBefore, gapAfter bool
	)
	flush := func() {
		if gapBefore && len(out) > 0 && !isGap(out[len(out)-1]) {
			out = append(out, gap)
		}
		if have {
			a, b := low, high
			if b.X < a.X {
				a, b = b, a
			}
			out = append(out, a)
			if b != a {
				out = append(out, b)
			}
		}
		if gapAfter && len(out) > 0 && !isGap(out[len(out)-1]) {
			out = append(out, gap)
		}
		have, gapBefore, gapAfter = false, false, false
	}
	for _, p := range pts {
		if s := slice(p.X); s != cur {
			flush()
			cur = s
		}
		switch {
		case isGap(p) && have:
			gapAfter = true
		case isGap(p):
			gapBefore = true
		case !have:
			low, high, have = p, p, true
		case p.Y < low.Y:
			low = p
		case p.Y > high.Y:
			high = p
		}
	}
	flush()
	return out
}

// stride keeps at most budget of the n points that keep reports as usable:
// every (n/budget)-th one, and also those with the least and greatest X and
// Y, so outliers stay visible.
func stride(pts []Point, usable func(Point) bool, n, budget int) []Point {
	if n <= budget {
		out := make([]Point, 0, n)
		for _, p := range pts {
			if usable(p) {
				out = append(out, p)
			}
		}
		return out
	}
	// Find the extremes first: their indexes among the usable points.
	var ext [4]int
	var minX, maxX, minY, maxY Point
	v := 0
	for _, p := range pts {
		if !usable(p) {
			continue
		}
		if v == 0 || p.X < minX.X {
			minX, ext[0] = p, v
		}
		if v == 0 || p.X > maxX.X {
			maxX, ext[1] = p, v
		}
		if v == 0 || p.Y < minY.Y {
			minY, ext[2] = p, v
		}
		if v == 0 || p.Y > maxY.Y {
			maxY, ext[3] = p, v
		}
		v++
	}
	every := max(budget-len(ext), 1)
	out := make([]Point, 0, budget)
	v, k, next := 0, 0, 0
	for _, p := range pts {
		if !usable(p) {
			continue
		}
		if v == next || slices.Contains(ext[:], v) {
			out = append(out, p)
		}
		if v == next {
			k++
			next = int(int64(k) * int64(n) / int64(every))
		}
		v++
	}
	return out
}
