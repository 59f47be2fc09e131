package proxy

import (
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infergate/infergate/policy"
)

// TestAdminListenerNeedsItsOwnKey: an admin listener other machines can
// reach is refused without server.admin_auth, and the admin key is never
// a tenant's, so holding an API key is not holding the admin routes.
func TestAdminListenerNeedsItsOwnKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile, empty := filepath.Join(dir, "admin-key"), filepath.Join(dir, "empty")
	os.WriteFile(keyFile, []byte("adm-from-a-file\n"), 0o600)
	os.WriteFile(empty, []byte(" \n"), 0o600)
	acmeFile := filepath.Join(dir, "acme")
	os.WriteFile(acmeFile, []byte("sk-acme-secret"), 0o600)
	for _, tc := range []struct {
		listen, auth, file string
		want               string // "" for valid
	}{
		{listen: "127.0.0.1:9464"},
		{listen: "[::1]:9464"},
		{listen: "localhost:9464"},
		{listen: "off"},
		{listen: ":9464", want: "server.admin_listen :9464 is reachable from other machines"},
		{listen: "0.0.0.0:9464", want: "set server.admin_auth"},
		{listen: "[::]:9464", want: "reachable from other machines"},
		{listen: "10.1.2.3:9464", want: "reachable from other machines"},
		{listen: "admin.internal:9464", want: "reachable from other machines"},
		{listen: ":9464", auth: "adm-own-key"},
		{listen: ":9464", file: keyFile},
		{listen: ":9464", file: empty, want: "server.admin_auth_file: " + empty + " is empty"},
		{listen: ":9464", file: filepath.Join(dir, "missing"), want: "server.admin_auth_file: open"},
		{listen: ":9464", file: acmeFile, want: "server.admin_auth_file: the key of tenants.acme.api_keys[0]"},
		{listen: ":9464", file: keyFile, auth: "adm-own-key", want: "set one"},
		// The tenant acme's key, written plainly and as its digest (the
		// config writes it as a digest): refused, naming where it is.
		{listen: ":9464", auth: "sk-acme-secret", want: "server.admin_auth: the key of tenants.acme.api_keys[0]"},
		{listen: "127.0.0.1:9464", auth: sha256Key("sk-small-secret"), want: "tenants.small.api_keys[0]"},
	} {
		cfg := policyConfig("http://127.0.0.1:1")
		cfg.Server.AdminListen, cfg.Server.AdminAuth, cfg.Server.AdminAuthFile = tc.listen, tc.auth, tc.file
		_, err := New(cfg, slog.New(slog.DiscardHandler))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want %q", tc, err, tc.want)
		case err != nil && (strings.Contains(err.Error(), "sk-acme-secret") || strings.Contains(err.Error(), "sk-small-secret")):
			t.Errorf("the error repeats a key: %v", err)
		}
	}
}

// TestAdminCallsLogWho: every call that changes the configuration is
// logged with the remote address and a fingerprint of the credential;
// a tenant's key is refused there; a doubled Authorization is refused.
func TestAdminCallsLogWho(t *testing.T) {
	t.Parallel()
	const admin = "adm-the-admin-key"
	cfg := policyConfig("http://127.0.0.1:1")
	cfg.Server.AdminAuth = admin
	gw := startGateway(t, cfg)
	d, _ := policy.ParseKey(admin)
	fp := "sha256:" + hex.EncodeToString(d[:6])

	for _, hdr := range [][]string{nil, {"Authorization", "Bearer sk-acme-secret"}, {"Authorization", "Bearer sk-small-secret"}} {
		if st, _, body := post(t, gw.AdminURL, "/admin/config/set", `{"settings":{"shaping.global.max_requests":"7"}}`, hdr...); st != 401 {
			t.Errorf("set with %q: %d %s, want 401", hdr, st, body)
		}
	}
	if gw.Config().Shaping.Global.MaxRequests == 7 {
		t.Fatal("a refused caller changed the configuration")
	}
	if !strings.Contains(gw.logs.String(), `msg="admin call refused: no valid admin key" path=/admin/config/set remote=127.0.0.1:`) {
		t.Errorf("refused calls are not logged with where they came from:\n%s", gw.logs.String())
	}
	st, body := rawExchange(t, gw.AdminURL[len("http://"):], "POST", "/admin/config/rollback",
		[]string{"Authorization: Bearer " + admin, "Authorization: Bearer nope"}, "")
	if st != 400 {
		t.Errorf("two Authorization headers on the admin listener: %d %s", st, body)
	}

	if st, _, body := post(t, gw.AdminURL, "/admin/config/set", `{"settings":{"shaping.global.max_requests":"7"},"source":"ops"}`, "Authorization", "Bearer "+admin); st != 200 {
		t.Fatalf("set: %d %s", st, body)
	}
	if st, _, body := post(t, gw.AdminURL, "/admin/config/rollback", ``, "Authorization", "Bearer "+admin); st != 200 {
		t.Fatalf("rollback: %d %s", st, body)
	}
	logs := gw.logs.String()
	for _, msg := range []string{`msg="config set"`, `msg="config rolled back"`} {
		line := lineWith(logs, msg)
		if !strings.Contains(line, "remote=127.0.0.1:") || !strings.Contains(line, `credential="admin_auth `+fp+`"`) {
			t.Errorf("%s does not say who: %s", msg, line)
		}
	}
	if strings.Contains(logs, admin) {
		t.Error("the logs hold the admin key")
	}
}

func lineWith(logs, s string) string {
	for line := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
