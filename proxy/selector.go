package proxy

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/affinity"
)

// selector is a selection policy: it picks one backend among a pick's
// candidates (caddy's reverseproxy.Selector). pool.pick gathers the
// candidates, asks the selector, and asks again without the one whose
// breaker refused; a new policy is one type implementing selector, named
// in newSelector.
type selector interface {
	// Select returns the position in s.cands of the backend to try, and
	// why it was chosen. s.cands is never empty.
	Select(s *pick) (int, reason)
}

// A placer is a selector told where a pick's breaker let the request
// through, and why it was chosen: the prefix index records which backend
// the prompt went to.
type placer interface {
	placed(s *pick, c int, why reason)
}

// newSelector returns the selector of a pool's selection policy
// (validated before: an unknown name is least_outstanding).
func newSelector(name string, pc PoolConfig) selector {
	switch pc.Selection {
	case WeightedRoundRobinPolicy:
		return &weightedRoundRobin{}
	case PowerOfTwoPolicy:
		return powerOfTwo{}
	case LoadPolicy:
		return &loadSelector{cfg: pc.Load}
	case PrefixPolicy:
		return newPrefixSelector(name, pc)
	default:
		return &leastOutstanding{}
	}
}

// A pick is one request's choice of a backend: the candidates (available,
// not yet tried by this request) and what a selector may read of the
// request. Pooled: a selector is an interface, so a pick on pool.pick's
// stack would escape to the heap on every request.
type pick struct {
	cands []*backend
	pos   []int         // each candidate's position in the pool (its number in the prefix index)
	key   *affinity.Key // the request's prefix; nil: none
	now   time.Time
	// Working memory of selection load and prefix: the candidates'
	// estimates, the prefix blocks each backend holds, and those of the
	// chosen one.
	est     []loadEstimate
	matched [affinity.MaxBackends]int
	blocks  int
}

var pickPool = sync.Pool{New: func() any {
	return &pick{cands: make([]*backend, 0, 16), pos: make([]int, 0, 16), est: make([]loadEstimate, 0, 16)}
}}

// drop removes candidate c (its breaker refused).
func (s *pick) drop(c int) {
	s.cands = append(s.cands[:c], s.cands[c+1:]...)
	s.pos = append(s.pos[:c], s.pos[c+1:]...)
}

// release returns s to the pool holding no backend or key.
func (s *pick) release() {
	clear(s.cands)
	s.cands, s.pos, s.key = s.cands[:0], s.pos[:0], nil
	pickPool.Put(s)
}

// leastOutstanding picks the backend with the fewest requests in flight
// relative to its weight; ties go round robin so equal backends share
// load. The zero value is ready.
type leastOutstanding struct{ next atomic.Uint64 }

// Select implements selector.
func (l *leastOutstanding) Select(s *pick) (int, reason) {
	c := s.cands
	if len(c) == 1 {
		return 0, reasonLeast
	}
	start := int(l.next.Add(1) % uint64(len(c)))
	best := start
	for i := 1; i < len(c); i++ {
		j := (start + i) % len(c)
		// compare outstanding/weight without division
		if c[j].Outstanding()*int64(c[best].weight) < c[best].Outstanding()*int64(c[j].weight) {
			best = j
		}
	}
	return best, reasonLeast
}

// weightedRoundRobin spreads requests in proportion to weight, smoothly
// (nginx's algorithm: no burst to the heaviest backend). The zero value is
// ready.
type weightedRoundRobin struct {
	mu      sync.Mutex
	current map[*backend]int
}

// Select implements selector.
func (w *weightedRoundRobin) Select(s *pick) (int, reason) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.current == nil {
		w.current = make(map[*backend]int)
	}
	total, best := 0, -1
	for i, b := range s.cands {
		w.current[b] += b.weight
		total += b.weight
		if best < 0 || w.current[b] > w.current[s.cands[best]] {
			best = i
		}
	}
	w.current[s.cands[best]] -= total
	return best, reasonWeighted
}

// powerOfTwo samples two candidates at random and takes the one with fewer
// outstanding requests relative to weight: near least-outstanding balance
// without every request herding to the same backend. Safe for concurrent
// use; the zero value is ready.
type powerOfTwo struct{}

// Select implements selector.
func (powerOfTwo) Select(s *pick) (int, reason) {
	c := s.cands
	if len(c) == 1 {
		return 0, reasonPowerOfTwo
	}
	i := rand.IntN(len(c))
	j := rand.IntN(len(c) - 1)
	if j >= i {
		j++
	}
	if c[j].Outstanding()*int64(c[i].weight) < c[i].Outstanding()*int64(c[j].weight) {
		return j, reasonPowerOfTwo
	}
	return i, reasonPowerOfTwo
}

var (
	_ selector = (*leastOutstanding)(nil)
	_ selector = (*weightedRoundRobin)(nil)
	_ selector = powerOfTwo{}
	_ selector = (*loadSelector)(nil)
	_ selector = (*prefixSelector)(nil)
	_ placer   = (*prefixSelector)(nil)
)

// A reason says why a pick chose its backend: counted per backend, and
// for selection load and prefix on the request's span and log line.
type reason uint8

const (
	reasonLeast reason = iota
	reasonWeighted
	reasonPowerOfTwo
	reasonLoad
	reasonWarm           // the backend expected to hold the longest prefix
	reasonCold           // no backend holds any of it: the least loaded
	reasonSpillQueue     // the warm backend queues requests
	reasonSpillKV        // the warm backend's KV cache is near full
	reasonSpillImbalance // the warm backend carries far more than the least loaded
	reasonSessionSticky  // the backend that served the request's session last
	reasonSessionMoved   // the session's backend is saturated or out of selection: moved, and stays
	reasonSessionNew     // a session the table does not know: placed by its key's hash
	numReasons
)

var reasonNames = [numReasons]string{LeastOutstandingPolicy, WeightedRoundRobinPolicy, PowerOfTwoPolicy,
	"load", "prefix_warm", "prefix_cold", "prefix_spill_queue", "prefix_spill_kv", "prefix_spill_imbalance",
	"session_sticky", "session_moved", "session_new"}

func (r reason) String() string { return reasonNames[r] }

// traced is r as the request's span and log line carry it: the policies
// that need nothing of the request leave it out.
func (r reason) traced() string {
	if r < reasonLoad {
		return ""
	}
	return reasonNames[r]
}

// routes is b's picks by reason, those with any.
func (b *backend) routes() map[string]int64 {
	out := map[string]int64{}
	for r := range numReasons {
		if n := b.reasons[r].Load(); n > 0 {
			out[r.String()] = n
		}
	}
	return out
}
