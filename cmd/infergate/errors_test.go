package main

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// infergate runs the binary with OPENAI_API_KEY empty (the errors must
// not depend on a key the developer has set) and returns its exit status
// and what it printed. A child process rather than run() in this one, so
// the tests need no t.Setenv and run side by side.
func infergate(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=")
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("infergate %v: %v", args, err)
	}
	return code, o.String(), e.String()
}

// wants fails t unless s holds every one of subs.
func wants(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s lacks %q:\n%s", what, sub, s)
		}
	}
}

// htmlPage is a web server's page, long enough that printing it whole
// would bury the error.
var htmlPage = "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title><style>body { width: 35em; }</style></head>\n<body>" +
	strings.Repeat("<p>If you see this page, the nginx web server is successfully installed.</p>\n", 40) + "</body></html>\n"

// TestErrorsNameTheCause: a wrong key, a web server that is not an LLM,
// a gateway whose backend is down: each error says which it is, on one
// line, and never prints a whole HTML page.
func TestErrorsNameTheCause(t *testing.T) {
	t.Parallel()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"message":"Incorrect API key provided: sk-wrong.","type":"invalid_request_error","code":"invalid_api_key"}}`))
	}))
	defer refusing.Close()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(htmlPage))
	}))
	defer web.Close()

	t.Run("a refused key, finding the model", func(t *testing.T) {
		code, _, stderr := infergate(t, "bench", "--url", refusing.URL, "--api-key", "sk-wrong", "--duration", "1s")
		if code == 0 {
			t.Fatal("exit 0")
		}
		wants(t, "stderr", stderr, "status 401", "refused", "--api-key or $OPENAI_API_KEY", "Incorrect API key provided")
		if strings.Contains(stderr, "gave no model") {
			t.Errorf("still blames the model list: %s", stderr)
		}
	})
	t.Run("a refused key, every request", func(t *testing.T) {
		code, stdout, stderr := infergate(t, "probe", refusing.URL, "--model", "m", "-n", "3", "--api-key", "sk-wrong")
		if code == 0 {
			t.Fatalf("exit 0 when every request failed\n%s", stdout)
		}
		wants(t, "stdout", stdout, "status 401, application/json: the server refused", "--api-key or $OPENAI_API_KEY")
		wants(t, "stderr", stderr, "all 3 requests failed")
	})
	t.Run("a web server, finding the model", func(t *testing.T) {
		code, _, stderr := infergate(t, "probe", web.URL)
		if code == 0 {
			t.Fatal("exit 0")
		}
		wants(t, "stderr", stderr, "status 200, text/html", `"Welcome to nginx!"`, "want JSON")
		if strings.Contains(stderr, "<p>") || len(stderr) > 600 {
			t.Errorf("prints the page (%d bytes): %s", len(stderr), stderr)
		}
	})
	t.Run("a web server, every request", func(t *testing.T) {
		code, _, stderr := infergate(t, "bench", "--url", web.URL, "--model", "m", "--concurrency", "2", "--duration", "3s")
		if code == 0 {
			t.Fatal("exit 0")
		}
		wants(t, "stderr", stderr, "status 200, text/html", `"Welcome to nginx!"`, "want a JSON completion")
		if strings.Contains(stderr, "<p>") {
			t.Errorf("prints the page: %s", stderr)
		}
	})
	t.Run("an HTML error page, one line per failure", func(t *testing.T) {
		bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte("<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n" + strings.Repeat("<!-- padding -->\r\n", 30) + "</body>\r\n</html>\r\n"))
		}))
		defer bad.Close()
		code, stdout, _ := infergate(t, "probe", bad.URL, "--model", "m", "-n", "4")
		if code == 0 {
			t.Fatal("exit 0 when every request failed")
		}
		if n := strings.Count(stdout, "error: status 502, text/html: \"502 Bad Gateway\"\n"); n != 4 {
			t.Errorf("%d one-line failures, want 4:\n%s", n, stdout)
		}
		if strings.Contains(stdout, "<") {
			t.Errorf("prints HTML:\n%s", stdout)
		}
	})
}

// TestGatewayErrorShown: behind a gateway whose one backend is down, the
// user reads the gateway's own error message, not a bare 502.
func TestGatewayErrorShown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	gw := start(t, "serve", "--listen", "127.0.0.1:0", "--upstream", dead)
	url := gw.url(t)
	code, stdout, _ := infergate(t, "probe", url, "--model", "m", "-n", "2")
	if code == 0 {
		t.Fatalf("exit 0 when every request failed\n%s", stdout)
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if strings.Contains(line, "error:") && !strings.Contains(line, "status 502, application/json: ") {
			t.Errorf("failure line without the gateway's status and message: %q", line)
		}
	}
	wants(t, "probe's stdout", stdout, "error: status 502, application/json: the gateway could not connect to a backend")
	// Without --model, the model lookup is what fails, and says why.
	code, _, stderr := infergate(t, "bench", "--url", url, "--duration", "1s")
	if code == 0 {
		t.Fatal("bench: exit 0")
	}
	wants(t, "bench's stderr", stderr, "/v1/models: status 502, application/json: the gateway could not connect to a backend")
}

// TestURLWithoutScheme: every command that takes an API URL says what to
// write when the scheme is missing, under the name the user wrote.
func TestURLWithoutScheme(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "gw.yaml")
	os.WriteFile(conf, []byte("pools:\n  default:\n    backends:\n      - url: 127.0.0.1:8000\nmodels:\n  - {name: m, pool: default}\n"), 0o600)
	ranks := filepath.Join(dir, "rank.yaml")
	os.WriteFile(ranks, []byte("endpoints:\n  - {name: a, url: \"localhost:8000\", model: m}\n"), 0o600)
	empty := filepath.Join(dir, "pairs.jsonl")
	os.WriteFile(empty, nil, 0o600)
	hint := "has no scheme: did you mean http://"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--url", "127.0.0.1:8000", "--duration", "1s"}, `--url "127.0.0.1:8000" ` + hint + "127.0.0.1:8000?"},
		{[]string{"bench", "--url", "localhost:8000", "--model", "m", "--duration", "1s"}, `"localhost:8000" ` + hint + "localhost:8000?"},
		{[]string{"probe", "127.0.0.1:8000"}, `"127.0.0.1:8000" ` + hint + "127.0.0.1:8000?"},
		{[]string{"tune", "--admin", "127.0.0.1:1", "--url", "127.0.0.1:8000", "--slo", "ttft=2s"}, `--url "127.0.0.1:8000" ` + hint},
		{[]string{"diagnose", "--backend-metrics", "127.0.0.1:8000/metrics", "--window", "1s"}, `"127.0.0.1:8000/metrics" ` + hint + "127.0.0.1:8000/metrics?"},
		{[]string{"serve", "--upstream", "127.0.0.1:8000"}, `--upstream "127.0.0.1:8000" ` + hint + "127.0.0.1:8000?"},
		{[]string{"serve", "--config", conf}, `pools.default.backends[0].url: "127.0.0.1:8000" ` + hint},
		{[]string{"config", "check", conf}, `pools.default.backends[0].url: "127.0.0.1:8000" ` + hint},
		{[]string{"bench", "--url", "http://127.0.0.1:1", "--model", "m", "--direct-url", "127.0.0.1:8000"}, `--direct-url) "127.0.0.1:8000" ` + hint},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--mirror", "127.0.0.1:8000"}, `--mirror "127.0.0.1:8000" ` + hint},
		{[]string{"ab", "report", empty, "--judge", "127.0.0.1:8000", "--judge-model", "m"}, `--judge "127.0.0.1:8000" ` + hint},
		{[]string{"diagnose", "--backend-metrics", "http://127.0.0.1:1/metrics", "--dcgm", "127.0.0.1:9400", "--window", "1s"}, `"127.0.0.1:9400" ` + hint},
		{[]string{"rank", ranks}, `"localhost:8000" ` + hint + "localhost:8000?"},
	} {
		code, _, stderr := infergate(t, tc.args...)
		name := strings.Join(tc.args, " ")
		if code == 0 {
			t.Errorf("infergate %s: exit 0", name)
		}
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("infergate %s: stderr lacks %q:\n%s", name, tc.want, stderr)
		}
		if strings.Contains(stderr, "first path segment") {
			t.Errorf("infergate %s: Go's parser error reaches the user:\n%s", name, stderr)
		}
	}
}

// TestConfigErrorsSpeakYAML: a typo'd key names the key it meant, at its
// path in the file; a key in the wrong section names its place; a bare
// number where a duration goes says to write 120s.
func TestConfigErrorsSpeakYAML(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(conf, []byte(`server:
  listen: 127.0.0.1:0
  read_timeout: 120
shaping:
  global:
    max_request: 10
pools:
  default:
    backends:
      - url: http://127.0.0.1:8000
models:
  - {name: m, pool: default}
listen: 127.0.0.1:0
`), 0o600)
	for _, args := range [][]string{{"serve", "--config", conf}, {"config", "check", conf}} {
		code, _, stderr := infergate(t, args...)
		if code == 0 {
			t.Errorf("infergate %s: exit 0", strings.Join(args, " "))
		}
		wants(t, "infergate "+strings.Join(args, " "), stderr,
			"line 6, shaping.global.max_request: unknown key; did you mean max_requests?",
			"line 3, server.read_timeout: 120 is not a duration: write 120s",
			"line 13, listen: unknown key; it belongs at server.listen")
		if strings.Contains(stderr, "not found in type") || strings.Contains(stderr, "!!int") {
			t.Errorf("Go's words reach the user:\n%s", stderr)
		}
	}
}
