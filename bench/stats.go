package bench

import (
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/infergate/infergate/internal/quantile"
)

// Dist is a latency distribution kept in an HdrHistogram (1 ns to 10 min,
// 3 significant digits).
type Dist struct{ h *hdrhistogram.Histogram }

// NewDist returns an empty distribution.
func NewDist() *Dist { return &Dist{h: hdrhistogram.New(1, int64(10*time.Minute), 3)} }

// Add records d; values out of range are clamped.
func (d *Dist) Add(v time.Duration) {
	if v < 1 {
		v = 1
	}
	if err := d.h.RecordValue(int64(v)); err != nil {
		_ = d.h.RecordValue(d.h.HighestTrackableValue())
	}
}

// Merge adds every value of o to d.
func (d *Dist) Merge(o *Dist) { d.h.Merge(o.h) }

// Count is the number of values recorded.
func (d *Dist) Count() int64 { return d.h.TotalCount() }

// Quantile returns the value at q in [0,100], e.g. 50 or 99.
func (d *Dist) Quantile(q float64) time.Duration { return time.Duration(d.h.ValueAtQuantile(q)) }

// Percentiles describe one distribution. A quantile is left out when n is
// too small to carry it (p90 needs 10 values, p95 20, p99 100;
// quantile.Enough).
type Percentiles struct {
	N    int64    `json:"n"`
	Mean float64  `json:"mean"`
	Min  float64  `json:"min"`
	Max  float64  `json:"max"`
	P50  float64  `json:"p50"`
	P90  *float64 `json:"p90,omitempty"`
	P95  *float64 `json:"p95,omitempty"`
	P99  *float64 `json:"p99,omitempty"`
}

// percentiles of exact samples, by the one rule (package quantile).
func percentiles(xs []float64) *Percentiles {
	if len(xs) == 0 {
		return nil
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	p := &Percentiles{N: int64(len(s)), Min: s[0], Max: s[len(s)-1]}
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	p.Mean = sum / float64(len(s))
	p.P50 = quantile.Rank(s, 0.5)
	p.P90, p.P95, p.P99 = quantile.Maybe(s, 0.90), quantile.Maybe(s, 0.95), quantile.Maybe(s, 0.99)
	return p
}

// distPercentiles reads a Dist, in milliseconds.
func distPercentiles(d *Dist) *Percentiles {
	n := d.Count()
	if n == 0 {
		return nil
	}
	ms := func(v int64) float64 { return float64(v) / 1e6 }
	p := &Percentiles{N: n, Mean: d.h.Mean() / 1e6, Min: ms(d.h.Min()), Max: ms(d.h.Max()), P50: ms(d.h.ValueAtQuantile(50))}
	set := func(dst **float64, q float64, need int64) {
		if n >= need {
			v := ms(d.h.ValueAtQuantile(q))
			*dst = &v
		}
	}
	set(&p.P90, 90, 10)
	set(&p.P95, 95, 20)
	set(&p.P99, 99, 100)
	return p
}
