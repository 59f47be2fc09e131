package engine

import (
	"math"
	"strings"

	"github.com/infergate/infergate/internal/promtext"
)

// SGLang says how many prompt tokens it still has to prefill, the ones
// its prefix cache does not hold, in GET /v1/loads, not in /metrics:
// num_waiting_uncached_tokens, per data-parallel rank, the sum over its
// waiting queue (and, disaggregated, its bootstrap queue) of each
// request's length less its matched prefix, plus the rest of the chunk
// being prefilled (SchedulerLoadInquirer.get_num_waiting_uncached_tokens
// in python/sglang/srt/managers/). With ?format=prometheus the endpoint
// writes each field as a gauge named sglang_<field>, one sample per
// rank labelled dp_rank (_format_loads_prometheus in
// python/sglang/srt/entrypoints/v1_loads.py); include=core keeps it to
// the core fields. Stock images older than the endpoint answer 404.

// SGLangLoadsPath is the path of SGLang's load report in the exposition
// format, beside a server's metrics path (/metrics gives
// /v1/loads?include=core&format=prometheus).
func SGLangLoadsPath(metricsPath string) string {
	p := Sibling(metricsPath, "v1/loads")
	if strings.Contains(p, "?") {
		return p + "&include=core&format=prometheus"
	}
	return p + "?include=core&format=prometheus"
}

// WaitingUncachedTokens reads SGLang's /v1/loads exposition (see
// SGLangLoadsPath): the prompt tokens waiting to be prefilled and not
// cached, summed over its data-parallel ranks; NaN when s does not say.
func WaitingUncachedTokens(s *promtext.Scrape) float64 {
	v, ok := s.Sum("sglang_num_waiting_uncached_tokens")
	if !ok || v < 0 || math.IsInf(v, 0) {
		return math.NaN()
	}
	return v
}
