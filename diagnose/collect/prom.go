package collect

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/infergate/infergate/diagnose"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MaxExpositionBytes bounds one scrape: a larger body is cut there and the
// parse fails, rather than a hostile endpoint holding memory.
const MaxExpositionBytes = 16 << 20

// Scrape is one reading of a Prometheus text exposition.
type Scrape struct {
	At   time.Time
	fams map[string]*dto.MetricFamily
}

// Parse reads a Prometheus text exposition (format 0.0.4, the one vLLM,
// SGLang, TGI, llama.cpp and the DCGM exporter serve). Metric names may
// hold colons, as vLLM's do.
func Parse(r io.Reader, at time.Time) (*Scrape, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(r, MaxExpositionBytes))
	if err != nil {
		return nil, fmt.Errorf("diagnose: metrics: %w", err)
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
// finite are left out.
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
	return sum, n > 0
}

// Mean is the mean of the metric's finite series (one per GPU, say).
func (s *Scrape) Mean(name string) (float64, bool) {
	var sum float64
	n := 0
	for _, m := range s.metrics(name) {
		if v := value(m); !math.IsNaN(v) && !math.IsInf(v, 0) {
			sum += v
			n++
		}
	}
	if n == 0 {
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
func (s *Scrape) Hist(name string) (diagnose.Hist, bool) {
	var h diagnose.Hist
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
