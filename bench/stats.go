package bench

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
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
