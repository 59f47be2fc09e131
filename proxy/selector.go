package proxy

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// selector picks one backend among candidates, all available and not yet
// tried by this request. candidates is never empty.
type selector interface {
	Select(candidates []*backend) *backend
}

// leastOutstanding picks the backend with the fewest requests in flight
// relative to its weight; ties go round robin so equal backends share
// load. The zero value is ready.
type leastOutstanding struct{ next atomic.Uint64 }

// Select implements selector.
func (l *leastOutstanding) Select(c []*backend) *backend {
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

// weightedRoundRobin spreads requests in proportion to weight, smoothly
// (nginx's algorithm: no burst to the heaviest backend). The zero value is
// ready.
type weightedRoundRobin struct {
	mu      sync.Mutex
	current map[*backend]int
}

// Select implements selector.
func (w *weightedRoundRobin) Select(c []*backend) *backend {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.current == nil {
		w.current = make(map[*backend]int)
	}
	total := 0
	var best *backend
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

// powerOfTwo samples two candidates at random and takes the one with fewer
// outstanding requests relative to weight: near least-outstanding balance
// without every request herding to the same backend. Safe for concurrent
// use; the zero value is ready.
type powerOfTwo struct{}

// Select implements selector.
func (powerOfTwo) Select(c []*backend) *backend {
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

func newSelector(policy string) selector {
	switch policy {
	case WeightedRoundRobinPolicy:
		return &weightedRoundRobin{}
	case PowerOfTwoPolicy:
		return powerOfTwo{}
	default:
		return &leastOutstanding{}
	}
}

var (
	_ selector = (*leastOutstanding)(nil)
	_ selector = (*weightedRoundRobin)(nil)
	_ selector = powerOfTwo{}
)
