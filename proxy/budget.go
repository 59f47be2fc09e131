package proxy

import (
	"sync"
	"time"
)

// retryBudget caps retries at a share of requests, plus a floor per
// second, so a failing backend cannot multiply the load on the others
// (the approach of Finagle's and Linkerd's retry budgets). Safe for
// concurrent use.
type retryBudget struct {
	mu        sync.Mutex
	ratio     float64
	minPerSec float64
	tokens    float64
	cap       float64
	last      time.Time
}

func newRetryBudget(ratio, minPerSec float64) *retryBudget {
	c := max(10, 10*minPerSec)
	return &retryBudget{ratio: ratio, minPerSec: minPerSec, tokens: c, cap: c}
}

// request deposits one request's share.
func (b *retryBudget) request(now time.Time) {
	b.mu.Lock()
	b.refill(now)
	b.tokens = min(b.cap, b.tokens+b.ratio)
	b.mu.Unlock()
}

// retry takes a retry from the budget, reporting whether one was left.
func (b *retryBudget) retry(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (b *retryBudget) refill(now time.Time) {
	if !b.last.IsZero() {
		b.tokens = min(b.cap, b.tokens+now.Sub(b.last).Seconds()*b.minPerSec)
	}
	b.last = now
}
