package overhead

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/bench"
)

// The front sends each request to the next replica in turn, relays a
// stream event by event (the first event arrives while the replica still
// holds the rest back), and after Close refuses connections; Close twice
// is safe.
func TestFrontRoundRobinStreamsAndStops(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var addrs []string
	for i := range 3 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/stream" {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "data: first from %d\n\n", i)
				w.(http.Flusher).Flush()
				<-release
				fmt.Fprintf(w, "data: [DONE]\n\n")
				return
			}
			fmt.Fprintf(w, "replica %d", i)
		}))
		t.Cleanup(srv.Close)
		addrs = append(addrs, strings.TrimPrefix(srv.URL, "http://"))
	}
	f, err := startFront(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	for range 6 {
		resp, err := http.Get("http://" + f.addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got = append(got, string(b))
	}
	want := "replica 0,replica 1,replica 2,replica 0,replica 1,replica 2"
	if strings.Join(got, ",") != want {
		t.Errorf("the front sent requests to %v, want %s", got, want)
	}
	if c := f.Counts(); c[0] != 2 || c[1] != 2 || c[2] != 2 {
		t.Errorf("counts %v, want 2 each", c)
	}
	// The stream's first event comes through before the replica ends it.
	resp, err := http.Get("http://" + f.addr + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(resp.Body).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if !strings.HasPrefix(l, "data: first from 0") {
			t.Errorf("first line %q", l)
		}
	case <-time.After(5 * time.Second):
		t.Error("the stream's first event was held back by the front")
	}
	close(release)
	resp.Body.Close()
	f.Close()
	f.Close()
	if c, err := net.DialTimeout("tcp", f.addr, time.Second); err == nil {
		c.Close()
		t.Error("the front still accepts connections after Close")
	}
}

func TestCoV(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		xs   []float64
		want float64
	}{
		{"even", []float64{8, 8, 8, 8}, 0},
		{"none", nil, 0},
		{"no requests", []float64{0, 0}, 0},
		// mean 8, deviations ±4: population sd 4, CoV 0.5.
		{"spread", []float64{4, 12, 4, 12}, 0.5},
		{"all on one of four", []float64{32, 0, 0, 0}, 1.7320508075688772},
	} {
		if got := cov(tc.xs); got-tc.want > 1e-12 || tc.want-got > 1e-12 {
			t.Errorf("%s: cov(%v) = %v, want %v", tc.name, tc.xs, got, tc.want)
		}
	}
}

// The scenario's sizing: at full size each sim holds a third of every
// session's context (a session that stays put fits; one that wanders
// does not), and a small run still fits its longest request twice.
func TestSessionCaseSizing(t *testing.T) {
	t.Parallel()
	sc := (&Overhead{}).sessionCase()
	all := sc.shared() + sc.sessions*sc.context()
	if kv := sc.kv(); kv < all/3 || kv > all/3+16 || kv%16 != 0 {
		t.Errorf("kv %d for %d tokens of contexts: want a third, in 16-token blocks", kv, all)
	}
	if own := sc.shared() + sc.sessions/sc.sims*sc.context(); own > sc.kv() {
		t.Errorf("a sim's own quarter of the sessions (%d tokens) does not fit its cache (%d)", own, sc.kv())
	}
	small := (&Overhead{Sessions: 2, Turns: 2}).sessionCase()
	if need := small.shared() + small.context() + small.output; small.kv() < 2*need {
		t.Errorf("small run: kv %d, longest request %d", small.kv(), need)
	}
}

// A run's figures come from its stage's turns: turn 1's p50, the pooled
// follow-ups' p50, p90 and cached share; what the stage lacks is NaN
// and shows as "–", not as 0.
func TestSessionFigures(t *testing.T) {
	t.Parallel()
	p90, share := 80.0, 0.9
	s := &bench.Summary{Requests: 24, Failed: 1, Turns: []bench.TurnSummary{{Turn: 1, TTFTP50: 300}, {Turn: 2, TTFTP50: 50}},
		FollowUps: &bench.TurnSummary{TTFTP50: 40, TTFTP90: &p90, CachedShare: &share}}
	r := sessionFigures(s)
	if r.firstP50 != 300 || r.followP50 != 40 || r.followP90 != 80 || r.cached != 0.9 || r.requests != 24 || r.failed != 1 {
		t.Errorf("figures %+v", r)
	}
	short := sessionFigures(&bench.Summary{Turns: []bench.TurnSummary{{Turn: 1, TTFTP50: 300}}, FollowUps: &bench.TurnSummary{TTFTP50: 40}})
	if !math.IsNaN(short.followP90) || !math.IsNaN(short.cached) {
		t.Errorf("a stage without p90 or cached share: %+v", short)
	}
	runs := []sessionRun{short, r}
	if got := medRange(runs, func(r sessionRun) float64 { return r.followP90 }, "%.0f"); got != "80 (80–80)" {
		t.Errorf("median over rounds, one without the figure: %q", got)
	}
	if got := medRange(runs[:1], func(r sessionRun) float64 { return r.cached }, "%.3f"); got != "–" {
		t.Errorf("no round with the figure: %q", got)
	}
	if got := ratioText(math.NaN(), 100, 1.0/3, false); !strings.Contains(got, "no figure") {
		t.Errorf("ratio without a figure: %q", got)
	}
	if got := ratioText(30, 100, 1.0/3, false); got != "0.30×, met" {
		t.Errorf("ratio 30/100 against ≤ 1/3: %q", got)
	}
}
