package verdict

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"

	"github.com/infergate/infergate/internal/quantile"
)

// A/B from mirrored pairs: each pair is one request answered by the
// primary (the base) and the candidate (the change), so latencies are
// compared pair by pair and rates by their discordant pairs.

// ArmSample is one arm's answer to one request.
type ArmSample struct {
	OK bool
	// TTFT, TPOT and E2E in ms; 0 when unknown (TTFT and TPOT need a
	// stream).
	TTFT, TPOT, E2E float64
	OutputTokens    int
	// Quality signals (of a successful answer).
	InvalidJSON, Refusal, Empty, Truncated, LengthByPolicy bool
	// SchemaInvalid: JSON, but not valid against the request's schema.
	SchemaInvalid bool
}

// PairSample is one request's two answers.
type PairSample struct {
	Primary, Candidate ArmSample
	// JSONAsked: the request asked for JSON, so invalid JSON counts;
	// SchemaGiven: it gave a schema, so answers off the schema count.
	JSONAsked, SchemaGiven bool
	// Similarity and LengthRatio of the two outputs (shown, not judged).
	Similarity, LengthRatio float64
	// Noise is the A/A arm (the primary's request answered again by its
	// own pool), nil without one.
	Noise *ArmSample
	// At is when the request came, in seconds on any clock: the span of
	// the pairs gives each arm's throughput.
	At float64
}

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
}

// Dist is p50, p90 and p99 of a distribution, by the one rule (package
// quantile: nearest rank; p90 from 10 values, p99 from 100).
type Dist = quantile.Three

func distOf(v []float64) Dist { return quantile.ThreeOf(v) }

// ABReport is the comparison of the two arms of mirrored pairs.
type ABReport struct {
	Pairs     int        `json:"pairs"`
	Primary   ArmSummary `json:"primary"`
	Candidate ArmSummary `json:"candidate"`
	// Similarity and LengthRatio are medians over pairs both answered.
	Similarity  float64  `json:"similarity"`
	LengthRatio float64  `json:"length_ratio"`
	Changes     []Change `json:"changes"`
	// Noise is the primary against its A/A arm, the same comparisons:
	// how far two answers of one build differ. Empty without A/A pairs.
	Noise []Change `json:"noise,omitempty"`
	Result
	// Judge is a judge model's blind grading of a sample of pairs, nil
	// without one.
	Judge *Judged `json:"judge,omitempty"`
	// Samples are each arm's latencies (ms) by figure ("ttft", "tpot",
	// "e2e"), for the report's distributions.
	Samples map[string]map[string][]float64 `json:"-"`
}

// AB compares the candidate with the primary over pairs.
func AB(pairs []PairSample, o Options) *ABReport {
	o.Defaults()
	rng := rand.New(rand.NewPCG(o.Seed, 11))
	r := &ABReport{Pairs: len(pairs)}
	r.Primary = summarize(pairs, func(p PairSample) ArmSample { return p.Primary })
	r.Candidate = summarize(pairs, func(p PairSample) ArmSample { return p.Candidate })
	r.Samples = map[string]map[string][]float64{}
	for _, p := range pairs {
		arms := [][2]any{{"primary", p.Primary}, {"candidate", p.Candidate}}
		if p.Noise != nil {
			arms = append(arms, [2]any{"A/A", *p.Noise})
		}
		for _, arm := range arms {
			a := arm[1].(ArmSample)
			if !a.OK {
				continue
			}
			for k, v := range map[string]float64{"ttft": a.TTFT, "tpot": a.TPOT, "e2e": a.E2E} {
				if v > 0 {
					if r.Samples[k] == nil {
						r.Samples[k] = map[string][]float64{}
					}
					r.Samples[k][arm[0].(string)] = append(r.Samples[k][arm[0].(string)], v)
				}
			}
		}
	}

	r.Changes = compareArms(pairs, func(p PairSample) ArmSample { return p.Candidate }, o, rng)
	var noisy []PairSample
	for _, p := range pairs {
		if p.Noise != nil {
			noisy = append(noisy, p)
		}
	}
	if len(noisy) >= MinSamples {
		r.Noise = compareArms(noisy, func(p PairSample) ArmSample { return *p.Noise }, o, rng)
		withinNoise(r.Changes, r.Noise)
	}
	var sims, ratios []float64
	for _, p := range pairs {
		if p.Primary.OK && p.Candidate.OK {
			sims = append(sims, p.Similarity)
			if p.LengthRatio > 0 {
				ratios = append(ratios, p.LengthRatio)
			}
		}
	}
	r.Similarity, r.LengthRatio = Median(sims), Median(ratios)
	r.Result = Decide(r.Changes)
	return r
}

