package verdict

import (
	"slices"

	"github.com/infergate/infergate/internal/quantile"
)

// medians takes the medians of bootstrap resamples of xs without building
// them: xs is sorted once, a resample is a count per sorted position, and
// its median is the value where the running count passes the middle rank.
// Counting a draw and one scan cost a fraction of copying the draw and
// selecting from it, and the draws (and so the intervals) are the same.
type medians struct {
	sorted []float64
	rank   []int32 // rank[i] is xs[i]'s position in sorted
	counts []int32
	mid    int // the nearest-rank median's 0-based rank
}

func newMedians(xs []float64) *medians {
	order := make([]int32, len(xs))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(p, q int32) int { return cmpFloat(xs[p], xs[q]) })
	m := &medians{
		sorted: make([]float64, len(xs)),
		rank:   make([]int32, len(xs)),
		counts: make([]int32, len(xs)),
		mid:    quantile.Index(len(xs), 0.5),
	}
	for pos, i := range order {
		m.sorted[pos] = xs[i]
		m.rank[i] = int32(pos)
	}
	return m
}

// draw adds xs[i] to the current resample.
func (m *medians) draw(i int) { m.counts[m.rank[i]]++ }

// median returns the current resample's median and starts the next one.
func (m *medians) median() float64 {
	seen, med := 0, m.sorted[len(m.sorted)-1]
	for pos, c := range m.counts {
		if seen += int(c); seen > m.mid {
			med = m.sorted[pos]
			break
		}
	}
	clear(m.counts)
	return med
}
