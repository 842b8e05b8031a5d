package bench

import (
	"math"
	"slices"
	"time"
)

// Stats summarises a set of durations.
type Stats struct {
	N                     int
	Median, P90, Min, Max time.Duration
}

// Summarize returns the order statistics of d (which it does not modify).
// The median of an even count is the mean of the two middle values; P90 is
// the nearest-rank 90th percentile, a value that was actually observed.
func Summarize(d []time.Duration) Stats {
	if len(d) == 0 {
		return Stats{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	rank := int(math.Ceil(0.9 * float64(n)))
	return Stats{N: n, Median: med, P90: s[rank-1], Min: s[0], Max: s[n-1]}
}

// ms is a duration in milliseconds with microsecond resolution.
func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// ratio is a/b rounded to two decimals, or nil when b is not a measurement.
func ratio(a, b float64) *float64 {
	if a <= 0 || b <= 0 {
		return nil
	}
	r := math.Round(a/b*100) / 100
	return &r
}

// Percentile is the nearest-rank p-th percentile of d (0 < p <= 100), a
// value that was actually observed; 0 for no samples.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}
