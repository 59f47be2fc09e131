package proxy

import (
	"math"

	"github.com/infergate/infergate/affinity"
)

// place is cold placement: the candidate for a prefix or session no
// backend is known to hold, named by seed (the prompt's first block's
// hash, or the session's). Among the candidates whose expected wait is
// at most (1+ε) times the candidates' mean plus c (prefix.cold_load_factor
// and cold_load_slack), the one a rendezvous (highest random weight) hash
// of seed and the backend's URL ranks first: consistent hashing with
// bounded loads (Mirrokni, Thorup and Zadimoghaddam, 2018).
//
// The hash is what gateway replicas that never talk agree on: with the
// same backends, a cold prefix goes to the same one from every replica
// while that backend is within the bound on each replica's own estimate;
// the bound is what keeps a hot spot of new prefixes from piling on one
// backend. Rendezvous rather than a ring: every candidate is scored
// anyway, a backend leaving moves only the prefixes it held, and there is
// no ring to rebuild on a reload. The cheapest candidate is always within
// the bound, so there is always one.
//
// A candidate other than exclude (-1: none) is chosen while there is one:
// a session leaving its saturated backend goes to the next its key ranks
// within the bound, or the least loaded of the others when none is.
func (x *prefixSelector) place(s *pick, seed uint64, exclude int) int {
	fastest := s.fastestTPOT()
	var sum float64
	for c := range s.cands {
		sum += s.cost(c, fastest)
	}
	bound := (1+x.cfg.ColdLoadFactor)*sum/float64(len(s.cands)) + x.cfg.ColdLoadSlack
	best, bestScore := -1, 0.0
	for c, b := range s.cands {
		if c == exclude || s.cost(c, fastest) > bound {
			continue
		}
		// Weighted rendezvous: -w/ln(u) with u uniform in (0,1) from
		// the hash; with equal weights, the order of the hashes.
		u := (float64(affinity.Mix(seed^b.nameHash)>>11) + 0.5) / (1 << 53)
		score := -float64(b.weight) / math.Log(u)
		if best < 0 || score > bestScore {
			best, bestScore = c, score
		}
	}
	if best >= 0 {
		return best
	}
	// Every other candidate is past the bound: the cheapest of them (the
	// excluded one is the cheapest, yet saturated by the spill guard).
	for c := range s.cands {
		if c != exclude && (best < 0 || s.cost(c, fastest) < s.cost(best, fastest)) {
			best = c
		}
	}
	return max(best, 0)
}

// fastestTPOT is the shortest time per output token among the
// candidates' streams, +Inf when none has one yet.
func (s *pick) fastestTPOT() float64 {
	fastest := math.Inf(1)
	for _, b := range s.cands {
		if t := b.tpotAverage(); t > 0 {
			fastest = min(fastest, t)
		}
	}
	return fastest
}

// cost is how long a new request can expect to wait on candidate c: its
// requests, the new one included, and its prompt tokens still to prefill
// in requests' worth (s.est's cost: prefill.go), times how much slower
// than the fastest it decodes (clamped to 8; a backend without a stream
// yet counts as the fastest), per unit of weight:
// (requests + 1 + prefill / load.prefill_tokens) × slowness / weight.
func (s *pick) cost(c int, fastest float64) float64 {
	b := s.cands[c]
	f := 1.0
	if t := b.tpotAverage(); t > 0 && !math.IsInf(fastest, 1) {
		f = min(t/fastest, 8)
	}
	return (s.est[c].cost + 1) * f / float64(b.weight)
}
