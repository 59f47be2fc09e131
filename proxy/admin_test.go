package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/shaping"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestAdminListener(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, sseHandler(5, 2*time.Millisecond))
	gw := startGateway(t, testConfig(be.URL))
	for range 3 {
		if s, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody); s != 200 || !strings.Contains(body, "[DONE]") {
			t.Fatalf("stream: %d %s", s, body)
		}
	}
	post(t, gw.URL, "/v1/chat/completions", `{"model":"nope"}`) // rejected: counted, not in the live view

	// Metrics live on the admin listener only: API clients do not see them.
	if resp, err := http.Get(gw.URL + "/metrics"); err != nil || resp.StatusCode != 404 {
		t.Errorf("/metrics on the API listener: %v %v, want 404", resp.StatusCode, err)
	}
	resp, err := http.Get(gw.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	backend := strings.TrimPrefix(be.URL, "http://")
	ttft := mfs["gen_ai_server_time_to_first_token_seconds"]
	if ttft == nil || len(ttft.Metric) != 1 || ttft.Metric[0].Histogram.GetSampleCount() != 3 {
		t.Fatalf("gen_ai_server_time_to_first_token_seconds: %v", ttft)
	}
	if l := labelsOf(ttft.Metric[0]); l["server_address"] != backend || l["gen_ai_request_model"] != "m" || l["gen_ai_operation_name"] != "chat" {
		t.Errorf("TTFT labels %v", l)
	}
	if got := counterValue(t, gw.Gateway, "infergate_requests_total", "outcome", "rejected"); got != 1 {
		t.Errorf("rejected requests %v, want 1", got)
	}
	inflight := mfs["infergate_upstream_in_flight"]
	if inflight == nil || labelsOf(inflight.Metric[0])["backend"] != be.URL || inflight.Metric[0].Gauge.GetValue() != 0 {
		t.Errorf("in flight per backend: %v", inflight)
	}
	if b := mfs["infergate_breaker_state"]; b == nil || b.Metric[0].Gauge.GetValue() != 0 {
		t.Errorf("breaker state: %v", b)
	}

	resp, err = http.Get(gw.AdminURL + "/admin/stats")
	if err != nil {
		t.Fatal(err)
	}
	var snap adminapi.Stats
	err = json.NewDecoder(resp.Body).Decode(&snap)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Groups) != 1 || snap.Groups[0].Model != "m" || snap.Groups[0].Backend != backend || snap.All.Requests != 3 || snap.All.Errors != 0 {
		t.Fatalf("stats: %+v", snap)
	}
	g := snap.Groups[0]
	if g.TTFT == nil || g.Total == nil || g.Attribution == nil || g.TTFT.P50 <= 0 || g.TTFT.P50 > g.Total.P50 {
		t.Errorf("group figures: %+v", g)
	}
	a := g.Attribution
	if sum := a.Queue + a.Gateway + a.Connect + a.Network + a.ModelTTFT + a.Decode; sum < a.Total*0.99 || sum > a.Total*1.01 {
		t.Errorf("mean parts add up to %.3f ms, mean total %.3f ms", sum, a.Total)
	}
	// Four decode gaps of 2 ms each: the decode part shows them.
	if a.Decode < 7 {
		t.Errorf("mean decode %.3f ms, want at least 4 × 2 ms", a.Decode)
	}
	if len(snap.Gateway.Backends) != 1 || snap.Gateway.Backends[0].Breaker != "closed" || !snap.Gateway.Backends[0].Up {
		t.Errorf("backends: %+v", snap.Gateway.Backends)
	}
	if resp, _ := http.Get(gw.AdminURL + "/admin/nope"); resp == nil || resp.StatusCode != 404 {
		t.Error("unknown admin path is not 404")
	}
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// The configuration hash on /healthz is computed without secrets: two
// configurations that differ only in keys hash alike, and hashing leaves
// the configuration as it was.
func TestConfigHashLeavesOutSecrets(t *testing.T) {
	t.Parallel()
	a := testConfig("http://127.0.0.1:1")
	b := testConfig("http://user:secret@127.0.0.1:1")
	p := b.Pools["p"]
	p.Backends[0].APIKey = "sk-very-secret"
	b.Pools["p"] = p
	b.Shaping.Tenants = map[string]shaping.Tenant{"t": {APIKeys: []string{"sk-tenant"}}}
	a.Shaping.Tenants = map[string]shaping.Tenant{"t": {}}
	if hashConfig(a) != hashConfig(b) {
		t.Error("configurations that differ only in secrets hash differently")
	}
	if b.Pools["p"].Backends[0].APIKey != "sk-very-secret" || b.Shaping.Tenants["t"].APIKeys[0] != "sk-tenant" {
		t.Error("hashing changed the configuration")
	}
	c := testConfig("http://127.0.0.1:2")
	if hashConfig(a) == hashConfig(c) {
		t.Error("configurations with different backends hash alike")
	}
}
