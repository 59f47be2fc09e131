package sim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadFileOverlaysAndRefusesUnknownKeys(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("model: llama\nengine:\n  max_num_seqs: 7\nfaults:\n  net_delay: 3ms\n"), 0o600)
	c, _ := Preset("memory-bound")
	if err := c.LoadFile(good); err != nil {
		t.Fatal(err)
	}
	if c.Model != "llama" || c.Engine.MaxNumSeqs != 7 || c.Faults.NetDelay != 3*time.Millisecond || c.Engine.KVCacheTokens != 8192 {
		t.Errorf("overlay gave %+v: want the file's fields over the preset's", c)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("engine:\n  max_num_seq: 7\n"), 0o600)
	if err := c.LoadFile(bad); err == nil || !strings.Contains(err.Error(), "max_num_seq") {
		t.Errorf("unknown key: %v, want an error naming it", err)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for field, mod := range map[string]func(*Config){
		"engine.max_num_seqs":         func(c *Config) { c.Engine.MaxNumSeqs = 0 },
		"quality.malformed_json_rate": func(c *Config) { c.Quality.MalformedJSONRate = 2 },
		"faults.error_status":         func(c *Config) { c.Faults.ErrorStatus = 418 },
		"mode":                        func(c *Config) { c.Mode = "turbo" },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Validate() = %v", field, err)
		}
	}
	for _, p := range []string{"balanced", "memory-bound", "batch-starved", "compute-bound", "candidate"} {
		c, err := Preset(p)
		if err != nil || c.Validate() != nil {
			t.Errorf("preset %s: %v %v", p, err, c.Validate())
		}
	}
}

func FuzzParseFaults(f *testing.F) {
	for _, s := range []string{"error=503;retry_after=2s", "reset_after=5", "stall_after=3;stall_for=10s", "net_delay=5ms;net_jitter=1ms", "x", ";;",
		"net_delay=-2ns;net_jitter=-3ns", "net_delay=2562047h;net_jitter=2562047h", "error_rate=NaN", "stall_for=-1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		fl, err := parseFaults(DefaultConfig().Faults, h)
		if err != nil {
			return
		}
		// Whatever is accepted is usable: no negative counts or
		// durations, a valid status, jitter within the delay, and a delay
		// drawn without a panic.
		if fl.ResetAfter < 0 || fl.StallAfter < 0 || fl.NetJitter > fl.NetDelay || !(fl.ErrorRate >= 0 && fl.ErrorRate <= 1) ||
			fl.NetJitter < 0 || fl.StallFor < 0 || fl.HeaderDelay < 0 || fl.RetryAfter < 0 {
			t.Fatalf("accepted %q as %+v", h, fl)
		}
		if d := fl.netDelay(); d < 0 || d > 2*maxFaultDuration {
			t.Fatalf("delay %v from %+v", d, fl)
		}
	})
}

// The zero Config is the balanced preset: defaults are applied in one
// place, by New as by Preset.
func TestZeroConfigIsBalanced(t *testing.T) {
	var c Config
	c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("zero config after Defaults: %v", err)
	}
	want, _ := Preset("balanced")
	if c != want {
		t.Errorf("zero config after Defaults\n%+v\nwant the balanced preset\n%+v", c, want)
	}
	s, err := New(Config{}, nil)
	if err != nil {
		t.Fatalf("New(Config{}): %v", err)
	}
	_ = s.Shutdown(context.Background())
}
