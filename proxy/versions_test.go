package proxy

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/infergate/infergate/policy"
)

// Settings are what a person compares: the YAML paths of the non-zero
// fields, with no secret among them.
func TestSettingsLeaveOutSecrets(t *testing.T) {
	t.Parallel()
	cfg := testConfig("http://user:pw-in-url@127.0.0.1:1")
	p := cfg.Pools["p"]
	p.Backends[0].APIKey = "sk-very-secret"
	cfg.Pools["p"] = p
	cfg.Tenants = map[string]TenantConfig{"acme": {Tenant: policy.Tenant{APIKeys: []string{"sk-tenant-key"}}}}
	cfg.Server.AdminAuth = "admin-secret"
	cfg.Shaping.Global.MaxRequests = 24
	cfg.Defaults()
	s := Settings(cfg)
	if s["shaping.global.max_requests"] != "24" || s["pools.p.backends[0].url"] != "http://127.0.0.1:1" {
		t.Fatalf("settings lack the cap or the backend: %v", s)
	}
	for k, v := range s {
		for _, secret := range []string{"sk-very-secret", "sk-tenant-key", "admin-secret", "pw-in-url"} {
			if strings.Contains(v, secret) || strings.Contains(k, secret) {
				t.Errorf("%s = %s shows a secret", k, v)
			}
		}
	}
}

// The gateway keeps the last configHistory configurations, and a
// rollback past them is refused with nothing changed.
func TestVersionsBounded(t *testing.T) {
	t.Parallel()
	g := startGateway(t, testConfig("http://127.0.0.1:1")).Gateway
	for i := range configHistory + 3 {
		cfg := testConfig(fmt.Sprintf("http://127.0.0.1:%d", 10+i))
		if err := g.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	vs := g.ConfigVersions()
	if len(vs) != configHistory || vs[0].Version != configHistory+4 || !vs[0].Current || vs[1].Current {
		t.Fatalf("%d versions, newest %d", len(vs), vs[0].Version)
	}
	if _, err := g.Rollback(1, ""); !errors.Is(err, ErrNoVersion) {
		t.Fatalf("rollback to a forgotten version: %v", err)
	}
	before := g.state.Load().configHash
	cv, err := g.Rollback(0, "")
	if err != nil || cv.Hash != vs[1].Hash || g.state.Load().configHash == before || cv.Source != fmt.Sprintf("rollback to version %d", vs[1].Version) {
		t.Fatalf("rollback to the previous: %+v %v", cv, err)
	}
	cv, err = g.Rollback(0, before[:6])
	if err != nil || g.state.Load().configHash != before {
		t.Fatalf("rollback by hash prefix: %+v %v", cv, err)
	}
}

// POST /admin/config/set changes one setting on the running gateway as a
// kept version, and a change the reload would refuse changes nothing.
func TestAdminSet(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, testConfig("http://127.0.0.1:1"))
	st, _, body := post(t, gw.AdminURL, "/admin/config/set", `{"settings":{"shaping.global.max_requests":"24","shaping.queue.timeout":"2s"},"source":"tune step 1"}`)
	if st != 200 || !strings.Contains(body, `"source":"set: tune step 1"`) {
		t.Fatalf("%d %s", st, body)
	}
	if c := gw.Config(); c.Shaping.Global.MaxRequests != 24 || c.Shaping.Queue.Timeout.String() != "2s" {
		t.Errorf("running %+v", c.Shaping)
	}
	before := gw.Config().Shaping
	for _, bad := range []string{
		`{"settings":{"shaping.global.max_requests":"-3"}}`,
		`{"settings":{"shaping.global.nope":"1"}}`,
		`{"settings":{"server.listen":"127.0.0.1:1"}}`,
		`{"settings":{}}`,
		`not json`,
	} {
		st, _, body := post(t, gw.AdminURL, "/admin/config/set", bad)
		if st != 409 && st != 400 || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s", bad, st, body)
		}
	}
	if after := gw.Config().Shaping; after.Global != before.Global || after.Queue != before.Queue {
		t.Errorf("a refused set changed the running configuration: %+v", after)
	}
	if vs := gw.ConfigVersions(); len(vs) != 2 {
		t.Errorf("%d versions, want 2 (start, the one set)", len(vs))
	}
}

// TestRollbackToAVersionThatNoLongerValidates: a kept version whose
// backend key came from an environment variable since emptied is refused
// with the reason, and the running configuration stays.
func TestRollbackToAVersionThatNoLongerValidates(t *testing.T) {
	t.Setenv("INFERGATE_TEST_ROLL_KEY", "sk-roll")
	cfg := testConfig("http://127.0.0.1:1")
	p := cfg.Pools["p"]
	p.Backends[0].APIKeyEnv = "INFERGATE_TEST_ROLL_KEY"
	cfg.Pools["p"] = p
	gw := startGateway(t, cfg)
	next := testConfig("http://127.0.0.1:2")
	if err := gw.ReloadFrom("test", next); err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("INFERGATE_TEST_ROLL_KEY")
	running := gw.state.Load().configHash
	st, _, body := post(t, gw.AdminURL, "/admin/config/rollback", `{"version":1}`)
	if st != 409 || !strings.Contains(body, "rollback_refused") || !strings.Contains(body, "INFERGATE_TEST_ROLL_KEY is empty") {
		t.Errorf("rollback to a version that no longer validates: %d %s", st, body)
	}
	if gw.state.Load().configHash != running || gw.Config().Pools["p"].Backends[0].URL != "http://127.0.0.1:2" {
		t.Error("a refused rollback changed the running configuration")
	}
}
