package bench

import (
	"slices"
	"testing"
)

func TestConfigChanges(t *testing.T) {
	t.Parallel()
	a := &Conditions{URL: "http://gw:8080", GatewayConfigHash: "aa", GatewaySettings: map[string]string{"shaping.global.max_requests": "64", "pools.p.backends[0].url": "http://b:1", "retries.attempts": "2"}}
	b := &Conditions{URL: "http://gw:8080", GatewayConfigHash: "bb", GatewaySettings: map[string]string{"shaping.global.max_requests": "21", "pools.p.backends[0].url": "http://b:1", "policy.max_output_tokens": "512"}}
	got, known := ConfigChanges(a, b)
	want := []string{"+policy.max_output_tokens: 512", "-retries.attempts: 2", "shaping.global.max_requests: 64 → 21"}
	if !known || !slices.Equal(got, want) {
		t.Fatalf("changes %q known %v, want %q", got, known, want)
	}
	// Hashes without settings: known to differ, not what.
	a.GatewaySettings, b.GatewaySettings = nil, nil
	got, known = ConfigChanges(a, b)
	if known || !slices.Equal(got, []string{"gateway configuration: aa → bb"}) {
		t.Fatalf("changes %q known %v", got, known)
	}
	b.GatewayConfigHash, b.URL = "aa", "http://other:8080"
	if got, known = ConfigChanges(a, b); !known || len(got) != 1 {
		t.Fatalf("a URL change: %q %v", got, known)
	}
}
