package chart

import (
	"math"
	"strconv"
	"time"
)

// scale maps data values to pixels along one axis, and holds its ticks.
type scale struct {
	lo, hi float64 // domain; in log10 units on a log scale; lo < hi
	log    bool
	p0, p1 float64 // pixels that lo and hi map to
	ticks  []float64
	labels []string
}

func (s *scale) px(v float64) float64 {
	if s.log {
		v = math.Log10(v)
	}
	return s.p0 + (v-s.lo)/(s.hi-s.lo)*(s.p1-s.p0)
}

// timeSteps are the tick steps of a time axis, in seconds, up to a week;
// longer ones are whole days.
var timeSteps = []float64{
	1, 2, 5, 10, 15, 30,
	60, 2 * 60, 5 * 60, 10 * 60, 15 * 60, 30 * 60,
	3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600,
	86400, 2 * 86400, 7 * 86400,
}

// newScale returns the scale of an axis shown as a (on a log scale if log)
// for data from lo to hi, with about n ticks. With extend it widens the
// domain to whole ticks; without, the domain is the data's and ticks fall
// inside it. lo > hi, or NaN, means no data: the scale has no ticks.
func newScale(a Axis, log bool, lo, hi float64, extend bool, n int) scale {
	s := scale{log: log, lo: 0, hi: 1}
	if !(lo <= hi) {
		return s
	}
	if log {
		lo, hi = math.Log10(lo), math.Log10(hi)
	}
	lo, hi = pad(lo, hi, log, a.Time)
	var step float64
	switch {
	case log:
		lo, hi, s.ticks = logTicks(lo, hi, n, extend)
	case a.Time:
		step = timeStep((hi - lo) / float64(n))
		lo, hi, s.ticks = stepTicks(lo, hi, step, extend)
	default:
		step = niceStep((hi - lo) / float64(n))
		lo, hi, s.ticks = stepTicks(lo, hi, step, extend)
	}
	s.lo, s.hi = lo, hi
	top := math.Max(math.Abs(lo), math.Abs(hi))
	for _, t := range s.ticks {
		switch {
		case log:
			s.labels = append(s.labels, formatValue(t))
		case a.Time:
			s.labels = append(s.labels, formatTime(t, step))
		default:
			s.labels = append(s.labels, formatTick(t, step, top))
		}
	}
	return s
}

// pad widens a range too narrow to show: one value, or values that differ
// only past float64's precision.
func pad(lo, hi float64, log, isTime bool) (float64, float64) {
	if hi-lo > 1e-9*math.Max(math.Abs(lo), math.Abs(hi)) {
		return lo, hi
	}
	mid := lo + (hi-lo)/2
	d := math.Abs(mid) / 10
	switch {
	case log:
		d = 0.5 // decades
	case isTime:
		d = 60
	case d == 0:
		d = 1
	}
	return mid - d, mid + d
}

// niceStep returns the smallest 1, 2 or 5 × 10^k that is at least raw.
func niceStep(raw float64) float64 {
	if !(raw > 0) || math.IsInf(raw, 0) {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw*(1-1e-9) {
			return m * mag
		}
	}
	return 10 * mag
}

// timeStep returns the smallest step of timeSteps that is at least raw
// seconds, or a nice number of days past them.
func timeStep(raw float64) float64 {
	for _, s := range timeSteps {
		if s >= raw*(1-1e-9) {
			return s
		}
	}
	return niceStep(raw/86400) * 86400
}

// maxTicks bounds the ticks of any axis, whatever rounding does.
const maxTicks = 20

// stepTicks returns the multiples of step within lo..hi, widening lo..hi to
// whole steps first if extend.
func stepTicks(lo, hi, step float64, extend bool) (float64, float64, []float64) {
	if extend {
		lo, hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
	}
	var ticks []float64
	first := math.Ceil(lo/step - 1e-9)
	for k := range maxTicks {
		v := (first + float64(k)) * step
		if v > hi+step*1e-9 {
			break
		}
		ticks = append(ticks, v)
	}
	return lo, hi, ticks
}

