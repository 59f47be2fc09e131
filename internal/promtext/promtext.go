// Package promtext reads a Prometheus text exposition (what vLLM,
// SGLang, TGI, llama.cpp, the DCGM exporter and the gateway itself serve
// at /metrics) into a Scrape and answers the few questions asked of one:
// a metric's sum, mean or largest series, a histogram's sum and count, a
// label's value. It knows no server's metric names (package engine does)
// and no HTTP library: the caller fetches the text.
package promtext

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MaxBytes bounds one exposition: Parse reads no more than this, so a
// hostile endpoint cannot make it hold more; fetchers bound their reads
// by it too, and refuse a longer body rather than parse a cut one.
const MaxBytes = 16 << 20

// Hist is a histogram's (or a summary's) running sum and count: the
// mean over a window is the difference of sums over the difference of
// counts.
type Hist struct {
	Sum, Count float64
	// Reported is set when the exposition has the histogram at all.
	Reported bool
}

// Scrape is one reading of a Prometheus text exposition. It is not
// changed after Parse, so it may be read from several goroutines.
type Scrape struct {
	At   time.Time
	fams map[string]*dto.MetricFamily
}

// Parse reads a Prometheus text exposition (format 0.0.4, the one vLLM,
// SGLang, TGI, llama.cpp and the DCGM exporter serve). Metric names may
// hold colons, as vLLM's do.
func Parse(r io.Reader, at time.Time) (*Scrape, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(r, MaxBytes))
	if err != nil {
		return nil, fmt.Errorf("promtext: %w", err)
	}
	return &Scrape{At: at, fams: fams}, nil
}

// Has reports whether the exposition has the metric.
func (s *Scrape) Has(name string) bool {
	_, ok := s.fams[name]
	return ok
}

// value is a counter's, gauge's or untyped metric's value.
func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return math.NaN()
}

func labelIs(m *dto.Metric, where [][2]string) bool {
	for _, w := range where {
		found := false
		for _, l := range m.Label {
			if l.GetName() == w[0] {
				found = l.GetValue() == w[1]
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Sum is the sum of the metric's series whose labels match where (name,
// value pairs), and whether any series matched. Values that are not
// finite are left out, and a sum past float64's range is none.
func (s *Scrape) Sum(name string, where ...[2]string) (float64, bool) {
	var sum float64
	n := 0
	for _, m := range s.metrics(name) {
		v := value(m)
		if !labelIs(m, where) || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		sum += v
		n++
	}
	if math.IsInf(sum, 0) {
		return 0, false
	}
	return sum, n > 0
}

// Mean is the mean of the metric's finite series (one per GPU, say);
// none when their sum is past float64's range.
func (s *Scrape) Mean(name string) (float64, bool) {
	var sum float64
	n := 0
	for _, m := range s.metrics(name) {
		if v := value(m); !math.IsNaN(v) && !math.IsInf(v, 0) {
			sum += v
			n++
		}
	}
	if n == 0 || math.IsInf(sum, 0) {
		return 0, false
	}
	return sum / float64(n), true
}

// Max is the largest of the metric's finite series.
func (s *Scrape) Max(name string) (float64, bool) {
	best, ok := math.Inf(-1), false
	for _, m := range s.metrics(name) {
		if v := value(m); !math.IsNaN(v) && !math.IsInf(v, 0) && v > best {
			best, ok = v, true
		}
	}
	return best, ok
}

// Hist is the sum and count of a histogram over all its series (a
// summary's work as well).
func (s *Scrape) Hist(name string) (Hist, bool) {
	var h Hist
	n := 0
	for _, m := range s.metrics(name) {
		switch {
		case m.Histogram != nil:
			h.Sum += m.Histogram.GetSampleSum()
			h.Count += float64(m.Histogram.GetSampleCount())
		case m.Summary != nil:
			h.Sum += m.Summary.GetSampleSum()
			h.Count += float64(m.Summary.GetSampleCount())
		default:
			continue
		}
		n++
	}
	h.Reported = n > 0
	return h, h.Reported
}

// Label is the value of label on the metric's first series.
func (s *Scrape) Label(name, label string) (string, bool) {
	for _, m := range s.metrics(name) {
		for _, l := range m.Label {
			if l.GetName() == label {
				return l.GetValue(), true
			}
		}
	}
	return "", false
}

// LabelNumber is Label read as a number; "None" and the like are absent.
func (s *Scrape) LabelNumber(name, label string) (float64, bool) {
	v, ok := s.Label(name, label)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// IsCounter reports whether the metric is typed as a counter.
func (s *Scrape) IsCounter(name string) bool {
	f := s.fams[name]
	return f != nil && f.GetType() == dto.MetricType_COUNTER
}

func (s *Scrape) metrics(name string) []*dto.Metric {
	if f := s.fams[name]; f != nil {
		return f.Metric
	}
	return nil
}
