package proxy

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawExchange writes one request exactly as given (no client normalising
// its path or headers) and reads the answer.
func rawExchange(t *testing.T, addr, method, target string, headers []string, body string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, addr)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("Connection: close\r\n\r\n" + body)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// TestAuthEdges: with keys required, no spelling of a path, of the
// Authorization header or of the method gets a request to a backend
// without a configured key; the answers and the logs never repeat the
// key presented.
func TestAuthEdges(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, jsonHandler(200, `{"id":"x","object":"chat.completion","choices":[]}`))
	cfg := policyConfig(b.URL)
	cfg.Server.ForwardAuthorization = true // the riskiest setting: what is checked is what is sent
	gw := startGateway(t, cfg)

	const good = "sk-acme-secret"
	const wrong = "sk-acme-secreT-planted-wrong-key"
	basic := base64.StdEncoding.EncodeToString([]byte(good))

	// The control: a good key reaches the backend, so a zero below means
	// the gateway stopped the request, not that nothing could pass.
	if status, body := rawExchange(t, gw.Addr, "POST", "/v1/chat/completions", []string{"Authorization: Bearer " + good}, plainBody); status != 200 {
		t.Fatalf("the good key: %d %s", status, body)
	}
	if status, _ := rawExchange(t, gw.Addr, "POST", "/v1/chat/completions", []string{"authorization: bearer  " + good + " "}, plainBody); status != 200 {
		t.Errorf("the scheme's case and spaces around the key are allowed (RFC 9110 11.1): %d", status)
	}
	passed := b.requests.Load()
	if passed != 2 {
		t.Fatalf("the backend saw %d requests for 2 good ones", passed)
	}

	paths := []string{
		"/v1/chat/completions", "//v1/chat/completions", "/v1//chat/completions", "/v1/../v1/chat/completions",
		"/v1/./chat/completions", "/v1%2Fchat%2Fcompletions", "/v1/chat%2Fcompletions", "/%761/chat/completions",
		"/V1/chat/completions", "/v1/chat/completions/", "/v1/chat/completions;x", "/v1/chat/completions?api_key=" + good,
		"/v1/embeddings", "/v1/files", "/v1/models", "/v1/responses", "/v1/completions", "/v1/x/../../admin/stats",
		"http://" + gw.Addr + "/v1/chat/completions", "http://evil.example/v1/chat/completions", "/v1/chat/completions%00",
		"/v1/chat/completions%20", "/v1/chat\\completions", "/./v1/chat/completions",
	}
	headers := [][]string{
		nil,
		{"Authorization:"},
		{"Authorization: Bearer"},
		{"Authorization: Bearer "},
		{"Authorization: Bearer " + wrong},
		{"Authorization: Bearer " + good[:len(good)-1]},
		{"Authorization: Bearer " + good + "x"},
		{"Authorization: Bearer Bearer " + good},
		{"Authorization: Basic " + basic},
		{"Authorization: " + good},
		{"Authorization: Token " + good},
		{"X-Api-Key: " + good},
		{"Api-Key: " + good},
		{"Authorization: Bearer " + wrong, "Authorization: Bearer " + good},
		{"Authorization: Bearer " + good, "Authorization: Bearer " + wrong},
		{"authorization: Bearer " + good, "AUTHORIZATION: Bearer " + wrong},
		{"Authorization: Bearer " + good + ", Bearer " + wrong},
		{"Authorization: Bearer " + good + "\x00"},
	}
	methods := []string{"POST", "GET", "HEAD", "OPTIONS", "PUT", "DELETE", "PATCH", "TRACE", "CONNECT"}

	tries := 0
	for _, path := range paths {
		for _, hs := range headers {
			for _, m := range methods {
				if strings.Contains(path, "%00") && m != "POST" || len(hs) > 0 && m != "POST" && m != "GET" {
					continue // enough of a product
				}
				body := ""
				if m == "POST" || m == "PUT" || m == "PATCH" {
					body = plainBody
				}
				before := b.requests.Load()
				status, answer := rawExchange(t, gw.Addr, m, path, hs, body)
				tries++
				if b.requests.Load() != before {
					t.Errorf("%s %s %q reached the backend (answer %d)", m, path, hs, status)
				}
				if status < 400 || status >= 500 {
					t.Errorf("%s %s %q: %d, want a 4xx", m, path, hs, status)
				}
				if strings.Contains(answer, good) || strings.Contains(answer, wrong) || strings.Contains(answer, basic) {
					t.Errorf("%s %s %q: the answer repeats the key: %s", m, path, hs, answer)
				}
			}
		}
	}
	t.Logf("%d requests without a good key, none reached the backend", tries)
	logs := gw.logs.String()
	for _, k := range []string{good, wrong, basic} {
		if i := strings.Index(logs, k); i >= 0 {
			t.Errorf("the logs hold a key presented: %s", logs[max(0, i-300):min(len(logs), i+100)])
		}
	}
}
