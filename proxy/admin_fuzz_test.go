package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzAdmin sends the admin listener requests with its key: any method,
// path and body. It answers each with a client error or a success, never
// a 5xx, a hang or a panic, and whatever it accepted leaves a running
// configuration that validates and serves.
func FuzzAdmin(f *testing.F) {
	for _, s := range [][3]string{
		{"POST", "/admin/config/set", `{"settings":{"shaping.global.max_requests":"24"},"source":"fuzz"}`},
		{"POST", "/admin/config/set", `{"settings":{"retries.max":"-7","timeouts.total":"1h"}}`},
		{"POST", "/admin/config/set", `{"settings":{"pools.p.backends":"[]"}}`},
		{"POST", "/admin/config/rollback", `{"version":1}`},
		{"POST", "/admin/config/rollback", `{"hash":""}`},
		{"POST", "/admin/config/rollback", ``},
		{"GET", "/admin/config/versions", ``},
		{"GET", "/admin/stats", ``},
		{"GET", "/admin/pairs", ``},
		{"GET", "/metrics", ``},
		{"DELETE", "/admin/../admin/stats", ``},
	} {
		f.Add(s[0], s[1], []byte(s[2]))
	}
	const key = "adm-fuzz-key"
	be := newTestBackend(f, jsonHandler(200, `{"id":"x","object":"chat.completion","choices":[]}`))
	cfg := testConfig(be.URL)
	cfg.Server.AdminAuth = key
	gw := serveGateway(f, cfg, slog.New(slog.DiscardHandler))
	client := &http.Client{Timeout: 5 * time.Second}
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req, err := http.NewRequest(method, gw.AdminURL+path, bytes.NewReader(body))
		if err != nil {
			return // not a request a client could send
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			if strings.Contains(err.Error(), "malformed") || strings.Contains(err.Error(), "invalid") {
				return // net/http refused to write it
			}
			t.Fatalf("%s %q: %v", method, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Errorf("%s %q %q: %d", method, path, body, resp.StatusCode)
		}
		running := gw.Config()
		if err := running.Validate(); err != nil {
			t.Fatalf("after %s %q %q the running configuration does not validate: %v", method, path, body, err)
		}
		if st, _, _ := post(t, gw.URL, "/v1/chat/completions", plainBody); st != 200 {
			t.Fatalf("after %s %q %q the gateway answers %d", method, path, body, st)
		}
	})
}
