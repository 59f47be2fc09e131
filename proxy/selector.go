package proxy

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Selector picks one backend among candidates, all available and not yet
// tried by this request. candidates is never empty.
type Selector interface {
	Select(candidates []*Backend) *Backend
}

// SelectorFunc adapts a function to Selector.
type SelectorFunc func(candidates []*Backend) *Backend

// Select calls f.
func (f SelectorFunc) Select(c []*Backend) *Backend { return f(c) }

// LeastOutstanding picks the backend with the fewest requests in flight
// relative to its weight; ties go round robin so equal backends share
// load. The zero value is ready.
type LeastOutstanding struct{ next atomic.Uint64 }

// Select implements Selector.
func (l *LeastOutstanding) Select(c []*Backend) *Backend {
	start := int(l.next.Add(1) % uint64(len(c)))
	best := c[start]
	for i := 1; i < len(c); i++ {
		b := c[(start+i)%len(c)]
		// compare outstanding/weight without division
		if b.Outstanding()*int64(best.weight) < best.Outstanding()*int64(b.weight) {
			best = b
		}
	}
	return best
}

// WeightedRoundRobin spreads requests in proportion to weight, smoothly
// (nginx's algorithm: no burst to the heaviest backend). The zero value is
// ready.
type WeightedRoundRobin struct {
	mu      sync.Mutex
	current map[*Backend]int
}

// Select implements Selector.
func (w *WeightedRoundRobin) Select(c []*Backend) *Backend {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.current == nil {
		w.current = make(map[*Backend]int)
	}
	total := 0
	var best *Backend
	for _, b := range c {
		w.current[b] += b.weight
		total += b.weight
		if best == nil || w.current[b] > w.current[best] {
			best = b
		}
	}
	w.current[best] -= total
	return best
}

// PowerOfTwo samples two candidates at random and takes the one with fewer
// outstanding requests relative to weight: near least-outstanding balance
// without every request herding to the same backend. Safe for concurrent
// use; the zero value is ready.
type PowerOfTwo struct{}

// Select implements Selector.
func (PowerOfTwo) Select(c []*Backend) *Backend {
	if len(c) == 1 {
		return c[0]
	}
	i := rand.IntN(len(c))
	j := rand.IntN(len(c) - 1)
	if j >= i {
		j++
	}
	a, b := c[i], c[j]
	if b.Outstanding()*int64(a.weight) < a.Outstanding()*int64(b.weight) {
		return b
	}
	return a
}

func newSelector(policy string) Selector {
	switch policy {
	case WeightedRoundRobinPolicy:
		return &WeightedRoundRobin{}
	case PowerOfTwoPolicy:
		return PowerOfTwo{}
	default:
		return &LeastOutstanding{}
	}
}

var (
	_ Selector = (*LeastOutstanding)(nil)
	_ Selector = (*WeightedRoundRobin)(nil)
	_ Selector = PowerOfTwo{}
	_ Selector = SelectorFunc(nil)
)
