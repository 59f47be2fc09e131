package promtext

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseRefusesGarbage(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"vllm:num_requests_running{ 3", "# TYPE x gauge\nx 1\n# TYPE x counter\n", "x{a=\"b\"} notanumber"} {
		if _, err := Parse(strings.NewReader(in), time.Now()); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}

// exposition has a metric per question a reader asks, with the cases a
// server's text throws at them: colons in names, labels, values that
// are not finite, a histogram and a summary, a label that is no number.
const exposition = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0"} 3
vllm:num_requests_running{engine="1"} 4
vllm:num_requests_running{engine="2"} NaN
# TYPE gpu_util gauge
gpu_util{gpu="0"} 90
gpu_util{gpu="1"} 70
gpu_util{gpu="2"} +Inf
# TYPE in_flight gauge
in_flight{level="global",unit="requests"} 5
in_flight{level="tenant",unit="requests"} 2
# TYPE served_total counter
served_total 12
# TYPE ttft_seconds histogram
ttft_seconds_bucket{le="1"} 2
ttft_seconds_bucket{le="+Inf"} 3
ttft_seconds_sum 2.5
ttft_seconds_count 3
# TYPE queue_seconds summary
queue_seconds_sum 1
queue_seconds_count 4
# TYPE huge gauge
huge{gpu="0"} 1e308
huge{gpu="1"} 1e308
# TYPE cache_config_info gauge
cache_config_info{block_size="16",num_gpu_blocks="None"} 1
`

func TestQueries(t *testing.T) {
	t.Parallel()
	s, err := Parse(strings.NewReader(exposition), time.Unix(7, 0))
	if err != nil {
		t.Fatal(err)
	}
	num := func(v float64, ok bool) float64 {
		if !ok {
			return math.NaN()
		}
		return v
	}
	hist := func(h Hist, ok bool) float64 {
		if !ok || !h.Reported {
			return math.NaN()
		}
		return h.Sum / h.Count
	}
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"sum leaves out NaN", num(s.Sum("vllm:num_requests_running")), 7},
		{"sum of the series with the labels", num(s.Sum("in_flight", [2]string{"level", "global"}, [2]string{"unit", "requests"})), 5},
		{"sum of no series", num(s.Sum("in_flight", [2]string{"level", "pool"})), math.NaN()},
		{"sum of a counter", num(s.Sum("served_total")), 12},
		{"sum of an absent metric", num(s.Sum("absent")), math.NaN()},
		{"mean leaves out +Inf", num(s.Mean("gpu_util")), 80},
		{"max leaves out +Inf", num(s.Max("gpu_util")), 90},
		{"histogram mean", hist(s.Hist("ttft_seconds")), 2.5 / 3},
		{"summary mean", hist(s.Hist("queue_seconds")), 0.25},
		{"a gauge is no histogram", hist(s.Hist("gpu_util")), math.NaN()},
		{"a sum past float64's range is none", num(s.Sum("huge")), math.NaN()},
		{"so is a mean whose sum is", num(s.Mean("huge")), math.NaN()},
		{"max of huge values", num(s.Max("huge")), 1e308},
		{"label as a number", num(s.LabelNumber("cache_config_info", "block_size")), 16},
		{"None is no number", num(s.LabelNumber("cache_config_info", "num_gpu_blocks")), math.NaN()},
	} {
		if math.IsNaN(tc.want) != math.IsNaN(tc.got) || !math.IsNaN(tc.want) && math.Abs(tc.got-tc.want) > 1e-9 {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if !s.Has("served_total") || s.Has("served") || !s.IsCounter("served_total") || s.IsCounter("gpu_util") {
		t.Error("Has or IsCounter is wrong about served_total or gpu_util")
	}
	if !s.At.Equal(time.Unix(7, 0)) {
		t.Errorf("At %v", s.At)
	}
}

// FuzzParse holds that no text panics the parser or a question asked of
// what it parsed, and that no answer is infinite or NaN when it says ok.
func FuzzParse(f *testing.F) {
	f.Add([]byte(exposition))
	f.Add([]byte("x NaN\nx +Inf\n"))
	f.Add([]byte("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 1e308\nh_count 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(bytes.NewReader(b), time.Unix(0, 0))
		if err != nil {
			return
		}
		for name := range s.fams {
			for _, q := range []func(string) (float64, bool){
				func(n string) (float64, bool) { return s.Sum(n) },
				s.Mean, s.Max,
				func(n string) (float64, bool) { return s.LabelNumber(n, "le") },
			} {
				if v, ok := q(name); ok && (math.IsNaN(v) || math.IsInf(v, 0)) {
					t.Fatalf("%s: %v from %q", name, v, b)
				}
			}
			_, _ = s.Hist(name)
			_, _ = s.Label(name, "le")
			_ = s.IsCounter(name)
		}
	})
}
