package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/infergate/infergate/internal/engine"
	"github.com/infergate/infergate/internal/promtext"
	"github.com/valyala/fasthttp"
)

// Reading the backends' own load: each backend's /metrics on an interval,
// blended at every pick with what the gateway itself sent since.

// loadReading is a backend's account of its load at one instant.
type loadReading struct {
	at                     time.Time
	server                 string  // vllm, sglang, tgi, llamacpp
	running, waiting, kv   float64 // NaN where the server does not say
	maxRunning             float64 // NaN where the server does not say
	prefixQueries, prefHit float64 // counters, tokens; NaN where not said
	// waitingTokens is the uncached prompt tokens waiting to prefill, by
	// the server's own count (SGLang's /v1/loads); NaN where not said.
	waitingTokens float64
	// outstanding is the gateway's own in flight to the backend when the
	// reading arrived: the part of running and waiting that is ours;
	// prefilling its own count of prompt tokens to prefill then.
	outstanding, prefilling int64
}

// loadState is what a backend's scraper last learnt: its last good
// reading and, when the latest scrape failed, why.
type loadState struct {
	last     *loadReading // nil before the first good scrape
	err      error
	failedAt time.Time
	failures int64
}

// loadEstimate is a backend's load as a pick sees it.
type loadEstimate struct {
	// total is the requests in its batch and queue now; waiting the
	// queued ones (NaN when unknown); kv its KV usage (NaN when unknown);
	// prefill the uncached prompt tokens it still has to prefill
	// (prefill.go); cost what a pick weighs (loadSelector.estimate).
	total, waiting, kv, prefill, cost float64
	fromMetrics                       bool
	// held: it refused a request at admission moments ago (refusal.go).
	held bool
}

// estimate blends b's last reading with the gateway's count of requests
// in flight to it: the reading's figures plus what the gateway sent
// minus what ended since, so a burst between two scrapes is counted as
// it is sent. Without a fresh reading it is the gateway's count alone.
// Its prompt tokens to prefill are blended alike (prefill.go).
func (b *backend) estimate(now time.Time, staleAfter time.Duration) loadEstimate {
	out := float64(b.outstanding.Load())
	pre := float64(b.prefilling.Load())
	held := b.held(now)
	st := b.load.Load()
	if st == nil || st.err != nil || st.last == nil || now.Sub(st.last.at) > staleAfter || math.IsNaN(st.last.running) {
		return loadEstimate{total: out, waiting: math.NaN(), kv: math.NaN(), prefill: pre, held: held}
	}
	r := st.last
	delta := out - float64(r.outstanding)
	waiting := r.waiting
	if math.IsNaN(waiting) {
		waiting = 0
	}
	e := loadEstimate{total: max(out, r.running+waiting+delta), waiting: math.NaN(), kv: r.kv, prefill: pre, held: held, fromMetrics: true}
	if !math.IsNaN(r.waitingTokens) {
		e.prefill = max(pre, r.waitingTokens+pre-float64(r.prefilling))
	}
	if !math.IsNaN(r.waiting) {
		// New requests take free batch slots before they queue.
		free := 0.0
		if r.maxRunning > 0 {
			free = max(0, r.maxRunning-r.running)
		}
		if delta > 0 {
			e.waiting = r.waiting + max(0, delta-free)
		} else {
			e.waiting = max(0, r.waiting+delta)
		}
	}
	return e
}

// metricsClient builds the client of b's scrapes: its own connections,
// and a bound on the body, so a large or hostile exposition cannot hold
// the gateway's memory.
func metricsClient(hc *fasthttp.HostClient) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr: hc.Addr, Dial: hc.Dial, MaxConns: 2, MaxIdleConnDuration: 30 * time.Second,
		MaxResponseBodySize: promtext.MaxBytes, NoDefaultUserAgentHeader: true,
	}
}

// errNoLoadMetrics is a scrape that parsed but held none of the load
// gauges of vLLM, SGLang, TGI or llama.cpp.
var errNoLoadMetrics = errors.New("no load metrics of vLLM, SGLang, TGI or llama.cpp in the exposition")

// slotCount is what a backend's scraper knows of llama.cpp's slots: its
// batch bound, kept out of /metrics (GET /props total_slots, or the
// length of GET /slots). It is read again every slotsEvery, so a server
// restarted with another -np is noticed.
type slotCount struct {
	n      float64 // NaN until read
	at     time.Time
	failed bool // the last attempt failed (logged once)
}

const slotsEvery = 30 * time.Second

