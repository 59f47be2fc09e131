package rank

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/infergate/infergate/verdict"
)

// Plan is what a run will send and what that much can tell apart, key by
// key of the order, stated before anything is sent.
type Plan struct {
	// Bound is the most requests the run sends (Bound).
	Bound string `json:"bound"`
	Order string `json:"order"`
	// Requests is the measured requests each endpoint gets (requests a
	// round × rounds); its answers are at most as many.
	Requests int       `json:"requests"`
	Keys     []KeyPlan `json:"keys"`
	// Blind says the order counts no failed request: neither errors nor
	// an SLO (whose attainment counts a failure as a miss) is in it, and
	// cost and speed are figures of answers only.
	Blind bool `json:"blind,omitempty"`
}

// KeyPlan is what a run's size can tell apart on one key of the order.
type KeyPlan struct {
	Key string `json:"key"`
	// Need is the requests (errors, slo) or answers (cost, ttft,
	// ttft_p90, speed) an endpoint needs for the key to tell endpoints
	// apart: for errors, one failing a third of its requests from one
	// failing none; 0 when nothing can (slo without an SLO).
	Need int `json:"need,omitempty"`
	// TooSmall says the run's requests fall short of Need: every
	// endpoint will tie on the key.
	TooSmall bool `json:"too_small,omitempty"`
	// Says is the key's line in words.
	Says string `json:"says"`
}

// planShare is the failure share the plan asks the errors key to tell
// from none: an endpoint failing a third of its requests must never tie
// with one that answers them all.
const planShare = 1.0 / 3

// planOf states what a run of f (its workload's defaults filled in)
// will send and, for each key of the order, whether that many requests
// can tell endpoints apart on it, and if not, how many would.
func planOf(f *File) Plan {
	w := f.Workload
	n := w.Requests * w.Rounds
	p := Plan{Bound: bound(f), Order: w.Order, Requests: n}
	keys := orderKeys(w.Order)
	p.Blind = !slices.Contains(keys, "errors") && !(slices.Contains(keys, "slo") && w.SLO != "")
	more := func(need int) string {
		rounds := fmt.Sprintf("%d rounds", w.Rounds)
		if w.Rounds == 1 {
			rounds = "1 round"
		}
		return fmt.Sprintf("send --requests %d (at %s) or --rounds %d", ceilDiv(need, w.Rounds), rounds, ceilDiv(need, w.Requests))
	}
	answers := func(k KeyPlan, what string) KeyPlan {
		k.TooSmall = n < k.Need
		if k.TooSmall {
			k.Says = fmt.Sprintf("%s: at most %d answers an endpoint, its test needs %d: every endpoint will tie on it; %s", what, n, k.Need, more(k.Need))
		} else {
			k.Says = fmt.Sprintf("%s: at most %d answers an endpoint (its test needs %d; failed requests give none)", what, n, k.Need)
		}
		return k
	}
	for _, key := range keys {
		k := KeyPlan{Key: key}
		switch key {
		case "errors":
			k.Need = needErrors(planShare)
			k.TooSmall = n < k.Need
			if m := minFailures(n); m > 0 {
				k.Says = fmt.Sprintf("errors: %d requests an endpoint tell one failing %.0f%% or more (%d of %d) from one failing none", n, 100*float64(m)/float64(n), m, n)
			} else {
				k.Says = fmt.Sprintf("errors: %d requests an endpoint cannot tell even one failing them all from one failing none", n)
			}
			if k.TooSmall {
				k.Says += fmt.Sprintf(": one failing a third would tie with it; that needs %d: %s", k.Need, more(k.Need))
			}
		case "slo":
			if w.SLO == "" {
				k.Says = "slo: no SLO set (--slo): ranks nothing"
				break
			}
			pct, err := verdict.ParsePercentile(w.SLOPercentile)
			if err != nil {
				pct = 0.9
			}
			k.Need = needMeet(pct)
			k.TooSmall = n < k.Need
			if k.TooSmall {
				k.Says = fmt.Sprintf("slo: %d requests an endpoint, and showing %s met needs %d even when all meet it: none can be shown to meet it, every endpoint will tie on it; %s",
					n, w.SLOPercentile, k.Need, more(k.Need))
			} else {
				k.Says = fmt.Sprintf("slo: %d requests an endpoint (showing %s met needs at least %d, failed ones missing it)", n, w.SLOPercentile, k.Need)
			}
		case "cost":
			k.Need = verdict.MinSamples
			k = answers(k, "cost")
		case "ttft":
			k.Need = verdict.MinSamples
			k = answers(k, "ttft")
		case "speed":
			k.Need = verdict.MinSamples
			k = answers(k, "speed")
		case "ttft_p90":
			k.Need = needQuantile(0.9)
			k = answers(k, "ttft_p90")
		}
		p.Keys = append(p.Keys, k)
	}
	return p
}

// TooSmall names the keys the run is too small to tell endpoints apart
// on.
func (p Plan) TooSmall() []string {
	var out []string
	for _, k := range p.Keys {
		if k.TooSmall {
			out = append(out, k.Key)
		}
	}
	return out
}

// Write prints the plan, a line each, after prefix.
func (p Plan) Write(w io.Writer, prefix string) {
	fmt.Fprintf(w, "%s%s\n", prefix, p.Bound)
	fmt.Fprintf(w, "%sorder %s, first decides first; %d measured requests an endpoint\n", prefix, p.Order, p.Requests)
	for _, k := range p.Keys {
		mark := ""
		if k.TooSmall {
			mark = "too small: "
		}
		fmt.Fprintf(w, "%s  %s%s\n", prefix, mark, k.Says)
	}
	if p.Blind {
		fmt.Fprintf(w, "%s  the order counts no failed request (cost and speed are of answers only): add errors to --order\n", prefix)
	}
	if ts := p.TooSmall(); len(ts) > 0 {
		fmt.Fprintf(w, "%sthe workload is too small to tell endpoints apart on %s (see above)\n", prefix, strings.Join(ts, ", "))
	}
}

// minFailures is the fewest failures of n requests that the errors key
// tells from none of n; 0 when even n of n is not.
func minFailures(n int) int {
	for k := 1; k <= n; k++ {
		if verdict.Rates(0, "error_rate", 0, n, k, n, errorTolerance).Judgement == verdict.Regressed {
			return k
		}
	}
	return 0
}

// needErrors is the fewest requests an endpoint at which one failing
// share of them is told from one failing none.
func needErrors(share float64) int {
	for n := 1; n <= maxRequests*maxRounds; n++ {
		k := int(math.Ceil(share * float64(n)))
		if verdict.Rates(0, "error_rate", 0, n, k, n, errorTolerance).Judgement == verdict.Regressed {
			return n
		}
	}
	return maxRequests * maxRounds
}

func ceilDiv(a, b int) int {
	if b <= 0 {
		return a
	}
	return (a + b - 1) / b
}
