package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/quality"
)

// Runner sends a workload's requests to a client and hands each result to
// Sink as it completes. Sink is called from many goroutines at once.
type Runner struct {
	Client   *Client
	Workload Workload
	Stream   bool
	// Count counts the tokens of a text (nil: never count).
	Count   func(string) int
	Quality *quality.Judge
	Sink    func(*Result)
	// Gaps receives the gaps between content events in batches, as they
	// happen, so a long stream holds none of them; called concurrently.
	Gaps func(stage int, warm bool, gaps []time.Duration)
	// KeepEvents keeps every content event's time in Result.Events.
	KeepEvents bool
	// Seed drives the arrival process.
	Seed uint64
	// HonorRetryAfter holds every request back after an answer with
	// Retry-After until the time it named (Config.HonorRetryAfter).
	HonorRetryAfter bool

	next atomic.Int64 // the next request index, across stages
	// nextSession is the next session's number, across stages, so a
	// sweep's stages hold conversations of their own.
	nextSession atomic.Int64
	// prime marks the requests sent as a warm pass (Config.Cache warm):
	// results with Prime set, in no figure. cycle maps the request and
	// session numbers of the measured pass after it onto those the warm
	// pass sent. Both are set between runs, never during one.
	prime          bool
	cycle, session cycle
	inFlight       atomic.Int64
	// noUsage is set once an answer came without usage although it was
	// asked for: from then on answers are kept whole, to be counted.
	noUsage atomic.Bool
	parsers sync.Pool
	// holdUntil is the unix ns before which no request is sent (the
	// latest Retry-After); held is the time it added up to, in ns.
	holdUntil, held atomic.Int64
}

// cycle maps the numbers from start on onto the n the warm pass sent,
// over and over; n 0 maps nothing.
type cycle struct{ start, n int }

func (c cycle) of(i int) int {
	if c.n > 0 && i >= c.start {
		return c.start + (i-c.start)%c.n
	}
	return i
}

// request is the workload's request for number i (after a warm pass,
// one the pass sent).
func (rn *Runner) request(i int) Request { return rn.Workload.Request(rn.cycle.of(i)) }

// Held is how long the runner has held its requests back for
// Retry-After answers, in all.
func (rn *Runner) Held() time.Duration { return time.Duration(rn.held.Load()) }

// hold extends the hold to now+d.
func (rn *Runner) hold(d time.Duration) {
	until := time.Now().Add(d).UnixNano()
	for {
		cur := rn.holdUntil.Load()
		if until <= cur {
			return
		}
		if rn.holdUntil.CompareAndSwap(cur, until) {
			rn.held.Add(until - max(cur, time.Now().UnixNano()))
			return
		}
	}
}