// compareArms compares, pair by pair, the primary with the arm other
// picks: latencies of the pairs both answered, errors of all pairs,
// quality of the pairs both answered.
func compareArms(pairs []PairSample, other func(PairSample) ArmSample, o Options, rng *rand.Rand) []Change {
	var out []Change
	for _, m := range []struct {
		name   string
		better string
		get    func(ArmSample) float64
		judged bool
	}{
		{"ttft", "lower", func(a ArmSample) float64 { return a.TTFT }, true},
		{"tpot", "lower", func(a ArmSample) float64 { return a.TPOT }, true},
		{"e2e", "lower", func(a ArmSample) float64 { return a.E2E }, true},
		{"speed", "higher", speedOf, false},
	} {
		var a, b []float64
		for _, p := range pairs {
			q := other(p)
			x, y := m.get(p.Primary), m.get(q)
			if p.Primary.OK && q.OK && x > 0 && y > 0 {
				a, b = append(a, x), append(b, y)
			}
		}
		floor := o.SpeedFloor
		if m.better == "higher" {
			floor = 0
		}
		if ch, ok := PairedSamples(m.name, m.better, a, b, o.SpeedTolerance, floor, rng); ok {
			if !m.judged {
				ch.Judgement, ch.Need = Info, 0 // 1000/tpot: judged through tpot
			}
			out = append(out, ch)
		}
	}
	rate := func(name string, keep func(PairSample, ArmSample) bool, sig func(ArmSample) bool) {
		var a, b []bool
		for _, p := range pairs {
			q := other(p)
			if keep(p, q) {
				a, b = append(a, sig(p.Primary)), append(b, sig(q))
			}
		}
		if len(a) > 0 {
			out = append(out, PairedRates(name, a, b, o.QualityTolerance))
		}
	}
	all := func(PairSample, ArmSample) bool { return true }
	both := func(p PairSample, q ArmSample) bool { return p.Primary.OK && q.OK }
	rate("error_rate", all, func(a ArmSample) bool { return !a.OK })
	rate("invalid_json_rate", func(p PairSample, q ArmSample) bool { return both(p, q) && p.JSONAsked }, func(a ArmSample) bool { return a.InvalidJSON })
	rate("schema_invalid_rate", func(p PairSample, q ArmSample) bool { return both(p, q) && p.SchemaGiven }, func(a ArmSample) bool { return a.SchemaInvalid })
	rate("refusal_rate", both, func(a ArmSample) bool { return a.Refusal })
	rate("empty_rate", both, func(a ArmSample) bool { return a.Empty })
	rate("truncated_rate", both, func(a ArmSample) bool { return a.Truncated && !a.LengthByPolicy })
	return out
}

// withinNoise makes a regression no larger than the A/A arm's own change
// of the same figure unsure: two answers of one build differ that much.
func withinNoise(changes, noise []Change) {
	for i := range changes {
		ch := &changes[i]
		if ch.Judgement != Regressed {
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
				ch.Judgement = Unsure
				ch.Need = 2 * ch.N
			}
		}
	}
}

func speedOf(a ArmSample) float64 {
	if a.TPOT <= 0 {
		return 0
	}
	return 1000 / a.TPOT
}

