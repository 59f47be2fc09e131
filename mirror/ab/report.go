package ab

import (
	"time"

	"fmt"
	"io"
	"math"
	"math/rand/v2"

	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/verdict"

	"github.com/infergate/infergate/internal/quantile"
)

// A/B from mirrored pairs: each pair is one request answered by the
// primary (the base) and the candidate (the change), so latencies are
// compared pair by pair and rates by their discordant pairs.

// ArmSummary is one arm's figures over all pairs.
type ArmSummary struct {
	Requests int `json:"requests"`
	OK       int `json:"ok"`
	// TTFT, TPOT, E2E (ms) and Speed (output tokens/s while decoding).
	TTFT  Dist `json:"ttft_ms"`
	TPOT  Dist `json:"tpot_ms"`
	E2E   Dist `json:"e2e_ms"`
	Speed Dist `json:"speed_tok_s"`
	// Rates: errors of all requests; the others of the successful ones
	// (invalid JSON of those that asked for JSON).
	ErrorRate       float64 `json:"error_rate"`
	InvalidJSONRate float64 `json:"invalid_json_rate"`
	RefusalRate     float64 `json:"refusal_rate"`
	EmptyRate       float64 `json:"empty_rate"`
	TruncatedRate   float64 `json:"truncated_rate"`
	// LengthByPolicy counts truncations at a gateway's output cap, kept
	// out of TruncatedRate.
	LengthByPolicy int `json:"length_by_policy,omitempty"`
	// Throughput is the arm's output tokens over the span of the
	// requests' arrival (tokens/s), 0 when the span is unknown.
	Throughput float64 `json:"output_token_throughput,omitempty"`
	// CachedShare is the share of prompt tokens the arm's backend
	// reported cached, over the answers that reported it; nil when none
	// did.
	CachedShare *float64 `json:"cached_share,omitempty"`
}

// Dist is p50, p90 and p99 of a distribution, by the one rule (package
// quantile: nearest rank; p90 from 10 values, p99 from 100).
type Dist = quantile.Three

func distOf(v []float64) Dist { return quantile.ThreeOf(v) }

// Report is the comparison of the two arms of mirrored pairs.
type Report struct {
	Pairs     int        `json:"pairs"`
	Primary   ArmSummary `json:"primary"`
	Candidate ArmSummary `json:"candidate"`
	// Similarity and LengthRatio are medians over pairs both answered.
	Similarity  float64          `json:"similarity"`
	LengthRatio float64          `json:"length_ratio"`
	Changes     []verdict.Change `json:"changes"`
	// Noise is the primary against its A/A arm, the same comparisons:
	// how far two answers of one build differ. Empty without A/A pairs.
	Noise []verdict.Change `json:"noise,omitempty"`
	verdict.Result
	// LoadNote says, under SLOs, whether goodput compares the arms.
	LoadNote string `json:"load_note,omitempty"`
	// Judge is a judge model's blind grading of a sample of pairs, nil
	// without one.
	Judge *Judged `json:"judge,omitempty"`
	// Samples are each arm's latencies (ms) by figure ("ttft", "tpot",
	// "e2e"), for the report's distributions.
	Samples map[string]map[string][]float64 `json:"-"`
}

