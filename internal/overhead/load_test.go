package overhead

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/verdict"
)

// sseServer streams n content events 5ms apart after a 20ms first token.
func sseServer(t *testing.T, n int, inflight *atomic.Int64, peak *atomic.Int64) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cur := inflight.Add(1)
		defer inflight.Add(-1)
		for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
		}
		w.Header().Set("Content-Type", "text/event-stream")
		time.Sleep(20 * time.Millisecond)
		for i := range n {
			if i > 0 {
				time.Sleep(5 * time.Millisecond)
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(s.Close)
	return s
}

func TestLoadMeasuresTTFTAndGaps(t *testing.T) {
	var inflight, peak atomic.Int64
	s := sseServer(t, 5, &inflight, &peak)
	st, err := Load(context.Background(), testClient(t, s.URL), Target{Body: []byte(`{}`), Stream: true},
		Options{Concurrency: 4, MaxRequests: 12})
	if err != nil {
		t.Fatal(err)
	}
	if st.Requests != 12 || st.Errors != 0 || st.Events != 60 {
		t.Fatalf("requests %d errors %d (%v) events %d, want 12, 0, 60", st.Requests, st.Errors, st.FirstErr, st.Events)
	}
	if p := peak.Load(); p != 4 {
		t.Errorf("peak concurrency at the server %d, want 4", p)
	}
	if ttft := st.TTFT.Quantile(50); ttft < 20*time.Millisecond || ttft > 40*time.Millisecond {
		t.Errorf("TTFT p50 %v, want about 20ms", ttft)
	}
	if g := st.Gap.Quantile(50); g < 5*time.Millisecond || g > 10*time.Millisecond {
		t.Errorf("gap p50 %v, want about 5ms", g)
	}
	if st.Gap.Count() != 48 {
		t.Errorf("%d gaps, want 4 per request", st.Gap.Count())
	}
}

func TestLoadCountsBrokenStreams(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n") // no [DONE]
	}))
	defer s.Close()
	st, _ := Load(context.Background(), testClient(t, s.URL), Target{Body: []byte(`{}`), Stream: true}, Options{Concurrency: 1, MaxRequests: 3})
	if st.Errors != 3 {
		t.Errorf("%d of 3 truncated streams counted as errors", st.Errors)
	}
}

func TestRampUpSpreadsStarts(t *testing.T) {
	// Each request outlasts the ramp, so each user sends exactly one.
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(500 * time.Millisecond)
		io.WriteString(w, `{"choices":[{"message":{"content":"x"}}]}`)
	}))
	defer s.Close()
	var mu sync.Mutex
	var first, last time.Time
	rn := &bench.Runner{Client: testClient(t, s.URL), Workload: fixedWorkload(`{}`), Sink: func(r *bench.Result) {
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() || r.Sent.Before(first) {
			first = r.Sent
		}
		if r.Sent.After(last) {
			last = r.Sent
		}
	}}
	if _, err := rn.Run(context.Background(), 0, bench.LoadSpec{Mode: "closed", Concurrency: 8, Requests: 8, RampUp: 400 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if d := last.Sub(first); d < 300*time.Millisecond {
		t.Errorf("8 starts spread over %v, want about 350ms", d)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2}} { // nearest rank: the lower middle
		if got := verdict.Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func testClient(t *testing.T, url string) *bench.Client {
	t.Helper()
	c, err := bench.NewClient(url+"/v1/chat/completions", bench.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
