package overhead

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/yamlconf"
	"github.com/infergate/infergate/proxy"
)

// TestClassGatewayConfig: every arm's configuration loads as the gateway
// loads it (unknown keys refused) and says what the arm means.
func TestClassGatewayConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		classes bool
		redis   string
	}{{"without classes", false, ""}, {"with classes", true, ""}, {"replica", true, "127.0.0.1:6379"}} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
		g := classGateway{sim: "127.0.0.1:9", knee: 24, reserve: classReserve(24, 0.25), wait: 700 * time.Millisecond, slo: time.Second,
			classes: tc.classes, redis: tc.redis, prefix: "ovtest", log: filepath.Join(dir, "log.jsonl")}
		if err := os.WriteFile(path, []byte(g.config()), 0o600); err != nil {
			t.Fatal(err)
		}
		var cfg proxy.Config
		if err := yamlconf.Load(path, &cfg); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		cfg.Defaults()
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s := cfg.Shaping
		wantCap := map[bool]int64{false: 24, true: 30}[tc.classes]
		if cfg.Classes.Enabled != tc.classes || s.Global.MaxRequests != wantCap || s.Queue.MaxWaiting != 48 || s.Queue.MaxWaitingPerTenant != -1 || s.Queue.Timeout != 700*time.Millisecond || s.Redis.Addr != tc.redis {
			t.Errorf("%s: classes %v, cap %d, queue %d (per tenant %d), redis %q", tc.name, cfg.Classes.Enabled, s.Global.MaxRequests, s.Queue.MaxWaiting, s.Queue.MaxWaitingPerTenant, s.Redis.Addr)
		}
		if want := map[bool]string{true: "vllm"}[tc.classes]; cfg.Pools["sim"].ClassPriority != want {
			t.Errorf("%s: class_priority %q, want %q", tc.name, cfg.Pools["sim"].ClassPriority, want)
		}
		if tc.classes && (cfg.Classes.Default.SLOTTFT != time.Second || cfg.Classes.Default.QueueTimeout != 700*time.Millisecond || cfg.Classes.Flex.QueueTimeout != 20*time.Second || cfg.Classes.Priority.Reserved != 6) {
			t.Errorf("%s: classes %+v", tc.name, cfg.Classes.Classes)
		}
		if cfg.RequestLog.Path == "" {
			t.Errorf("%s: no request log", tc.name)
		}
	}
}

func TestCountLog(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	lines := `{"outcome":"ok","class":"priority"}` + "\n" + `{"outcome":"shed"}` + "\n" + `{"outcome":"ok"}` + "\n" + "not json\n"
	if err := os.WriteFile(path, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	by := map[string]int{"ok": 1}
	if err := countLog(path, by); err != nil {
		t.Fatal(err)
	}
	if by["ok"] != 3 || by["shed"] != 1 || by["unreadable"] != 1 {
		t.Errorf("counts %v", by)
	}
	if countLog(filepath.Join(t.TempDir(), "none"), by) == nil {
		t.Error("a missing log counted")
	}
}
