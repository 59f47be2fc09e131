package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// gatedWriter blocks every write until release is closed: a log sink that
// stopped reading (a full pipe to a stuck collector).
type gatedWriter struct {
	release chan struct{}
	buf     syncBuffer
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.buf.Write(p)
}

// The request log line is written off the request path: answers (plain
// ones are written only after the handler returns) and streams do not
// wait for a slow log sink, and each line carries the time its request
// ended, not the time the sink took it.
func TestStuckLogDoesNotHoldAnswers(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); strings.Contains(string(b), `"stream":true`) {
			sseHandler(2, 0)(w, r)
			return
		}
		jsonHandler(200, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)(w, r)
	})
	sink := &gatedWriter{release: make(chan struct{})}
	gw := serveGateway(t, testConfig(be.URL), slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: slog.LevelInfo})))
	client := &http.Client{Timeout: 2 * time.Second}
	for i, body := range []string{plainBody, streamBody, plainBody} {
		resp, err := client.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			close(sink.release)
			t.Fatalf("request %d with the log sink stuck: %v", i, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(got), `"hi"`) && !strings.Contains(string(got), "[DONE]") {
			t.Errorf("request %d: %d %q", i, resp.StatusCode, got)
		}
	}
	answered := time.Now()
	time.Sleep(20 * time.Millisecond)
	close(sink.release)
	gw.syncTelemetry()
	lines := regexp.MustCompile(`time=(\S+) level=INFO msg=request `).FindAllStringSubmatch(sink.buf.String(), -1)
	if len(lines) != 3 {
		t.Fatalf("%d request lines, want 3:\n%s", len(lines), sink.buf.String())
	}
	for _, l := range lines {
		at, err := time.Parse(time.RFC3339Nano, l[1])
		if err != nil {
			t.Fatal(err)
		}
		if at.After(answered) {
			t.Errorf("line stamped %v, after the answers were all in (%v): the time the sink took it, not the request's end", at, answered)
		}
	}
}
