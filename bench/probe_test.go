package bench

import (
	"context"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/llamafake"
)

// probe --reuse against a server with llama.cpp's habits (it closes the
// connection after every streamed answer and every 404, saying
// keep-alive): every request answers, on whatever connection.
func TestProbeReuseSurvivesClosedConnections(t *testing.T) {
	t.Parallel()
	fake := llamafake.Start(t, llamafake.Options{Idle: 100 * time.Millisecond})
	for _, tc := range []struct {
		name   string
		stream bool
	}{{"stream", true}, {"plain", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
			if tc.stream {
				body = []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			}
			rs, err := Probe(context.Background(), ProbeConfig{URL: fake.URL + "/v1/chat/completions", Body: body, Stream: tc.stream, N: 30, Reuse: true, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range rs {
				if r.Err != nil || r.Status != 200 {
					t.Errorf("request %d: status %d, %v", i+1, r.Status, r.Err)
				}
			}
		})
	}
}
