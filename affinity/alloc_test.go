//go:build !race

package affinity

import (
	"testing"

	"github.com/infergate/infergate/openai"
)

// Reading a request's session and using the table allocate nothing.
func TestSessionsAllocateNothing(t *testing.T) {
	body := []byte(`{"model":"m","conversation":{"a":[1,2,{"b":"c"}],"id":"conv"},"prompt_cache_key":5,"user":"u"}`)
	env, err := openai.ScanRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	hv := [][]byte{nil, []byte("abc")}
	tb := NewSessions(1024)
	n := testing.AllocsPerRun(100, func() {
		s := SessionOf(body, &env, SessionOptions{Headers: hv, User: true})
		tb.Learn(s.Key, 3)
		tb.Lookup(s.Key)
	})
	if n != 0 {
		t.Fatalf("a session read, learnt and looked up: %v allocations", n)
	}
}
