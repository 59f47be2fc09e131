//go:build !race

package proxy

import (
	"strings"
	"testing"
)

// A session key costs a whole request no allocation: through a pool of
// selection prefix, a request naming its session (in the body, or a
// header) allocates no more than the same request naming none, from
// its first turn (a new session) to its later ones (sticky).
func TestSessionsAddNoAllocationToARequest(t *testing.T) {
	system := strings.Repeat("You answer for the billing desk. ", 100)
	plain := `{"model":"m","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"What is my balance?"}]}`
	keyed := `{"model":"m","prompt_cache_key":"conversation-42","conversation":{"id":"c"},"messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"What is my balance?"}]}`
	allocs := func(body, header string) float64 {
		bg := newBenchGatewayWith(t, false, func(c *Config) {
			pc := c.Pools["p"]
			pc.Selection = PrefixPolicy
			pc.Backends = append(pc.Backends, BackendConfig{URL: rawBackend(t, plainResponseBytes())})
			c.Pools["p"] = pc
		}, body)
		if header != "" {
			bg.req.Header.Set("X-Session-Id", header)
		}
		for range 100 {
			bg.do(t)
		}
		bg.g.syncTelemetry()
		return testing.AllocsPerRun(300, func() { bg.do(t) })
	}
	base := allocs(plain, "")
	for _, tc := range []struct{ name, body, header string }{
		{"prompt_cache_key", keyed, ""},
		{"header", plain, "session-7"},
	} {
		if got := allocs(tc.body, tc.header); got > base {
			t.Errorf("a request with a session key (%s) allocated %v times, one without %v", tc.name, got, base)
		}
	}
	t.Logf("a request through selection prefix: %v allocations, with or without a session key", base)
}
