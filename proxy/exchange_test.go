package proxy

import "testing"

// commonString never aliases the request's buffer, which fasthttp reuses
// for the connection's next request.
func TestCommonStringCopiesTheRest(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"POST", "GET", "/v1/chat/completions", "/v1/embeddings", "/v1/audio/speech", "PATCH", ""} {
		b := []byte(in)
		s := commonString(b)
		for i := range b {
			b[i] = 'Z'
		}
		if s != in {
			t.Errorf("commonString(%q) = %q after its buffer was reused", in, s)
		}
	}
}