// Paired compares the candidate with the primary over mirrored pairs.
func Paired(pairs []mirror.Pair, o verdict.Options) *Report {
	o.Defaults()
	rng := rand.New(rand.NewPCG(o.Seed, 11))
	r := &Report{Pairs: len(pairs)}
	r.Primary = summarize(pairs, func(p mirror.Pair) mirror.Arm { return p.Primary })
	r.Candidate = summarize(pairs, func(p mirror.Pair) mirror.Arm { return p.Candidate })
	r.Samples = map[string]map[string][]float64{}
	for _, p := range pairs {
		arms := [][2]any{{"primary", p.Primary}, {"candidate", p.Candidate}}
		if p.Noise != nil {
			arms = append(arms, [2]any{"A/A", *p.Noise})
		}
		for _, arm := range arms {
			a := arm[1].(mirror.Arm)
			if !a.OK() {
				continue
			}
			for k, v := range map[string]float64{"ttft": a.TTFTms, "tpot": a.TPOTms, "e2e": a.E2Ems} {
				if v > 0 {
					if r.Samples[k] == nil {
						r.Samples[k] = map[string][]float64{}
					}
					r.Samples[k][arm[0].(string)] = append(r.Samples[k][arm[0].(string)], v)
				}
			}
		}
	}

	r.Changes = compareArms(pairs, func(p mirror.Pair) mirror.Arm { return p.Candidate }, o, rng)
	var noisy []mirror.Pair
	for _, p := range pairs {
		if p.Noise != nil {
			noisy = append(noisy, p)
		}
	}
	if len(noisy) >= verdict.MinSamples {
		r.Noise = compareArms(noisy, func(p mirror.Pair) mirror.Arm { return *p.Noise }, o, rng)
		withinNoise(r.Changes, r.Noise)
	}
	var sims, ratios []float64
	for _, p := range pairs {
		if p.Primary.OK() && p.Candidate.OK() {
			sims = append(sims, p.Similarity)
			if p.LengthRatio > 0 {
				ratios = append(ratios, p.LengthRatio)
			}
		}
	}
	r.Similarity, r.LengthRatio = verdict.Median(sims), verdict.Median(ratios)
	if o.Objective.Mode() == verdict.BySLO {
		r.Changes = append(r.Changes, pairedSLO(pairs, o)...)
		r.LoadNote = "mirrored pairs: both arms answered the same requests as they arrived, so goodput compares them"
	}
	r.Result = verdict.Decide(r.Changes, o)
	return r
}

// compareArms compares, pair by pair, the primary with the arm other
// picks: latencies of the pairs both answered, errors of all pairs,
// quality of the pairs both answered.
func compareArms(pairs []mirror.Pair, other func(mirror.Pair) mirror.Arm, o verdict.Options, rng *rand.Rand) []verdict.Change {
	var out []verdict.Change
	for _, m := range []struct {
		name   string
		better string
		get    func(mirror.Arm) float64
		judged bool
	}{
		{"ttft", "lower", func(a mirror.Arm) float64 { return a.TTFTms }, true},
		{"tpot", "lower", func(a mirror.Arm) float64 { return a.TPOTms }, true},
		{"e2e", "lower", func(a mirror.Arm) float64 { return a.E2Ems }, true},
		{"speed", "higher", speedOf, false},
	} {
		var a, b []float64
		for _, p := range pairs {
			q := other(p)
			x, y := m.get(p.Primary), m.get(q)
			if p.Primary.OK() && q.OK() && x > 0 && y > 0 {
				a, b = append(a, x), append(b, y)
			}
		}
		floor := o.SpeedFloor
		if m.better == "higher" {
			floor = 0
		}
		if ch, ok := verdict.PairedSamples(m.name, m.better, a, b, o.SpeedTolerance, floor, rng); ok {
			if !m.judged {
				ch.Judgement, ch.Need = verdict.Info, 0 // 1000/tpot: judged through tpot
			}
			out = append(out, ch)
		}
	}
	rate := func(name string, keep func(mirror.Pair, mirror.Arm) bool, sig func(mirror.Arm) bool) {
		var a, b []bool
		for _, p := range pairs {
			q := other(p)
			if keep(p, q) {
				a, b = append(a, sig(p.Primary)), append(b, sig(q))
			}
		}
		if len(a) > 0 {
			out = append(out, verdict.PairedRates(name, a, b, o.QualityTolerance))
		}
	}
	all := func(mirror.Pair, mirror.Arm) bool { return true }
	both := func(p mirror.Pair, q mirror.Arm) bool { return p.Primary.OK() && q.OK() }
	rate("error_rate", all, func(a mirror.Arm) bool { return !a.OK() })
	rate("invalid_json_rate", func(p mirror.Pair, q mirror.Arm) bool { return both(p, q) && p.JSONAsked }, func(a mirror.Arm) bool { return a.InvalidJSON })
	rate("schema_invalid_rate", func(p mirror.Pair, q mirror.Arm) bool { return both(p, q) && p.SchemaGiven }, func(a mirror.Arm) bool { return a.SchemaInvalid })
	rate("refusal_rate", both, func(a mirror.Arm) bool { return a.Refusal })
	rate("empty_rate", both, func(a mirror.Arm) bool { return a.Empty })
	rate("truncated_rate", both, func(a mirror.Arm) bool { return a.Truncated && !a.LengthByPolicy })
	return out
}

