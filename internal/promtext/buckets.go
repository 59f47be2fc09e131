package promtext

import (
	"math"
	"slices"
	"sort"
)

// Bucket is one cumulative histogram bucket: the observations at most Le.
type Bucket struct {
	Le    float64
	Count float64
}

// maxLabelValues bounds what LabelValues returns: a label is read to lay
// out rows, and an exposition with more values than this is not one a
// screen shows.
const maxLabelValues = 64

// Buckets is the cumulative buckets of the histogram's series whose
// labels match where, summed bound by bound, in order of bound; nil when
// none match.
func (s *Scrape) Buckets(name string, where ...[2]string) []Bucket {
	by := map[float64]float64{}
	for _, m := range s.metrics(name) {
		if m.Histogram == nil || !labelIs(m, where) {
			continue
		}
		for _, b := range m.Histogram.Bucket {
			if le := b.GetUpperBound(); !math.IsNaN(le) {
				by[le] += float64(b.GetCumulativeCount())
			}
		}
		// The +Inf bucket is implied by the count when not written.
		bs := m.Histogram.Bucket
		if len(bs) == 0 || !math.IsInf(bs[len(bs)-1].GetUpperBound(), 1) {
			by[math.Inf(1)] += float64(m.Histogram.GetSampleCount())
		}
	}
	if len(by) == 0 {
		return nil
	}
	out := make([]Bucket, 0, len(by))
	for le, c := range by {
		out = append(out, Bucket{le, c})
	}
	slices.SortFunc(out, func(a, b Bucket) int {
		switch {
		case a.Le < b.Le:
			return -1
		case a.Le > b.Le:
			return 1
		}
		return 0
	})
	return out
}

// Delta is the buckets observed between before and now (the same
// histogram read twice): now less before, bound by bound. A counter that
// went down (the process restarted) gives now whole.
func Delta(now, before []Bucket) []Bucket {
	if len(before) != len(now) {
		return now
	}
	out := make([]Bucket, len(now))
	for i := range now {
		if now[i].Le != before[i].Le || now[i].Count < before[i].Count {
			return now
		}
		out[i] = Bucket{now[i].Le, now[i].Count - before[i].Count}
	}
	return out
}

// Quantile estimates the q-quantile (0 < q < 1) of cumulative buckets as
// Prometheus' histogram_quantile does: linear within the bucket it falls
// in, the highest finite bound when it falls in the +Inf one. False with
// no observations.
func Quantile(b []Bucket, q float64) (float64, bool) {
	if len(b) == 0 || q <= 0 || q >= 1 || math.IsNaN(q) {
		return 0, false
	}
	total := b[len(b)-1].Count
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	i := sort.Search(len(b), func(i int) bool { return b[i].Count >= rank })
	if i == len(b) {
		i = len(b) - 1
	}
	if math.IsInf(b[i].Le, 1) {
		if i == 0 {
			return 0, false
		}
		return b[i-1].Le, true
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = b[i-1].Le, b[i-1].Count
	} else if b[i].Le < 0 {
		lo = b[i].Le
	}
	in := b[i].Count - below
	if in <= 0 {
		return b[i].Le, true
	}
	return lo + (b[i].Le-lo)*(rank-below)/in, true
}

// LabelValues is the distinct values of label over the metric's series,
// sorted, at most maxLabelValues of them.
func (s *Scrape) LabelValues(name, label string) []string {
	seen := map[string]bool{}
	for _, m := range s.metrics(name) {
		for _, l := range m.Label {
			if l.GetName() == label && !seen[l.GetValue()] && len(seen) < maxLabelValues {
				seen[l.GetValue()] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