// logTicks returns about n ticks for the log10 domain lo..hi: 1, 2 and 5 ×
// 10^k when there are few decades, else every decade or every few.
// Ticks are values, not logarithms.
func logTicks(lo, hi float64, n int, extend bool) (float64, float64, []float64) {
	if extend {
		lo, hi = math.Floor(lo), math.Ceil(hi)
	}
	const eps = 1e-9
	var ticks []float64
	if 3*(math.Ceil(hi)-math.Floor(lo))+1 <= float64(n+2) {
		for d := math.Floor(lo); d <= math.Ceil(hi); d++ {
			for _, m := range []float64{1, 2, 5} {
				if l := d + math.Log10(m); l >= lo-eps && l <= hi+eps {
					ticks = append(ticks, m*math.Pow(10, d))
				}
			}
		}
		return lo, hi, ticks
	}
	step := math.Ceil((hi - lo) / float64(n))
	if extend {
		lo, hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
	}
	first := math.Ceil(lo/step-eps) * step
	for k := range maxTicks {
		d := first + float64(k)*step
		if d > hi+eps {
			break
		}
		ticks = append(ticks, math.Pow(10, d))
	}
	return lo, hi, ticks
}

// formatTick formats v, a multiple of step on an axis whose values reach
// top in magnitude, with as many decimals as step needs, in thousands (k),
// millions (M), billions (G) or trillions (T) where that is shorter.
func formatTick(v, step, top float64) string {
	if v == 0 {
		return "0" // and never "-0"
	}
	if top >= 1e15 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	div, suffix := 1.0, ""
	for _, u := range []struct {
		from, div float64
		suffix    string
	}{{1e12, 1e12, "T"}, {1e9, 1e9, "G"}, {1e6, 1e6, "M"}, {1e4, 1e3, "k"}} {
		if top >= u.from && step >= u.div/10 {
			div, suffix = u.div, u.suffix
			break
		}
	}
	dec := 0
	if s := step / div; s < 1 {
		dec = int(math.Ceil(-math.Log10(s) - 1e-9))
	}
	if dec > 6 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(v/div, 'f', dec, 64) + suffix
}

// formatValue formats v to three significant digits, in thousands (k),
// millions (M), billions (G) or trillions (T) from 10,000 up.
func formatValue(v float64) string {
	a := math.Abs(v)
	div, suffix := 1.0, ""
	switch {
	case v == 0:
		return "0"
	case a >= 1e15 || a < 1e-3:
		return strconv.FormatFloat(v, 'g', 3, 64)
	case a >= 1e12:
		div, suffix = 1e12, "T"
	case a >= 1e9:
		div, suffix = 1e9, "G"
	case a >= 1e6:
		div, suffix = 1e6, "M"
	case a >= 1e4:
		div, suffix = 1e3, "k"
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v/div, 'g', 3, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64) + suffix
}

// unixTime is v Unix seconds, or false if v is too far from now to be one.
func unixTime(v float64) (time.Time, bool) {
	if math.Abs(v) > 1e11 {
		return time.Time{}, false
	}
	sec := math.Floor(v)
	return time.Unix(int64(sec), int64((v-sec)*1e9)).UTC(), true
}

// formatTime formats a tick of a time axis whose ticks are step seconds
// apart.
func formatTime(v, step float64) string {
	t, ok := unixTime(v)
	switch {
	case !ok:
		return formatValue(v)
	case step < 60:
		return t.Format("15:04:05")
	case step < 86400:
		return t.Format("15:04")
	}
	return t.Format("Jan 2")
}

// formatData formats a data value of an axis shown as a, for the
// description.
func formatData(v float64, a Axis) string {
	if a.Time {
		if t, ok := unixTime(v); ok {
			return t.Format("2006-01-02 15:04:05 UTC")
		}
	}
	s := formatValue(v)
	if u := clip(a.Unit, maxUnitRunes); u != "" {
		s += " " + u
	}
	return s
}