// withinNoise makes a regression no larger than the A/A arm's own change
// of the same figure unsure: two answers of one build differ that much.
func withinNoise(changes, noise []verdict.Change) {
	for i := range changes {
		ch := &changes[i]
		if ch.Judgement != verdict.Regressed {
			continue
		}
		for _, n := range noise {
			if n.Metric != ch.Metric {
				continue
			}
			worse := n.CIHigh
			if ch.Better == "higher" {
				worse = -n.CILow
			}
			if math.Abs(worse) >= math.Abs(ch.Delta) {
				ch.Judgement = verdict.Unsure
				ch.Need = 2 * ch.N
			}
		}
	}
}

func speedOf(a mirror.Arm) float64 {
	if a.TPOTms <= 0 {
		return 0
	}
	return 1000 / a.TPOTms
}

func summarize(pairs []mirror.Pair, arm func(mirror.Pair) mirror.Arm) ArmSummary {
	var s ArmSummary
	var ttft, tpot, e2e, speed []float64
	first, last, tokens := math.Inf(1), math.Inf(-1), 0
	var errs, ok, jsonOK, invalid, refusal, empty, trunc int
	var cache verdict.CacheTally
	for _, p := range pairs {
		a := arm(p)
		s.Requests++
		if a.CachedTokens != nil {
			cache.Add(a.PromptTokens, *a.CachedTokens)
		}
		if seconds(p.Time) > 0 {
			first, last = math.Min(first, seconds(p.Time)), math.Max(last, seconds(p.Time))
		}
		if !a.OK() {
			errs++
			continue
		}
		ok++
		tokens += a.OutputTokens
		for _, v := range []struct {
			dst *[]float64
			x   float64
		}{{&ttft, a.TTFTms}, {&tpot, a.TPOTms}, {&e2e, a.E2Ems}, {&speed, speedOf(a)}} {
			if v.x > 0 {
				*v.dst = append(*v.dst, v.x)
			}
		}
		if p.JSONAsked {
			jsonOK++
			if a.InvalidJSON {
				invalid++
			}
		}
		if a.Refusal {
			refusal++
		}
		if a.Empty {
			empty++
		}
		switch {
		case a.Truncated && a.LengthByPolicy:
			s.LengthByPolicy++
		case a.Truncated:
			trunc++
		}
	}
	s.OK = ok
	s.CachedShare = cache.Share()
	if last > first {
		s.Throughput = float64(tokens) / (last - first)
	}
	s.TTFT, s.TPOT, s.E2E, s.Speed = distOf(ttft), distOf(tpot), distOf(e2e), distOf(speed)
	div := func(x, n int) float64 {
		if n == 0 {
			return 0
		}
		return float64(x) / float64(n)
	}
	s.ErrorRate = div(errs, s.Requests)
	s.InvalidJSONRate, s.RefusalRate, s.EmptyRate, s.TruncatedRate = div(invalid, jsonOK), div(refusal, ok), div(empty, ok), div(trunc, ok)
	return s
}