// waitHold waits out the hold, or until ctx ends.
func (rn *Runner) waitHold(ctx context.Context) {
	for {
		d := time.Until(time.Unix(0, rn.holdUntil.Load()))
		if d <= 0 {
			return
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// InFlight is the number of requests now in flight.
func (rn *Runner) InFlight() int64 { return rn.inFlight.Load() }

// Window is what a stage took: the first measured send to the last
// measured end, and when the load stopped being sent.
type Window struct {
	Start, Stop time.Time
}

// stage is the shared state of one stage's senders.
type stage struct {
	rn       *Runner
	l        LoadSpec
	n        int
	begin    time.Time
	warmEnd  time.Time    // time-based warm-up ends
	local    atomic.Int64 // the stage's own request count
	measured atomic.Int64 // measured requests taken
	start    atomic.Int64 // unix ns of the first measured send
	stop     atomic.Int64 // unix ns when sending stopped
	deadline atomic.Int64 // unix ns when the measured part ends (0: not yet known)
	// firstSession is the number of the stage's first session.
	firstSession int
	wg           sync.WaitGroup
}

// take decides whether the request about to be sent at now goes, and
// whether it is warm-up.
func (s *stage) take(ctx context.Context, i int, now time.Time) (ok, warm bool) {
	if ctx.Err() != nil {
		return false, false
	}
	if s.l.Mode == "replay" && i >= s.rn.Workload.Len() {
		return false, false
	}
	if d := s.deadline.Load(); d != 0 && now.UnixNano() >= d {
		return false, false
	}
	warm = i < s.l.WarmupRequests || now.Before(s.warmEnd)
	if warm {
		return true, true
	}
	if s.l.Requests > 0 && s.measured.Add(1) > int64(s.l.Requests) {
		return false, false
	}
	if s.start.CompareAndSwap(0, now.UnixNano()) && s.l.Duration > 0 {
		s.deadline.Store(now.Add(s.l.Duration).UnixNano())
	}
	return true, false
}

// Run runs one stage (l with its defaults): warm-up, then the measured
// part, then waits for the requests in flight. It returns when they are all delivered to Sink, or
// ctx ended and every request was cancelled.
func (rn *Runner) Run(ctx context.Context, stageNo int, l LoadSpec) (Window, error) {
	l.Defaults(l.Mode == "replay")
	if err := l.Validate(); err != nil {
		return Window{}, err
	}
	if l.WarmupPerUser && l.Mode == "closed" {
		l.WarmupRequests = l.Concurrency
	}
	s := &stage{rn: rn, l: l, n: stageNo, begin: time.Now(), firstSession: int(rn.nextSession.Load())}
	s.warmEnd = s.begin.Add(l.WarmupTime)
	switch l.Mode {
	case "closed":
		s.closed(ctx)
	case "sessions":
		sw, ok := rn.Workload.(sessionWorkload)
		if !ok {
			return Window{}, errors.New("bench: load mode sessions needs a session workload (--sessions)")
		}
		s.sessions(ctx, sw)
	default:
		s.open(ctx)
	}
	s.wg.Wait()
	w := Window{Start: time.Unix(0, s.start.Load()), Stop: time.Unix(0, s.stop.Load())}
	if s.start.Load() == 0 {
		w.Start = s.begin
	}
	if ctx.Err() != nil {
		return w, fmt.Errorf("bench: run interrupted: %w", context.Cause(ctx))
	}
	return w, nil
}

func (s *stage) markStop() { s.stop.CompareAndSwap(0, time.Now().UnixNano()) }

// rampWait holds user u back for its share of the ramp-up (users start
// evenly over RampUp); false when ctx ended first.
func (s *stage) rampWait(ctx context.Context, u int) bool {
	if s.l.RampUp <= 0 {
		return true
	}
	t := time.NewTimer(s.l.RampUp * time.Duration(u) / time.Duration(s.l.Concurrency))
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}

func (s *stage) closed(ctx context.Context) {
	var stopOnce sync.Once
	for u := range s.l.Concurrency {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if !s.rampWait(ctx, u) {
				return
			}
			p := s.rn.parser()
			defer s.rn.parsers.Put(p)
			for {
				k := int(s.local.Add(1) - 1)
				now := time.Now()
				ok, warm := s.take(ctx, k, now)
				if !ok {
					stopOnce.Do(s.markStop)
					return
				}
				i := int(s.rn.next.Add(1) - 1)
				s.doAt(ctx, p, i, warm, now, s.rn.request(i))
			}
		}()
	}
}

// open sends on the arrival schedule: a request whose time has come is
// started in its own goroutine, whatever the others are doing.
func (s *stage) open(ctx context.Context) {
	defer s.markStop()
	var sem chan struct{}
	if s.l.MaxConcurrency > 0 {
		sem = make(chan struct{}, s.l.MaxConcurrency)
	}
	rng := rand.New(rand.NewPCG(s.rn.Seed, uint64(s.n)+1<<32))
	t0 := time.Now()
	var offset time.Duration
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for k := 0; ; k++ {
		i := int(s.rn.next.Add(1) - 1)
		req := Request{At: -1}
		if s.l.Mode == "replay" {
			if k >= s.rn.Workload.Len() {
				return
			}
			req = s.rn.Workload.Request(k)
			offset = req.At
		} else if k > 0 {
			offset += s.gap(rng)
		}
		intended := t0.Add(offset)
		if !waitUntil(ctx, timer, intended) {
			return
		}
		ok, warm := s.take(ctx, k, intended)
		if !ok {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if sem != nil {
				select {
				case sem <- struct{}{}:
					defer func() { <-sem }()
				case <-ctx.Done():
					return
				}
			}
			p := s.rn.parser()
			defer s.rn.parsers.Put(p)
			if req.Body == nil {
				s.doAt(ctx, p, i, warm, intended, s.rn.request(i))
			} else {
				s.doAt(ctx, p, i, warm, intended, req)
			}
		}()
	}
}

// gap draws the time to the next arrival.
func (s *stage) gap(rng *rand.Rand) time.Duration {
	mean := float64(time.Second) / s.l.Rate
	switch s.l.Arrival {
	case "constant":
		return time.Duration(mean)
	case "gamma":
		return time.Duration(gamma(rng, s.l.Burstiness) * mean / s.l.Burstiness)
	}
	return time.Duration(rng.ExpFloat64() * mean)
}

// gamma draws from Gamma(shape, 1) (Marsaglia and Tsang; boosted below 1).
func gamma(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		return gamma(rng, shape+1) * math.Pow(rng.Float64(), 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if math.Log(u) < 0.5*x*x+d-d*v+d*math.Log(v) {
			return d * v
		}
	}
}

// doAt sends req (request i) and delivers its result.
func (s *stage) doAt(ctx context.Context, p *parser, i int, warm bool, intended time.Time, req Request) {
	s.doWith(ctx, p, i, warm, intended, req, nil, false)
}

// doWith is doAt with the whole text kept when keep is set, and note
// called on the result before it is delivered.
func (s *stage) doWith(ctx context.Context, p *parser, i int, warm bool, intended time.Time, req Request, note func(*Result), keep bool) {
	rn := s.rn
	rn.inFlight.Add(1)
	defer rn.inFlight.Add(-1)
	r := &Result{Index: i, Stage: s.n, Warmup: warm || rn.prime, Prime: rn.prime, Intended: intended, InputTokens: req.InputTokens, MaxTokens: req.MaxTokens, Ask: req.Ask, Class: req.Class}
	if rn.HonorRetryAfter {
		// Outside the request's own timeout: the hold is not its time.
		rn.waitHold(ctx)
	}
	rctx, cancel := context.WithTimeoutCause(ctx, s.l.Timeout, errRequestTimeout)
	// The text is kept whole only where it is needed: to count tokens
	// once the server has shown it does not report usage (every request
	// asks for it), for the sampled usage check, and to check JSON.
	// Refusal patterns see its head.
	p.keepAll = keep || rn.noUsage.Load() || !rn.Stream || checkUsage(i) || req.Ask.JSON
	p.keepEvents = rn.KeepEvents
	p.flushGaps = func(g []time.Duration) {
		if rn.Gaps != nil {
			rn.Gaps(s.n, warm, g)
		}
	}
	rn.Client.do(rctx, req.Body, req.Header, rn.Stream, p, r)
	cancel()
	if rn.HonorRetryAfter && r.RetryAfter > 0 {
		rn.hold(r.RetryAfter)
	}
	if r.OK() && r.UsageTokens < 0 {
		rn.noUsage.Store(true)
	}
	if note != nil {
		note(r)
	}
	rn.Sink(r)
}

func (rn *Runner) parser() *parser {
	if p, ok := rn.parsers.Get().(*parser); ok {
		return p
	}
	return newParser(rn.Count, rn.Quality)
}

// spinBefore is how long before a send's time the scheduler stops
// sleeping and yields until it is due: a Go timer fires up to a
// millisecond late (the poller's wait rounds to milliseconds), which
// would be most of an open loop's send lag.
const spinBefore = 1500 * time.Microsecond

// waitUntil waits for at: a timer to just before it, then yielding the
// processor until it comes. It reports false when ctx ended first.
func waitUntil(ctx context.Context, timer *time.Timer, at time.Time) bool {
	if d := time.Until(at) - spinBefore; d > 0 {
		timer.Reset(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			return false
		}
	}
	for time.Now().Before(at) {
		if ctx.Err() != nil {
			return false
		}
		runtime.Gosched()
	}
	return true
}
