package proxy

import (
	"fmt"
	"strings"
	"testing"
)

func backends(weights ...int) []*backend {
	var bs []*backend
	for i, w := range weights {
		b := &backend{name: fmt.Sprint("b", i), weight: w}
		b.healthy.Store(true)
		bs = append(bs, b)
	}
	return bs
}

// chosen asks sel to pick among bs.
func chosen(sel selector, bs []*backend) *backend {
	s := &pick{cands: bs}
	c, _ := sel.Select(s)
	return bs[c]
}

func TestLeastOutstanding(t *testing.T) {
	t.Parallel()
	bs := backends(1, 1, 1)
	bs[0].outstanding.Store(5)
	bs[1].outstanding.Store(2)
	bs[2].outstanding.Store(7)
	l := &leastOutstanding{}
	for range 10 {
		if got := chosen(l, bs); got != bs[1] {
			t.Fatalf("picked %s, want b1 (fewest outstanding)", got.name)
		}
	}
	// Weight 3 with 6 outstanding (2 per unit) ties b1; ties rotate.
	ws := backends(1, 3)
	ws[0].outstanding.Store(2)
	ws[1].outstanding.Store(6)
	seen := map[*backend]int{}
	for range 10 {
		seen[chosen(l, ws)]++
	}
	if seen[ws[0]] == 0 || seen[ws[1]] == 0 {
		t.Errorf("ties went %v, want both used", seen)
	}
	// Idle equal backends share the load.
	eq := backends(1, 1, 1, 1)
	counts := map[*backend]int{}
	for range 400 {
		counts[chosen(l, eq)]++
	}
	for _, b := range eq {
		if counts[b] != 100 {
			t.Errorf("%s got %d of 400 idle picks, want 100", b.name, counts[b])
		}
	}
}

func TestWeightedRoundRobinIsProportionalAndSmooth(t *testing.T) {
	t.Parallel()
	bs := backends(5, 1, 1)
	w := &weightedRoundRobin{}
	var seq []string
	counts := map[*backend]int{}
	for range 70 {
		b := chosen(w, bs)
		counts[b]++
		seq = append(seq, b.name)
	}
	if counts[bs[0]] != 50 || counts[bs[1]] != 10 || counts[bs[2]] != 10 {
		t.Errorf("counts %v over 70 picks, want 50/10/10", counts)
	}
	// Smooth: nginx's sequence at 5:1:1 is a a b a c a a, not a burst of
	// five.
	if got := strings.Join(seq[:7], " "); got != "b0 b0 b1 b0 b2 b0 b0" {
		t.Errorf("first cycle %s, want b0 b0 b1 b0 b2 b0 b0", got)
	}
}

func TestPowerOfTwoAvoidsTheBusy(t *testing.T) {
	t.Parallel()
	bs := backends(1, 1, 1)
	bs[0].outstanding.Store(100)
	var p powerOfTwo
	for range 200 {
		if chosen(p, bs) == bs[0] {
			t.Fatal("picked the busiest backend: of any two sampled, the other is less busy")
		}
	}
	if got := chosen(p, bs[:1]); got != bs[0] {
		t.Error("single candidate not returned")
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"bad url", func(c *Config) { c.Pools["p"].Backends[0].URL = "ftp://x" }, "pools.p.backends[0].url"},
		{"bad selection", func(c *Config) { p := c.Pools["p"]; p.Selection = "random"; c.Pools["p"] = p }, "pools.p.selection"},
		{"model to missing pool", func(c *Config) { c.Models[0].Pool = "nope" }, "models[0].pool"},
		{"duplicate model", func(c *Config) { c.Models = append(c.Models, c.Models[0]) }, "models[1].name"},
		{"negative timeout", func(c *Config) { c.Timeouts.Idle = -1 }, "timeouts.idle"},
		{"no models", func(c *Config) { c.Models = nil }, "models"},
		{"half TLS", func(c *Config) { c.Server.TLS.CertFile = "x" }, "server.tls"},
		{"missing env key", func(c *Config) { c.Pools["p"].Backends[0].APIKeyEnv = "INFERGATE_TEST_UNSET" }, "api_key_env"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig("http://127.0.0.1:1")
			c.Defaults()
			tc.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	c := testConfig("http://127.0.0.1:1")
	c.Defaults()
	if err := c.Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}