// Write prints the report: each arm, the paired differences, the verdict.
func (r *Report) Write(w io.Writer) {
	if r.Pairs > 0 {
		fmt.Fprintf(w, "%d pairs (primary = base, candidate = the change)\n\n", r.Pairs)
	} else {
		fmt.Fprintf(w, "a live split: %d requests served by the primary, %d by the candidate (independent samples)\n\n", r.Primary.Requests, r.Candidate.Requests)
	}
	fmt.Fprintf(w, "%-22s %30s %30s\n", "", "primary", "candidate")
	row := func(name string, a, b Dist) {
		fmt.Fprintf(w, "%-22s %30s %30s\n", name, a.Text("%.1f"), b.Text("%.1f"))
	}
	row("ttft ms p50/p90/p99", r.Primary.TTFT, r.Candidate.TTFT)
	row("tpot ms", r.Primary.TPOT, r.Candidate.TPOT)
	row("e2e ms", r.Primary.E2E, r.Candidate.E2E)
	row("speed tok/s", r.Primary.Speed, r.Candidate.Speed)
	if r.Primary.Throughput > 0 || r.Candidate.Throughput > 0 {
		fmt.Fprintf(w, "%-22s %30.1f %30.1f\n", "throughput tok/s", r.Primary.Throughput, r.Candidate.Throughput)
	}
	pct := func(name string, a, b float64) { fmt.Fprintf(w, "%-22s %29.1f%% %29.1f%%\n", name, a*100, b*100) }
	pct("errors", r.Primary.ErrorRate, r.Candidate.ErrorRate)
	pct("invalid JSON", r.Primary.InvalidJSONRate, r.Candidate.InvalidJSONRate)
	pct("refusals", r.Primary.RefusalRate, r.Candidate.RefusalRate)
	pct("empty", r.Primary.EmptyRate, r.Candidate.EmptyRate)
	pct("finish length", r.Primary.TruncatedRate, r.Candidate.TruncatedRate)
	fmt.Fprintf(w, "%-22s %30s %30s\n", "cached prompt tokens", verdict.ShareText(r.Primary.CachedShare), verdict.ShareText(r.Candidate.CachedShare))
	fmt.Fprintf(w, "outputs: median similarity %.2f, median length ratio %.2f\n\n", r.Similarity, r.LengthRatio)
	fmt.Fprintf(w, "%-20s %11s %11s %9s %22s %9s %6s  %s\n", "paired change", "primary", "candidate", "change", "95% CI", "p", "n", "judgement")
	for _, ch := range r.Changes {
		base, nw, delta, ci, p := ch.Cells()
		j := ch.JudgementText("pairs")
		if n := noiseOf(r.Noise, ch.Metric); n != nil {
			j += fmt.Sprintf("   A/A %s", fmtShort(*n))
		}
		fmt.Fprintf(w, "%-20s %11s %11s %9s %22s %9s %6d  %s\n", ch.Metric, base, nw, delta, ci, p, ch.N, j)
	}
	if len(r.Noise) > 0 {
		fmt.Fprintf(w, "(A/A: the primary's requests answered again by its own pool, %d pairs: the noise floor)\n", r.Noise[0].N)
	}
	if j := r.Judge; j != nil {
		fmt.Fprintf(w, "\njudge (blind, order randomised): candidate preferred %d, primary %d, ties %d", j.Wins, j.Losses, j.Ties)
		if j.Failed > 0 {
			fmt.Fprintf(w, ", not graded %d", j.Failed)
		}
		fmt.Fprintf(w, "; preference for the candidate %.0f%% [%.0f, %.0f]%% (50%%: none)\n", j.Preference*100, j.Low*100, j.High*100)
	}
	r.Result.Write(w, r.LoadNote)
}

// CacheConditions says why the arms cannot be compared, "" when they
// can (verdict.CacheRefusal): their backends held shares of the prompts'
// tokens in their prefix caches more than tol apart (a candidate that
// sees only the mirrored share of the traffic holds less of it than the
// primary), so a TTFT difference measures the caches, not the change. An
// arm whose backend reported no cached tokens cannot be checked: unknown
// is then set.
func (r *Report) CacheConditions(tol float64) (reason string, unknown bool) {
	reason, unknown = verdict.CacheRefusal(verdict.Cached{Name: "primary", Share: r.Primary.CachedShare},
		verdict.Cached{Name: "candidate", Share: r.Candidate.CachedShare}, tol)
	if reason != "" {
		reason += "; let the candidate see the traffic longer (a larger mirror share) before judging, or judge a shadow of requests neither has seen"
	}
	return reason, unknown
}

func noiseOf(noise []verdict.Change, metric string) *verdict.Change {
	for i := range noise {
		if noise[i].Metric == metric {
			return &noise[i]
		}
	}
	return nil
}

func fmtShort(ch verdict.Change) string {
	if ch.Quality {
		return fmt.Sprintf("%+.2fpt [%+.2f, %+.2f]", ch.Delta*100, ch.CILow*100, ch.CIHigh*100)
	}
	return fmt.Sprintf("%+.1f%% [%+.1f, %+.1f]", ch.Delta*100, ch.CILow*100, ch.CIHigh*100)
}

// seconds is t as Unix seconds, 0 for the zero time.
func seconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
