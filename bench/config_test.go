package bench

import (
	"strings"
	"testing"
	"time"
)

// A Config with only a URL runs: the defaults are applied in one place.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{URL: "http://127.0.0.1:8000"}
	c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	w, l := c.Workload, c.Load
	if w.Endpoint != "chat" || w.InputTokens != "256" || w.OutputTokens != "128" {
		t.Errorf("workload defaults %+v", w)
	}
	if l.Mode != "closed" || l.Concurrency != 1 || l.Duration != 30*time.Second || l.Timeout != 10*time.Minute {
		t.Errorf("load defaults %+v", l)
	}
	again := c
	again.Defaults()
	if again.Load != c.Load || again.Workload != c.Workload {
		t.Error("Defaults applied twice changed the config")
	}

	open := Config{URL: "http://h", Load: LoadSpec{Rate: 5}}
	open.Defaults()
	if open.Load.Mode != "open" || open.Load.Arrival != "poisson" || open.Load.Concurrency != 0 {
		t.Errorf("a rate makes an open loop with Poisson arrivals: %+v", open.Load)
	}
	replay := Config{URL: "http://h", Workload: WorkloadSpec{Replay: "log.jsonl"}}
	replay.Defaults()
	if replay.Load.Mode != "replay" || replay.Workload.Speedup != 1 || replay.Workload.InputTokens != "" || replay.Load.Duration != 0 {
		t.Errorf("replay defaults: %+v %+v", replay.Workload, replay.Load)
	}
	sweep := Config{URL: "http://h", Sweep: []float64{4, 8}}
	sweep.Defaults()
	if sweep.Load.Concurrency != 4 {
		t.Errorf("a sweep's first stage runs at its first level: concurrency %d", sweep.Load.Concurrency)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"endpoint", func(c *Config) { c.Workload.Endpoint = "embeddings" }, "workload.endpoint"},
		{"open loop without a rate", func(c *Config) { c.Load.Mode = "open"; c.Load.Rate = 0 }, "load.rate"},
		{"arrival", func(c *Config) { c.Load.Mode, c.Load.Rate, c.Load.Arrival = "open", 1, "bursty" }, "load.arrival"},
		{"negative duration", func(c *Config) { c.Load.Duration = -time.Second }, "load.duration"},
		{"sweep level", func(c *Config) { c.Sweep = []float64{1, -2} }, "sweep[1]"},
		{"both files", func(c *Config) { c.Workload.Dataset, c.Workload.Replay = "a", "b" }, "workload.dataset"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{URL: "http://h"}
			c.Defaults()
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Validate() = %v, want an error naming %s", err, tc.field)
			}
		})
	}
}

func TestSetWarmup(t *testing.T) {
	t.Parallel()
	closed := LoadSpec{Mode: "closed"}
	if err := closed.SetWarmup("auto"); err != nil || !closed.WarmupPerUser {
		t.Errorf("closed auto: %+v %v", closed, err)
	}
	open := LoadSpec{Mode: "open"}
	if err := open.SetWarmup("auto"); err != nil || open.WarmupTime != 2*time.Second {
		t.Errorf("open auto: %+v %v", open, err)
	}
	n := LoadSpec{Mode: "closed"}
	if err := n.SetWarmup("7"); err != nil || n.WarmupRequests != 7 {
		t.Errorf("count: %+v %v", n, err)
	}
	if err := n.SetWarmup("soon"); err == nil || !strings.Contains(err.Error(), "load.warmup") {
		t.Errorf("bad warm-up: %v", err)
	}
}
