package diagnose

import (
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/infergate/infergate/internal/engine"
	"github.com/infergate/infergate/internal/promtext"
	"github.com/infergate/infergate/openai"
)

// Num is a figure that may be unknown (NaN); it is null in JSON.
type Num float64

// Known reports whether n is a figure.
func (n Num) Known() bool { return !math.IsNaN(float64(n)) }

// MarshalJSON writes null for an unknown figure and rounds to 4 digits
// after the point.
func (n Num) MarshalJSON() ([]byte, error) {
	if !n.Known() || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, math.Round(float64(n)*1e4)/1e4, 'f', -1, 64), nil
}

// UnmarshalJSON reads null as unknown.
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Num(math.NaN())
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*n = Num(f)
	return nil
}

var unknown = Num(math.NaN())

// Stat is a gauge over a window: its mean, largest and last value, and
// its trend (least-squares slope, per second).
type Stat struct {
	Mean  Num `json:"mean"`
	Max   Num `json:"max"`
	Last  Num `json:"last"`
	Trend Num `json:"trend_per_s"`
}

func stat(t, v []float64) Stat {
	var xs, ys []float64
	for i := range v {
		if !math.IsNaN(v[i]) {
			xs, ys = append(xs, t[i]), append(ys, v[i])
		}
	}
	if len(ys) == 0 {
		return Stat{unknown, unknown, unknown, unknown}
	}
	var sum, best float64 = 0, math.Inf(-1)
	for _, y := range ys {
		sum += y
		best = math.Max(best, y)
	}
	st := Stat{Mean: Num(sum / float64(len(ys))), Max: Num(best), Last: Num(ys[len(ys)-1]), Trend: unknown}
	if len(ys) >= 3 {
		mx, my := mean(xs), sum/float64(len(ys))
		var sxy, sxx float64
		for i := range xs {
			sxy += (xs[i] - mx) * (ys[i] - my)
			sxx += (xs[i] - mx) * (xs[i] - mx)
		}
		if sxx > 0 {
			st.Trend = Num(sxy / sxx)
		}
	}
	return st
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// rate is a counter's increase per second between the first and the last
// reading that have it; a reset (a restart) counts from zero.
func rate(t, v []float64) Num {
	i, j := -1, -1
	for k := range v {
		if !math.IsNaN(v[k]) {
			if i < 0 {
				i = k
			}
			j = k
		}
	}
	if i < 0 || j <= i || t[j] <= t[i] {
		return unknown
	}
	inc := 0.0
	prev := v[i]
	for k := i + 1; k <= j; k++ {
		if math.IsNaN(v[k]) {
			continue
		}
		if v[k] >= prev {
			inc += v[k] - prev
		} else {
			inc += v[k]
		}
		prev = v[k]
	}
	return Num(inc / (t[j] - t[i]))
}

// histMean is a histogram's mean over the window (seconds), unknown when
// nothing was observed in it.
func histMean(a, b promtext.Hist) Num {
	dc := b.Count - a.Count
	if dc <= 0 {
		return unknown
	}
	return Num((b.Sum - a.Sum) / dc)
}

// column is f of each reading, in order.
func column[R any](rs []R, f func(R) float64) []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return v
}

// offsets are the readings' times, in seconds from the first's.
func offsets[R any](rs []R, at func(R) time.Time) []float64 {
	t := make([]float64, len(rs))
	for i, r := range rs {
		t[i] = at(r).Sub(at(rs[0])).Seconds()
	}
	return t
}

