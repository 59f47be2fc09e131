package proxy

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/internal/engine"
	"github.com/infergate/infergate/internal/promtext"
	"github.com/valyala/fasthttp"
)

// Token-counted load. Three queued 8,000-token prompts keep a backend
// busier than three 50-token ones: selection load and prefix count the
// prompt tokens a backend still has to prefill (those its prefix cache
// does not hold) beside its requests. A pick's cost of backend b is
//
//	(requests(b) + 1 + prefill(b) / load.prefill_tokens) × slowness(b) / weight(b)
//
// where requests is the reading's running and waiting requests corrected
// by the gateway's own sends since (load.go), slowness how much slower
// than the fastest candidate b decodes (1 to 8), and prefill(b):
//
//   - where b says it (SGLang's num_waiting_uncached_tokens, read from
//     /v1/loads each scrape), that figure corrected by the gateway's own
//     count's change since the reading, and never below the gateway's own
//     count;
//   - otherwise (vLLM, llama.cpp and TGI report no such gauge) the
//     gateway's own count: the prompt tokens of the requests sent to b
//     that have not had their first token, each less the share of its
//     prefix blocks the prefix index expects b to hold (selection
//     prefix). A request's tokens are the policy's count when it counted
//     them, else 4 bytes of body a token (tokenBudget's rule). A plain
//     (not streamed) answer's first token is not seen apart from its
//     whole: its prompt counts until the answer.

// prefillCharge is one attempt's share of its backend's prefilling count,
// given back at the attempt's first content event or its end, whichever
// is first. The exchange owns it; the handler and the relay take turns
// with it, never at once.
type prefillCharge struct {
	b *backend
	n int64
}

// charge counts n tokens against b, giving back an earlier charge.
func (c *prefillCharge) charge(b *backend, n int64) {
	c.release()
	if n > 0 {
		b.prefilling.Add(n)
		c.b, c.n = b, n
	}
}

// release gives the charge back; safe to call twice.
func (c *prefillCharge) release() {
	if c != nil && c.b != nil {
		c.b.prefilling.Add(-c.n)
		c.b, c.n = nil, 0
	}
}

// uncached is the part of a prompt of tokens the backend is not expected
// to hold: less the share of the prompt's prefix blocks the index expects
// it to hold (blocks of k.Blocks; none without a key).
func uncached(tokens int64, k *affinity.Key, blocks int) int64 {
	if k == nil || k.Blocks <= 0 || blocks <= 0 {
		return tokens
	}
	return tokens - tokens*int64(min(blocks, k.Blocks))/int64(k.Blocks)
}

// sglangLoads is what a backend's scraper knows of SGLang's /v1/loads: a
// server without it (images older than the endpoint answer 404) is asked
// again every slotsEvery, not at every scrape.
type sglangLoads struct {
	failed   bool
	failedAt time.Time
}

// read returns the server's uncached waiting prompt tokens, NaN when it
// cannot be had now.
func (l *sglangLoads) read(b *backend, metricsPath string, timeout time.Duration, now time.Time, log *slog.Logger) float64 {
	if l.failed && now.Sub(l.failedAt) < slotsEvery {
		return math.NaN()
	}
	v, err := b.waitingUncached(engine.SGLangLoadsPath(metricsPath), timeout, now)
	if err != nil {
		if !l.failed {
			log.Info("SGLang backend's /v1/loads unread; its prompt tokens to prefill are the gateway's own count", "err", err)
		}
		l.failed, l.failedAt = true, now
		return math.NaN()
	}
	if l.failed {
		log.Info("SGLang backend's /v1/loads read again")
	}
	l.failed = false
	return v
}

// waitingUncached reads SGLang's load report at path.
func (b *backend) waitingUncached(path string, timeout time.Duration, now time.Time) (float64, error) {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := b.get(b.mc, path, timeout, resp); err != nil {
		return math.NaN(), fmt.Errorf("%s: %w", path, err)
	}
	if c := resp.StatusCode(); c < 200 || c > 299 {
		return math.NaN(), fmt.Errorf("%s: status %d", path, c)
	}
	s, err := promtext.Parse(bytes.NewReader(resp.Body()), now)
	if err != nil {
		return math.NaN(), fmt.Errorf("%s: %w", path, err)
	}
	v := engine.WaitingUncachedTokens(s)
	if math.IsNaN(v) {
		return v, fmt.Errorf("%s: no sglang_num_waiting_uncached_tokens", path)
	}
	return v, nil
}