// refresh reads the slot count when it is unknown or old.
func (sc *slotCount) refresh(b *backend, metricsPath string, timeout time.Duration, now time.Time, log *slog.Logger) {
	if sc.at.IsZero() {
		sc.n = math.NaN()
	}
	if !math.IsNaN(sc.n) && now.Sub(sc.at) < slotsEvery || sc.failed && now.Sub(sc.at) < slotsEvery {
		return
	}
	sc.at = now
	n, err := b.slots(metricsPath, timeout)
	if err != nil {
		if !sc.failed {
			log.Warn("llama.cpp backend's slot count unknown; its free slots are not counted", "err", err)
		}
		sc.failed = true
		return
	}
	if sc.failed {
		log.Info("llama.cpp backend's slot count read", "slots", n)
	}
	sc.n, sc.failed = n, false
}

// slots reads a llama.cpp backend's slot count beside its metrics path.
func (b *backend) slots(metricsPath string, timeout time.Duration) (float64, error) {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	sl, err := engine.FetchSlots(metricsPath, func(path string) ([]byte, error) {
		if err := b.get(b.mc, path, timeout, resp); err != nil {
			return nil, err
		}
		if c := resp.StatusCode(); c < 200 || c > 299 {
			return nil, fmt.Errorf("status %d", c)
		}
		return resp.Body(), nil
	})
	return float64(sl.Total), err
}

// scrapeLoad reads b's metrics once.
func (b *backend) scrapeLoad(path string, timeout time.Duration) (*loadReading, error) {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := b.get(b.mc, path, timeout, resp); err != nil {
		return nil, fmt.Errorf("scrape %s%s: %w", b.name, path, err)
	}
	out, pre := b.outstanding.Load(), b.prefilling.Load()
	now := time.Now()
	if c := resp.StatusCode(); c < 200 || c > 299 {
		return nil, fmt.Errorf("scrape %s%s: status %d", b.name, path, c)
	}
	s, err := promtext.Parse(bytes.NewReader(resp.Body()), now)
	if err != nil {
		return nil, fmt.Errorf("scrape %s%s: %w", b.name, path, err)
	}
	rd := engine.Read(s)
	if rd.Server == engine.Unknown || math.IsNaN(rd.Running) {
		return nil, fmt.Errorf("scrape %s%s: %w", b.name, path, errNoLoadMetrics)
	}
	return &loadReading{at: now, server: rd.Server, running: rd.Running, waiting: rd.Waiting, kv: rd.KVUsage,
		maxRunning: rd.MaxRunning, prefixQueries: rd.PrefixQueries, prefHit: rd.PrefixHits, waitingTokens: math.NaN(),
		outstanding: out, prefilling: pre}, nil
}

// startLoad scrapes every backend of p on an interval.
func startLoad(p *pool, lc LoadConfig, log *slog.Logger) *backendLoops {
	return startLoops(p, log, "load scrape", func(b *backend, stop <-chan struct{}, log *slog.Logger) { runLoad(b, lc, stop, log) })
}

func runLoad(b *backend, lc LoadConfig, stop <-chan struct{}, log *slog.Logger) {
	t := time.NewTicker(lc.Interval)
	defer t.Stop()
	var slots slotCount
	var loads sglangLoads
	for {
		r, err := b.scrapeLoad(lc.MetricsPath, lc.Timeout)
		if err == nil && r.server == engine.LlamaCpp && math.IsNaN(r.maxRunning) {
			// llama.cpp runs one request per slot and defers the rest:
			// its slot count is the batch bound the estimate's free
			// slots are counted against.
			slots.refresh(b, lc.MetricsPath, lc.Timeout, time.Now(), log)
			r.maxRunning = slots.n
		}
		if err == nil && r.server == engine.SGLang {
			// Its uncached prompt tokens waiting are in /v1/loads, not
			// /metrics: read beside it, when the server has it.
			r.waitingTokens = loads.read(b, lc.MetricsPath, lc.Timeout, time.Now(), log)
		}
		prev := b.load.Load()
		next := &loadState{}
		if prev != nil {
			*next = *prev
		}
		if err != nil {
			if next.err == nil {
				log.Warn("backend load scrape failed; ranking it by the gateway's own count", "err", err)
			}
			next.err, next.failedAt = err, time.Now()
			next.failures++
		} else {
			if next.err != nil {
				log.Info("backend load scrape recovered")
			}
			next.last, next.err = r, nil
		}
		b.load.Store(next)
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}
