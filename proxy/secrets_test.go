package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/policy"
	"github.com/infergate/infergate/tracing"
)

// TestSecretsStayOut plants a credential everywhere one can enter the
// gateway (a tenant's key, a wrong key, a key in the query string, the
// backends' own keys, the admin key, a key a backend echoes back in its
// error, a key set through the admin API) and greps every output: the
// request log, the pair file, the process log at debug level, every admin
// answer, every client answer. Every file the gateway writes is 0600.
func TestSecretsStayOut(t *testing.T) {
	const (
		tenantKey = "sk-tenant-PLANTED-1"
		upstream  = "sk-upstream-PLANTED-2"
		candKey   = "sk-cand-PLANTED-3"
		adminKey  = "adm-PLANTED-4"
		wrongKey  = "sk-wrong-PLANTED-5"
		queryKey  = "sk-query-PLANTED-6"
		setKey    = "sk-set-PLANTED-7"
	)
	planted := []string{tenantKey, upstream, candKey, adminKey, wrongKey, queryKey, setKey}
	t.Setenv("INFERGATE_TEST_CAND_KEY", candKey)

	// A backend that answers, and, asked to, refuses with the credential
	// it was sent in its error (as some servers echo a bad key).
	handler := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "echo-auth") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(401)
			fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error","code":"invalid_api_key"}}`,
				strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
			return
		}
		if strings.Contains(string(body), `"stream":true`) {
			sseHandler(3, time.Millisecond)(w, r)
			return
		}
		jsonHandler(200, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}]}`)(w, r)
	}
	primary, cand := newTestBackend(t, handler), newTestBackend(t, handler)

	dir := t.TempDir()
	cfg := mirrorConfig(primary.URL, cand.URL)
	cfg.Pools["p"] = PoolConfig{Backends: []BackendConfig{{URL: primary.URL, APIKey: upstream}}}
	cfg.Pools["cand"] = PoolConfig{Backends: []BackendConfig{{URL: cand.URL, APIKeyEnv: "INFERGATE_TEST_CAND_KEY"}}}
	cfg.Mirror.Record = mirror.Record{Path: filepath.Join(dir, "pairs.jsonl")}
	cfg.RequestLog = tracing.LogConfig{Path: filepath.Join(dir, "requests.jsonl"), BodyBytes: 4096}
	cfg.Auth.Required = true
	cfg.Tenants = map[string]TenantConfig{"acme": {Tenant: policy.Tenant{APIKeys: []string{tenantKey}}}}
	cfg.Server.AdminAuth = adminKey
	gw := startGateway(t, cfg, withFailpoints(func(point, id string) {
		if id == "boom-"+point {
			panic("test: a bug with the request in hand at " + point)
		}
	}))

	var answers strings.Builder
	call := func(path, body string, hdr ...string) int {
		st, h, b := post(t, gw.URL, path, body, hdr...)
		fmt.Fprintf(&answers, "%d %v %s\n", st, h, b)
		return st
	}
	auth := "Bearer " + tenantKey
	for range 3 {
		if st := call("/v1/chat/completions", streamBody, "Authorization", auth); st != 200 {
			t.Fatalf("a good request: %d", st)
		}
		call("/v1/chat/completions", plainBody, "Authorization", auth)
	}
	call("/v1/chat/completions?api_key="+queryKey, plainBody, "Authorization", auth)
	call("/v1/chat/completions", plainBody, "Authorization", "Bearer "+wrongKey)
	call("/v1/chat/completions", plainBody, "Authorization", "Bearer "+tenantKey+"x")
	if st := call("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"echo-auth"}]}`, "Authorization", auth); st == 200 {
		t.Fatalf("the backend refused it, the client got 200: %s", answers.String())
	}
	call("/v1/chat/completions", plainBody, "Authorization", auth, "X-Request-Id", "boom-admitted")
	call("/v1/chat/completions", streamBody, "Authorization", auth, "X-Request-Id", "boom-stream")
	waitFor(t, 10*time.Second, "the pairs", func() bool {
		var s adminapi.Pairs
		return json.Unmarshal([]byte(func() string { _, _, b := adminDo(t, gw, "GET", "/admin/pairs", adminKey, ""); return b }()), &s) == nil && len(s.Pairs) >= 8
	})

	admin := func(method, path, body string) string {
		st, h, b := adminDo(t, gw, method, path, adminKey, body)
		fmt.Fprintf(&answers, "%s %d %v %s\n", path, st, h, b)
		return b
	}
	admin("POST", "/admin/config/set", `{"settings":{"pools.p.backends[0].api_key":"`+setKey+`"},"source":"rotate"}`)
	admin("POST", "/admin/config/set", `{"settings":{"shaping.global.max_requests":"9"},"source":"cap"}`)
	if err := gw.ReloadFrom("test", cfg); err != nil {
		t.Fatal(err)
	}
	admin("POST", "/admin/config/rollback", `{"version":2}`)
	for _, p := range []string{"/metrics", "/admin/stats", "/admin/pairs", "/admin/config/versions"} {
		admin("GET", p, "")
	}
	gw.Shutdown(t.Context()) // the log and pair writers flush

	outputs := map[string]string{"the process log": gw.logs.String(), "the answers": answers.String()}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v, want 0600", d.Name(), info.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		outputs[d.Name()] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(outputs["requests.jsonl"], `"status":200`) || !strings.Contains(outputs["pairs.jsonl"], "hello") {
		t.Fatalf("the outputs hold no traffic: the test would prove nothing\n%v", outputs)
	}
	for name, out := range outputs {
		for _, k := range planted {
			if i := strings.Index(out, k); i >= 0 {
				t.Errorf("%s holds %s: …%s…", name, k, out[max(0, i-200):min(len(out), i+60)])
			}
		}
	}
}
