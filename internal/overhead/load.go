package overhead

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/infergate/infergate/bench"
)

// Target is one fixed request sent again and again, as the overhead
// harness does.
type Target struct {
	// Body is the JSON request body.
	Body []byte
	// Stream reads the answer as server-sent events.
	Stream bool
}

// Options shape a closed-loop round: Concurrency users, each sending its
// next request when the previous one ends, until Duration or MaxRequests.
type Options struct {
	Concurrency int
	Duration    time.Duration
	// MaxRequests stops the round after this many requests; 0 is no limit.
	MaxRequests int
	// RampUp spreads the users' first requests evenly over this span, so
	// a closed loop does not send its whole concurrency in one burst.
	RampUp time.Duration
	// Samples keeps every TTFT and gap as measured (Stats.TTFTs,
	// Stats.Gaps), for exact percentiles: the distributions' buckets are
	// 16 µs wide at 20 ms, as wide as what a stream suite looks for.
	Samples bool
}

// Stats sum up a round: its requests, TTFT and inter-event gaps.
type Stats struct {
	Requests, Errors int
	Events           int // content events
	TTFT, Gap        *bench.Dist
	Elapsed          time.Duration
	FirstErr         string
	// TTFTs and Gaps are the values themselves, kept when
	// Options.Samples asks for them.
	TTFTs, Gaps []time.Duration
}

// fixedWorkload sends the same body every time.
type fixedWorkload []byte

func (w fixedWorkload) Request(int) bench.Request { return bench.Request{Body: w, At: -1} }
func (w fixedWorkload) Len() int                  { return 0 }

// Load runs a closed-loop round of t against c. A request in flight when
// the round ends is finished, not cut: its figures are as valid as any
// other's.
func Load(ctx context.Context, c *bench.Client, t Target, o Options) (Stats, error) {
	st := Stats{TTFT: bench.NewDist(), Gap: bench.NewDist()}
	if o.Concurrency < 1 || (o.Duration <= 0 && o.MaxRequests <= 0) {
		return st, errors.New("overhead: need concurrency ≥ 1 and a duration or a request count")
	}
	var mu sync.Mutex
	rn := &bench.Runner{Client: c, Workload: fixedWorkload(t.Body), Stream: t.Stream,
		Sink: func(r *bench.Result) {
			mu.Lock()
			defer mu.Unlock()
			st.Requests++
			if !r.OK() {
				st.Errors++
				if st.FirstErr == "" {
					st.FirstErr = r.ErrClass + ": " + r.Err
				}
				return
			}
			st.Events += r.ContentEvents
			st.TTFT.Add(r.TTFT)
			if o.Samples {
				st.TTFTs = append(st.TTFTs, r.TTFT)
			}
		},
		Gaps: func(_ int, _ bool, gaps []time.Duration) {
			mu.Lock()
			for _, g := range gaps {
				st.Gap.Add(g)
			}
			if o.Samples {
				st.Gaps = append(st.Gaps, gaps...)
			}
			mu.Unlock()
		},
	}
	start := time.Now()
	_, err := rn.Run(ctx, 0, bench.LoadSpec{Mode: "closed", Concurrency: o.Concurrency, Duration: o.Duration, Requests: o.MaxRequests, RampUp: o.RampUp})
	st.Elapsed = time.Since(start)
	return st, err
}

// Merge pools o into s (percentiles over both, counts summed).
func (s *Stats) Merge(o Stats) {
	s.Requests += o.Requests
	s.Errors += o.Errors
	s.Events += o.Events
	s.Elapsed += o.Elapsed
	s.TTFT.Merge(o.TTFT)
	s.Gap.Merge(o.Gap)
	s.TTFTs = append(s.TTFTs, o.TTFTs...)
	s.Gaps = append(s.Gaps, o.Gaps...)
	if s.FirstErr == "" {
		s.FirstErr = o.FirstErr
	}
}

// EventsPerSecond is content events over the round's wall time.
func (s Stats) EventsPerSecond() float64 { return float64(s.Events) / s.Elapsed.Seconds() }

// RequestsPerSecond is successful requests over the round's wall time.
func (s Stats) RequestsPerSecond() float64 {
	return float64(s.Requests-s.Errors) / s.Elapsed.Seconds()
}
