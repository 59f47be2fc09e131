package rank

import (
	"encoding/json"
	"math"

	"github.com/infergate/infergate/internal/quantile"
	"github.com/infergate/infergate/verdict"
)

// Interval is a figure with its 95% interval; Lo and Hi are NaN (null in
// JSON) when there were too few values for one.
type Interval struct {
	Value float64 `json:"value"`
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
}

// MarshalJSON writes an interval not computed as null bounds: JSON has
// no NaN.
func (i Interval) MarshalJSON() ([]byte, error) {
	num := func(f float64) *float64 {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return &f
	}
	return json.Marshal(struct {
		Value *float64 `json:"value"`
		Lo    *float64 `json:"lo"`
		Hi    *float64 `json:"hi"`
	}{num(i.Value), num(i.Lo), num(i.Hi)})
}

// UnmarshalJSON reads null bounds as NaN.
func (i *Interval) UnmarshalJSON(b []byte) error {
	var v struct{ Value, Lo, Hi *float64 }
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	get := func(p *float64) float64 {
		if p == nil {
			return math.NaN()
		}
		return *p
	}
	*i = Interval{get(v.Value), get(v.Lo), get(v.Hi)}
	return nil
}

// Figures are one endpoint's figures over all its rounds.
type Figures struct {
	// Requests counts the measured bench requests (probes apart); OK and
	// Failed split them; Errors counts failures by class, probes too.
	Requests int            `json:"requests"`
	OK       int            `json:"ok"`
	Failed   int            `json:"failed"`
	Errors   map[string]int `json:"errors,omitempty"`
	// ErrorRate is Failed / Requests (Wilson interval).
	ErrorRate Interval `json:"error_rate"`
	// Availability is the share of all requests, probes included, that
	// were answered; WorstRound the lowest share of one round.
	Availability float64 `json:"availability"`
	WorstRound   float64 `json:"worst_round"`
	// RetryAfter counts answers that asked the client to wait, and
	// HeldS the time the run held the endpoint's requests back for them.
	RetryAfter int     `json:"retry_after"`
	HeldS      float64 `json:"held_s"`
	// TTFT percentiles (ms) and the output speed of a request (tokens/s
	// after its first), distribution-free intervals.
	TTFTP50  Interval `json:"ttft_p50_ms"`
	TTFTP90  Interval `json:"ttft_p90_ms"`
	SpeedP50 Interval `json:"speed_p50"`
	// Throughput is the output tokens/s at the concurrency: the median
	// round, with the lowest and highest rounds as its range.
	Throughput Interval `json:"output_tokens_per_s"`
	// Probe is the medians of the probes over the rounds (ms).
	Probe Probe `json:"probe"`
	// The usage of the successful requests: prompt tokens (cached among
	// them) and output tokens, in all.
	PromptTokens int64 `json:"prompt_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// UsageMissing counts successful requests whose answers carried no
	// usage: their tokens are cl100k_base's counts (Request.Counted), an
	// estimate of what the endpoint bills.
	UsageMissing int `json:"usage_missing,omitempty"`
	// CostPerRequest is the mean cost of a successful request (normal
	// interval); CostPerMOutput the cost per million output tokens at the
	// measured mix (everything spent over the output tokens it bought);
	// CostPerMTokens the cost per million tokens of either kind at that
	// mix; Blended the price blended 3:1 input:output; CostPerHour an
	// hour of workload.rate requests/s, or when unset of Concurrency
	// requests in flight at the measured request rate.
	CostPerRequest Interval `json:"cost_per_request"`
	CostPerMOutput float64  `json:"cost_per_m_output"`
	CostPerMTokens float64  `json:"cost_per_m_tokens"`
	Blended        float64  `json:"blended_3to1"`
	CostPerHour    float64  `json:"cost_per_hour"`
	// Attainment is the share of requests (failed ones miss) that met
	// every SLO (Wilson interval); SLO says whether the endpoint meets the
	// objective at its percentile: meets, fails, or unsure when the
	// interval straddles it. Both are empty without an SLO.
	Attainment *Interval `json:"slo_attainment,omitempty"`
	SLO        string    `json:"slo,omitempty"`
}

// Verdicts of an endpoint on the SLO.
const (
	Meets  = "meets"
	Fails  = "fails"
	Unsure = "unsure"
)

// formulas says how each figure is computed; records carry it.
var formulas = map[string]string{
	"ttft":              "send → first content event, ms; p50 and p90 by nearest rank, with a distribution-free 95% interval (binomial order statistics)",
	"speed":             "a request's (output tokens − 1) / (last content − first content), tokens/s; its p50",
	"throughput":        "output tokens / the round's measured window at the concurrency; the median round, [lowest, highest]",
	"error_rate":        "failed / measured requests, 95% Wilson interval",
	"availability":      "answered / sent, probes included; worst_round is the lowest round",
	"cost_per_request":  "mean over successful requests of ((prompt − cached) × input + cached × cached_input + output × output) / 1e6, from the usage each answer returned (without usage: cl100k_base counts of the prompt and the answer, marked counted); 95% normal interval",
	"cost_per_m_output": "everything spent / output tokens × 1e6: the price of an output token at this workload's mix",
	"cost_per_m_tokens": "everything spent / (prompt + output tokens) × 1e6",
	"blended_3to1":      "(3 × input + output) / 4 per M tokens: the configured price blended 3:1, the convention public leaderboards use",
	"cost_per_hour":     "median round's requests/s × 3600 × cost_per_request: an hour with the workload's concurrency in flight",
	"slo":               "meets when the Wilson interval of the share meeting every SLO lies at or above the percentile, fails when below, unsure when it straddles it",
	"ranking":           "keys in workload.order (default slo,errors,cost,ttft), first decides first; two endpoints differ on a key only when the verdict package's test tells them apart beyond tolerance (5% for speed and cost, 2 points for errors) on enough values (20 answers each for cost, ttft and speed; 36 for ttft_p90); tied on every key, they share a rank, and the tie says key by key why",
}

func nan() float64 { return math.NaN() }

// figures computes an endpoint's figures from its rows and rounds.
func figures(res *Result, w Workload, slos []verdict.SLO, pct float64) Figures {
	var f Figures
	f.Errors = map[string]int{}
	var ttft, speed, costs []float64
	var sent, answered int
	perRound := map[int][2]int{}
	for _, q := range res.Requests {
		sent++
		rr := perRound[q.Round]
		rr[1]++
		if q.RetryAfterS > 0 {
			f.RetryAfter++
		}
		if q.OK {
			answered++
			rr[0]++
		} else {
			f.Errors[q.Class]++
		}
		perRound[q.Round] = rr
		if q.Probe {
			continue
		}
		f.Requests++
		if !q.OK {
			f.Failed++
			continue
		}
		f.OK++
		ttft, costs = append(ttft, q.TTFT), append(costs, q.Cost)
		if q.Speed > 0 {
			speed = append(speed, q.Speed)
		}
		if q.Counted {
			f.UsageMissing++
		}
		f.PromptTokens += int64(max(q.PromptTokens, 0))
		f.CachedTokens += int64(max(q.CachedTokens, 0))
		f.OutputTokens += int64(max(q.OutputTokens, 0))
	}
	if len(f.Errors) == 0 {
		f.Errors = nil
	}
	lo, hi := verdict.Wilson(f.Failed, f.Requests)
	f.ErrorRate = Interval{share(f.Failed, f.Requests), lo, hi}
	f.Availability, f.WorstRound = share(answered, sent), 1
	for _, rr := range perRound {
		f.WorstRound = min(f.WorstRound, share(rr[0], rr[1]))
	}
	if sent == 0 {
		f.WorstRound = 0
	}
	f.TTFTP50, f.TTFTP90 = quantileOf(ttft, 0.5), quantileOf(ttft, 0.9)
	f.SpeedP50 = quantileOf(speed, 0.5)
	var tps, rates []float64
	var probes []Probe
	for _, r := range res.Rounds {
		f.HeldS += r.HeldS
		if r.OK > 0 {
			tps, rates = append(tps, r.Throughput), append(rates, r.RequestRate)
		}
		if r.Probe.OK > 0 {
			probes = append(probes, r.Probe)
		}
	}
	f.Throughput = rangeOf(tps)
	f.Probe = medianProbe(probes)
	f.CostPerRequest = meanOf(costs)
	spent := f.CostPerRequest.Value * float64(len(costs))
	if f.OutputTokens > 0 {
		f.CostPerMOutput = spent / float64(f.OutputTokens) * 1e6
	}
	if t := f.PromptTokens + f.OutputTokens; t > 0 {
		f.CostPerMTokens = spent / float64(t) * 1e6
	}
	f.Blended = (3*res.Price.Input + res.Price.Output) / 4
	rate := verdict.Median(rates)
	if w.Rate > 0 {
		rate = w.Rate
	}
	f.CostPerHour = rate * 3600 * f.CostPerRequest.Value
	if len(slos) > 0 {
		met := 0
		for _, q := range res.Requests {
			if !q.Probe && q.Met {
				met++
			}
		}
		lo, hi := verdict.Wilson(met, f.Requests)
		f.Attainment = &Interval{share(met, f.Requests), lo, hi}
		switch {
		case f.Requests > 0 && lo >= pct:
			f.SLO = Meets
		case f.Requests > 0 && hi < pct:
			f.SLO = Fails
		default:
			f.SLO = Unsure
		}
	}
	return f
}

func share(k, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(k) / float64(n)
}

// quantile is the p-th quantile of xs by the one percentile rule, with
// its interval.
func quantileOf(xs []float64, p float64) Interval {
	if len(xs) == 0 {
		return Interval{nan(), nan(), nan()}
	}
	lo, hi := verdict.QuantileInterval(xs, p)
	return Interval{quantile.Of(xs, p), lo, hi}
}

// rangeOf is the median of xs between its extremes.
func rangeOf(xs []float64) Interval {
	if len(xs) == 0 {
		return Interval{0, nan(), nan()}
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return Interval{verdict.Median(xs), lo, hi}
}

// meanOf is the mean of xs with its 95% interval (verdict.MeanInterval);
// 0 for none: a cost of nothing bought, which the other costs multiply.
func meanOf(xs []float64) Interval {
	if len(xs) == 0 {
		return Interval{0, nan(), nan()}
	}
	m, lo, hi := verdict.MeanInterval(xs)
	return Interval{m, lo, hi}
}