// Backend is one backend's readings summarised over a window.
type Backend struct {
	Name    string  `json:"name"`
	Server  string  `json:"server"`
	Seconds float64 `json:"window_s"`
	Samples int     `json:"samples"`
	Running Stat    `json:"running"`
	Waiting Stat    `json:"waiting"`
	KVUsage Stat    `json:"kv_cache_usage"`
	GPUUtil Stat    `json:"gpu_util_percent"`
	// PreemptionsPerS is the preemption (retraction) rate.
	PreemptionsPerS Num `json:"preemptions_per_s"`
	PromptTokPerS   Num `json:"prompt_tokens_per_s"`
	OutputTokPerS   Num `json:"output_tokens_per_s"`
	// TTFT, Queue and ITL are the server's mean times in the window (s).
	TTFT  Num `json:"ttft_s"`
	Queue Num `json:"queue_s"`
	ITL   Num `json:"itl_s"`
	// MaxRunning is the running batch's bound; MaxRunningFrom says where
	// it came from ("server": its metrics, "slots": llama.cpp's slot
	// count, "observed": the most that ran while requests waited with the
	// KV cache not full, "").
	MaxRunning     Num    `json:"max_running"`
	MaxRunningFrom string `json:"max_running_from,omitempty"`
	KVTokens       Num    `json:"kv_cache_tokens"`
	// Slots is llama.cpp's slot count (-np), SlotContext each slot's
	// context in tokens; unknown for other servers.
	Slots       Num `json:"slots"`
	SlotContext Num `json:"slot_context_tokens"`
	// BusyPerDecode is llama.cpp's mean busy slots per llama_decode()
	// call in the window: how full its batch ran, by its own count.
	BusyPerDecode Num `json:"busy_slots_per_decode"`
}

// Summarise sums up one backend's readings, in time order, with the GPU
// utilisation read beside each (NaN, or a shorter slice, when unknown).
func Summarise(name string, rs []engine.Reading, util []float64) Backend {
	b := Backend{Name: name, Samples: len(rs), Server: engine.Unknown}
	if len(rs) == 0 {
		nan := Stat{unknown, unknown, unknown, unknown}
		b.Running, b.Waiting, b.KVUsage, b.GPUUtil = nan, nan, nan, nan
		b.PreemptionsPerS, b.PromptTokPerS, b.OutputTokPerS, b.TTFT, b.Queue, b.ITL, b.MaxRunning, b.KVTokens =
			unknown, unknown, unknown, unknown, unknown, unknown, unknown, unknown
		b.Slots, b.SlotContext, b.BusyPerDecode = unknown, unknown, unknown
		return b
	}
	b.Server = rs[0].Server
	n := len(rs)
	t := offsets(rs, func(r engine.Reading) time.Time { return r.At })
	col := func(f func(engine.Reading) float64) []float64 { return column(rs, f) }
	b.Seconds = t[n-1]
	b.Running = stat(t, col(func(r engine.Reading) float64 { return r.Running }))
	b.Waiting = stat(t, col(func(r engine.Reading) float64 { return r.Waiting }))
	b.KVUsage = stat(t, col(func(r engine.Reading) float64 { return r.KVUsage }))
	u := make([]float64, n)
	for i := range u {
		u[i] = math.NaN()
		if i < len(util) {
			u[i] = util[i]
		}
	}
	b.GPUUtil = stat(t, u)
	b.PreemptionsPerS = rate(t, col(func(r engine.Reading) float64 { return r.Preemptions }))
	if ret := stat(t, col(func(r engine.Reading) float64 { return r.Retracting })); ret.Mean.Known() {
		// A gauge of retractions: its mean stands in for a rate.
		b.PreemptionsPerS = ret.Mean
	}
	b.PromptTokPerS = rate(t, col(func(r engine.Reading) float64 { return r.PromptTokens }))
	b.OutputTokPerS = rate(t, col(func(r engine.Reading) float64 { return r.OutputTokens }))
	first, last := rs[0], rs[n-1]
	b.TTFT, b.Queue, b.ITL = unknown, unknown, unknown
	if first.TTFT.Reported && last.TTFT.Reported {
		b.TTFT = histMean(first.TTFT, last.TTFT)
	}
	if first.Queue.Reported && last.Queue.Reported {
		b.Queue = histMean(first.Queue, last.Queue)
	}
	if first.ITL.Reported && last.ITL.Reported {
		b.ITL = histMean(first.ITL, last.ITL)
	}
	b.MaxRunning, b.KVTokens = Num(last.MaxRunning), Num(last.KVTokens)
	b.Slots, b.SlotContext, b.BusyPerDecode = unknown, unknown, unknown
	for _, r := range rs {
		// The slot count comes from a second endpoint (/props) and may be
		// missing from some readings.
		if r.Slots > 0 {
			b.Slots = Num(r.Slots)
		}
		if r.SlotContext > 0 {
			b.SlotContext = Num(r.SlotContext)
		}
	}
	if dd := rate(t, col(func(r engine.Reading) float64 { return r.Decodes })); dd > 0 {
		if bd := rate(t, col(func(r engine.Reading) float64 { return r.BusySlotDecodes })); bd.Known() {
			b.BusyPerDecode = bd / dd
		}
	}
	switch {
	case b.MaxRunning.Known():
		b.MaxRunningFrom = "server"
	case b.Slots.Known():
		// llama.cpp runs at most one sequence per slot.
		b.MaxRunning, b.MaxRunningFrom = b.Slots, "slots"
	default:
		// A scheduler leaves requests waiting below its bound only when
		// memory stops it; so the most that ran while others waited, with
		// the cache not nearly full, is the bound.
		most := math.NaN()
		for _, r := range rs {
			if r.Waiting >= 1 && !(r.KVUsage >= kvFull) && !math.IsNaN(r.Running) {
				if math.IsNaN(most) || r.Running > most {
					most = r.Running
				}
			}
		}
		if !math.IsNaN(most) && most > 0 {
			b.MaxRunning, b.MaxRunningFrom = Num(most), "observed"
		}
	}
	return b
}

