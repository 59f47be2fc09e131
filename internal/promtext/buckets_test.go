package promtext

import (
	"math"
	"strings"
	"testing"
	"time"
)

const classHist = `# TYPE lat_seconds histogram
lat_seconds_bucket{class="flex",le="0.1"} 10
lat_seconds_bucket{class="flex",le="0.5"} 30
lat_seconds_bucket{class="flex",le="1"} 40
lat_seconds_bucket{class="flex",le="+Inf"} 40
lat_seconds_sum{class="flex"} 12
lat_seconds_count{class="flex"} 40
lat_seconds_bucket{class="priority",le="0.1"} 10
lat_seconds_bucket{class="priority",le="0.5"} 10
lat_seconds_bucket{class="priority",le="1"} 10
lat_seconds_bucket{class="priority",le="+Inf"} 20
lat_seconds_sum{class="priority"} 40
lat_seconds_count{class="priority"} 20
`

// TestBucketsAndQuantile: buckets by label, summed over series, and the
// quantile as Prometheus' histogram_quantile gives it.
func TestBucketsAndQuantile(t *testing.T) {
	t.Parallel()
	s, err := Parse(strings.NewReader(classHist), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	flex := s.Buckets("lat_seconds", [2]string{"class", "flex"})
	tests := []struct {
		name string
		b    []Bucket
		q    float64
		want float64
		ok   bool
	}{
		{"median in the second bucket", flex, 0.5, 0.1 + 0.4*(20-10)/20.0, true},
		{"in the first bucket, from 0", flex, 0.1, 0.04, true},
		{"top of the last finite bucket", flex, 0.99, 0.5 + 0.5*(39.6-30)/10, true},
		{"in +Inf: the highest finite bound", s.Buckets("lat_seconds", [2]string{"class", "priority"}), 0.9, 1, true},
		{"both series summed", s.Buckets("lat_seconds"), 0.25, 0.1 * 15 / 20, true},
		{"no such series", s.Buckets("lat_seconds", [2]string{"class", "gold"}), 0.5, 0, false},
		{"q out of range", flex, 1, 0, false},
		{"nothing observed", Delta(flex, flex), 0.5, 0, false},
	}
	for _, tc := range tests {
		got, ok := Quantile(tc.b, tc.q)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: Quantile(%v, %v) = %v, %v; want %v, %v", tc.name, tc.b, tc.q, got, ok, tc.want, tc.ok)
		}
	}
	if v := s.LabelValues("lat_seconds", "class"); strings.Join(v, ",") != "flex,priority" {
		t.Errorf("label values %v", v)
	}
}

func TestDelta(t *testing.T) {
	t.Parallel()
	before := []Bucket{{0.1, 5}, {math.Inf(1), 10}}
	now := []Bucket{{0.1, 7}, {math.Inf(1), 20}}
	if d := Delta(now, before); d[0].Count != 2 || d[1].Count != 10 {
		t.Errorf("delta %v, want 2 and 10", d)
	}
	// A restart: the counts went down, so the whole reading is the window's.
	if d := Delta(before, now); d[0].Count != 5 || d[1].Count != 10 {
		t.Errorf("after a restart %v, want the new reading whole", d)
	}
	if d := Delta(now, nil); len(d) != 2 || d[1].Count != 20 {
		t.Errorf("without a reading before %v", d)
	}
}
