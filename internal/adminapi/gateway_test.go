package adminapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/proxy"
	"github.com/infergate/infergate/sim/simtest"
)

const key = "adm-test-key"

// serve runs a real gateway in front of two simulators, the second a
// mirror rule's candidate, with an admin key, and sends it a few
// requests; it returns the admin listener's base URL.
func serve(t *testing.T) string {
	t.Helper()
	primary := simtest.Start(t, simtest.Fixed(2*time.Millisecond, time.Millisecond))
	candidate := simtest.Start(t, simtest.Fixed(4*time.Millisecond, time.Millisecond))
	cfg := proxy.Config{
		Server: proxy.ServerConfig{AdminAuth: key},
		Pools: map[string]proxy.PoolConfig{
			"p":    {Backends: []proxy.BackendConfig{{URL: primary.URL}}},
			"cand": {Backends: []proxy.BackendConfig{{URL: candidate.URL}}},
		},
		Models: []proxy.ModelConfig{{Name: "m", Pool: "p", UpstreamModel: "sim-model"}},
		Mirror: mirror.Config{Rules: []mirror.Rule{{Name: "try", Pool: "cand"}}},
	}
	g, err := proxy.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, aln := listen(t), listen(t)
	go g.Serve(ln)
	go g.ServeAdmin(aln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		g.Shutdown(ctx)
	})
	for i := range 4 {
		body := `{"model":"m","max_tokens":8,"ignore_eos":true,"stream":` + map[bool]string{true: "true", false: "false"}[i%2 == 0] +
			`,"messages":[{"role":"user","content":"hello"}]}`
		resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body) // a stream read to its end
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %s %v", i, resp.Status, err)
		}
	}
	return "http://" + aln.Addr().String()
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// strict decodes what the gateway serves at path into out with unknown
// fields refused: the gateway sends nothing the declared type does not
// name (a field renamed on one side only shows here).
func strict(t *testing.T, admin, path string, out any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, admin+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		t.Errorf("%s: %v\n%s", path, err, buf.String())
	}
}

// TestAgainstAGateway: every typed call against a real gateway decodes
// the fields a caller relies on (a renamed JSON field would decode to
// zero), and the gateway's answers hold no field the types lack.
func TestAgainstAGateway(t *testing.T) {
	admin := serve(t)
	ctx := context.Background()
	c := &adminapi.Client{URL: admin, Key: key}

	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Not TTFT and TPOT: a stream that reaches the gateway in one read
	// has none (relay.go stamps the first token out only on a flush
	// before a wait).
	if st.Time.IsZero() || st.Window <= 0 || st.All.Requests != 4 || st.All.RPS <= 0 || st.All.Samples != 4 || st.All.Total == nil ||
		st.All.Attribution == nil || st.All.Attribution.Total <= 0 || st.All.Attribution.Decode <= 0 {
		t.Errorf("stats: %+v", st.All)
	}
	if len(st.Groups) != 1 || st.Groups[0].Model != "m" || st.Groups[0].Backend == "" || st.Groups[0].Total.P50 <= 0 {
		t.Errorf("stats groups: %+v", st.Groups)
	}
	if len(st.Gateway.Backends) != 2 {
		t.Fatalf("stats backends: %+v", st.Gateway.Backends)
	}
	for _, b := range st.Gateway.Backends {
		if b.Pool == "" || !strings.HasPrefix(b.Name, "http://") || b.Breaker != "closed" || !b.Up {
			t.Errorf("stats backend: %+v", b)
		}
	}
	strict(t, admin, adminapi.PathStats, &adminapi.Stats{})

	var ps adminapi.Pairs
	deadline := time.Now().Add(10 * time.Second)
	for ps.Recorded < 4 && time.Now().Before(deadline) {
		if ps, err = c.Pairs(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ps.Recorded != 4 || len(ps.Pairs) != 4 {
		t.Fatalf("pairs: recorded %d, %d kept, want 4", ps.Recorded, len(ps.Pairs))
	}
	for _, p := range ps.Pairs {
		if p.Time.IsZero() || p.ID == "" || p.Rule != "try" || p.Model != "m" || p.Path != "/v1/chat/completions" || p.LengthRatio <= 0 || p.Similarity <= 0 {
			t.Errorf("pair: %+v", p)
		}
		for _, a := range []adminapi.Arm{p.Primary, p.Candidate} {
			if !a.OK() || a.Backend == "" || a.E2Ems <= 0 || a.OutputTokens != 8 || a.OutputBytes <= 0 || a.OutputSHA256 == "" || a.Finish == "" || p.Stream && a.TTFTms <= 0 {
				t.Errorf("pair %s arm: %+v", p.ID, a)
			}
		}
	}
	strict(t, admin, adminapi.PathPairs, &adminapi.Pairs{})

	vs, err := c.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start, ok := vs.Find("")
	if !ok || len(vs.Versions) != 1 || start.Version != 1 || start.Hash == "" || start.AppliedAt.IsZero() || start.Source != "start" || start.Settings["models[0].name"] != "m" {
		t.Fatalf("versions: %+v", vs)
	}
	if v, ok := vs.Find(start.Hash); !ok || v.Version != 1 {
		t.Errorf("Find(%q) = %+v, %v", start.Hash, v, ok)
	}

	set, err := c.Set(ctx, adminapi.SetRequest{Settings: map[string]string{"shaping.global.max_requests": "24"}, Source: "a test"})
	if err != nil {
		t.Fatal(err)
	}
	if !set.Current || set.Version != 2 || set.Hash == "" || set.Hash == start.Hash || set.Source != "set: a test" || set.Settings["shaping.global.max_requests"] != "24" || set.AppliedAt.IsZero() {
		t.Errorf("set: %+v", set)
	}
	back, err := c.Rollback(ctx, adminapi.RollbackRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !back.Current || back.Version != 3 || back.Hash != start.Hash || back.Source != "rollback to version 1" || back.Settings["shaping.global.max_requests"] != "" {
		t.Errorf("rollback: %+v", back)
	}
	if v, err := c.Rollback(ctx, adminapi.RollbackRequest{Hash: set.Hash[:8]}); err != nil || v.Hash != set.Hash || v.Version != 4 {
		t.Errorf("rollback to %s: %+v %v", set.Hash[:8], v, err)
	}
	strict(t, admin, adminapi.PathVersions, &adminapi.Versions{})

	// The gateway's refusals come back with its own reasons.
	if _, err := c.Rollback(ctx, adminapi.RollbackRequest{Version: 99}); err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "no such configuration version") {
		t.Errorf("rollback to a version never applied: %v", err)
	}
	if _, err := c.Set(ctx, adminapi.SetRequest{Settings: map[string]string{"no.such.setting": "1"}}); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("set of an unknown setting: %v", err)
	}
	c.Key = "wrong"
	if _, err := c.Stats(ctx); err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "admin_auth") {
		t.Errorf("a wrong key: %v", err)
	}
}