// Gateway is an infergate gateway's readings summarised over a window.
type Gateway struct {
	Seconds  float64 `json:"window_s"`
	Samples  int     `json:"samples"`
	Queued   Stat    `json:"queued"`
	InFlight Stat    `json:"in_flight"`
	Upstream Stat    `json:"upstream_in_flight"`
	// Limit is the global concurrency cap, 0 when none.
	Limit        float64 `json:"limit"`
	RequestsPerS Num     `json:"requests_per_s"`
	RejectedPerS Num     `json:"rejected_per_s"`
	// QueueWait is the mean time a request waited for a slot (s).
	QueueWait Num `json:"queue_wait_s"`
	// Attribution is the gateway's account of where the time went (its
	// live view's last minute, mean ms per part), when it was read.
	Attribution *openai.Timing `json:"attribution_ms,omitempty"`
}

// SummariseGateway sums up a gateway's readings, in time order.
func SummariseGateway(rs []GatewayReading) Gateway {
	g := Gateway{Samples: len(rs)}
	if len(rs) == 0 {
		nan := Stat{unknown, unknown, unknown, unknown}
		g.Queued, g.InFlight, g.Upstream = nan, nan, nan
		g.RequestsPerS, g.RejectedPerS, g.QueueWait = unknown, unknown, unknown
		return g
	}
	n := len(rs)
	t := offsets(rs, func(r GatewayReading) time.Time { return r.At })
	col := func(f func(GatewayReading) float64) []float64 { return column(rs, f) }
	g.Seconds = t[n-1]
	g.Queued = stat(t, col(func(r GatewayReading) float64 { return r.Queued }))
	g.InFlight = stat(t, col(func(r GatewayReading) float64 { return r.InFlight }))
	g.Upstream = stat(t, col(func(r GatewayReading) float64 { return r.Upstream }))
	g.Limit = rs[n-1].Limit
	g.RequestsPerS = rate(t, col(func(r GatewayReading) float64 { return r.Requests }))
	g.RejectedPerS = rate(t, col(func(r GatewayReading) float64 { return r.Rejected }))
	g.QueueWait = histMean(rs[0].QueueWait, rs[n-1].QueueWait)
	return g
}

// Unknown is the float64 of a figure not measured (NaN).
func Unknown() float64 { return math.NaN() }