func summarize(pairs []PairSample, arm func(PairSample) ArmSample) ArmSummary {
	var s ArmSummary
	var ttft, tpot, e2e, speed []float64
	first, last, tokens := math.Inf(1), math.Inf(-1), 0
	var errs, ok, jsonOK, invalid, refusal, empty, trunc int
	for _, p := range pairs {
		a := arm(p)
		s.Requests++
		if p.At > 0 {
			first, last = math.Min(first, p.At), math.Max(last, p.At)
		}
		if !a.OK {
			errs++
			continue
		}
		ok++
		tokens += a.OutputTokens
		for _, v := range []struct {
			dst *[]float64
			x   float64
		}{{&ttft, a.TTFT}, {&tpot, a.TPOT}, {&e2e, a.E2E}, {&speed, speedOf(a)}} {
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
func (r *ABReport) Write(w io.Writer) {
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
	fmt.Fprintf(w, "outputs: median similarity %.2f, median length ratio %.2f\n\n", r.Similarity, r.LengthRatio)
	fmt.Fprintf(w, "%-20s %11s %11s %9s %22s %9s %6s  %s\n", "paired change", "primary", "candidate", "change", "95% CI", "p", "n", "judgement")
	for _, ch := range r.Changes {
		base, nw, delta, ci, p := ch.Cells()
		j := ch.Judgement
		if ch.Judgement == Unsure && ch.Need > 0 {
			j += fmt.Sprintf(" (≈%d pairs)", ch.Need)
		}
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
	fmt.Fprintf(w, "\nverdict: %s\n", r.Verdict)
	for _, s := range r.Reasons {
		fmt.Fprintf(w, "  - %s\n", s)
	}
}

func noiseOf(noise []Change, metric string) *Change {
	for i := range noise {
		if noise[i].Metric == metric {
			return &noise[i]
		}
	}
	return nil
}

func fmtShort(ch Change) string {
	if ch.Quality {
		return fmt.Sprintf("%+.2fpt [%+.2f, %+.2f]", ch.Delta*100, ch.CILow*100, ch.CIHigh*100)
	}
	return fmt.Sprintf("%+.1f%% [%+.1f, %+.1f]", ch.Delta*100, ch.CILow*100, ch.CIHigh*100)
}

// SplitSample is one request of a canary: served by one arm only.
type SplitSample struct {
	Arm                    ArmSample
	JSONAsked, SchemaGiven bool
	At                     float64 // arrival, seconds
}

// Split compares the two arms of a canary (a live split): different
// requests on each side, so the figures are compared as independent
// samples (bootstrap and Mann-Whitney for latencies, Agresti-Caffo and
// the two-proportion test for rates), by the same rule.
func Split(primary, candidate []SplitSample, o Options) *ABReport {
	o.Defaults()
	rng := rand.New(rand.NewPCG(o.Seed, 13))
	wrap := func(s []SplitSample) []PairSample {
		out := make([]PairSample, len(s))
		for i, x := range s {
			out[i] = PairSample{Primary: x.Arm, JSONAsked: x.JSONAsked, SchemaGiven: x.SchemaGiven, At: x.At}
		}
		return out
	}
	pa, pb := wrap(primary), wrap(candidate)
	first := func(p PairSample) ArmSample { return p.Primary }
	r := &ABReport{Pairs: 0, Primary: summarize(pa, first), Candidate: summarize(pb, first), Samples: map[string]map[string][]float64{}}
	for _, m := range []struct {
		name, better string
		get          func(ArmSample) float64
		judged       bool
	}{
		{"ttft", "lower", func(a ArmSample) float64 { return a.TTFT }, true},
		{"tpot", "lower", func(a ArmSample) float64 { return a.TPOT }, true},
		{"e2e", "lower", func(a ArmSample) float64 { return a.E2E }, true},
		{"speed", "higher", speedOf, false},
	} {
		vals := func(s []SplitSample) []float64 {
			var v []float64
			for _, x := range s {
				if x.Arm.OK && m.get(x.Arm) > 0 {
					v = append(v, m.get(x.Arm))
				}
			}
			return v
		}
		a, b := vals(primary), vals(candidate)
		if m.name != "speed" {
			r.Samples[m.name] = map[string][]float64{"primary": a, "candidate": b}
		}
		floor := o.SpeedFloor
		if m.better == "higher" {
			floor = 0
		}
		if ch, ok := Samples(0, m.name, m.better, a, b, o.SpeedTolerance, floor, rng); ok {
			if !m.judged {
				ch.Judgement, ch.Need = Info, 0
			}
			r.Changes = append(r.Changes, ch)
		}
	}
	rate := func(name string, keep func(SplitSample) bool, sig func(ArmSample) bool) {
		count := func(s []SplitSample) (x, n int) {
			for _, v := range s {
				if keep(v) {
					n++
					if sig(v.Arm) {
						x++
					}
				}
			}
			return
		}
		x, na := count(primary)
		y, nb := count(candidate)
		if na > 0 || nb > 0 {
			r.Changes = append(r.Changes, Rates(0, name, x, na, y, nb, o.QualityTolerance))
		}
	}
	all := func(SplitSample) bool { return true }
	ok := func(s SplitSample) bool { return s.Arm.OK }
	rate("error_rate", all, func(a ArmSample) bool { return !a.OK })
	rate("invalid_json_rate", func(s SplitSample) bool { return ok(s) && s.JSONAsked }, func(a ArmSample) bool { return a.InvalidJSON })
	rate("schema_invalid_rate", func(s SplitSample) bool { return ok(s) && s.SchemaGiven }, func(a ArmSample) bool { return a.SchemaInvalid })
	rate("refusal_rate", ok, func(a ArmSample) bool { return a.Refusal })
	rate("empty_rate", ok, func(a ArmSample) bool { return a.Empty })
	rate("truncated_rate", ok, func(a ArmSample) bool { return a.Truncated && !a.LengthByPolicy })
	r.Result = Decide(r.Changes)
	return r
}

// Judged is a judge model's tally over a sample of pairs, graded blind:
// the candidate's wins and losses against the primary, the ties, and the
// pairs the judge did not grade.
type Judged struct {
	Wins   int `json:"candidate_preferred"`
	Losses int `json:"primary_preferred"`
	Ties   int `json:"ties"`
	Failed int `json:"not_graded,omitempty"`
	// Preference is the candidate's share of the decided pairs, with its
	// 95% Wilson interval; 0.5 is no preference.
	Preference float64 `json:"preference"`
	Low        float64 `json:"preference_low"`
	High       float64 `json:"preference_high"`
}

// Settle computes the preference and its Wilson interval.
func (j *Judged) Settle() {
	n := float64(j.Wins + j.Losses)
	if n == 0 {
		j.Preference, j.Low, j.High = 0.5, 0, 1
		return
	}
	p := float64(j.Wins) / n
	const z = 1.96
	d := 1 + z*z/n
	c := (p + z*z/(2*n)) / d
	h := z * math.Sqrt(p*(1-p)/n+z*z/(4*n*n)) / d
	j.Preference, j.Low, j.High = p, c-h, c+h
}
