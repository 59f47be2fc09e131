package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/openai"
)

// replica is one gateway's selection prefix over its own backend objects
// of the same URLs: nothing shared with another replica but the config.
type replica struct {
	sel *prefixSelector
	bs  []*backend
}

func newReplica(t testing.TB, weights ...int) *replica {
	t.Helper()
	pc := PoolConfig{Selection: PrefixPolicy}
	for i, w := range weights {
		pc.Backends = append(pc.Backends, BackendConfig{URL: fmt.Sprintf("http://gpu-%d:8000", i), Weight: w})
	}
	pc.defaults()
	r := &replica{sel: newPrefixSelector("p", pc)}
	for _, bc := range pc.Backends {
		b, err := newBackend(bc, pc, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r.bs = append(r.bs, b)
	}
	return r
}

// route picks a backend for k as the pool would (candidates, select,
// placed) and returns its position and why.
func (r *replica) route(k *affinity.Key) (int, reason) {
	s := pickPool.Get().(*pick)
	defer s.release()
	s.key, s.now = k, time.Now()
	for i, b := range r.bs {
		if b.Available(s.now) {
			s.cands, s.pos = append(s.cands, b), append(s.pos, i)
		}
	}
	c, why := r.sel.Select(s)
	r.sel.placed(s, c, why)
	return s.pos[c], why
}

func promptKey(t testing.TB, r *replica, body string, hdr ...string) *affinity.Key {
	t.Helper()
	env, err := openai.ScanRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	k := new(affinity.Key)
	r.sel.key(nil, []byte(body), &env, k)
	return k
}

func coldPrompt(i int) string {
	return fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":"app %d: %s"},{"role":"user","content":"hi"}]}`, i, strings.Repeat("a system prompt of its own. ", 10))
}

// Two replicas that never talk send every cold prefix, and every cold
// session, to the same backend, and spread them over the fleet.
func TestReplicasAgreeOnColdPlacement(t *testing.T) {
	t.Parallel()
	a, b := newReplica(t, 1, 1, 1, 1), newReplica(t, 1, 1, 1, 1)
	counts := make([]int, 4)
	for i := range 2000 {
		body := coldPrompt(i)
		if i%2 == 1 { // a session of a short prompt: placed by its key
			body = fmt.Sprintf(`{"model":"m","prompt_cache_key":"conv-%d","messages":[{"role":"user","content":"hi"}]}`, i)
		}
		ca, whyA := a.route(promptKey(t, a, body))
		cb, _ := b.route(promptKey(t, b, body))
		if ca != cb {
			t.Fatalf("request %d: replica a chose backend %d, b chose %d", i, ca, cb)
		}
		if want := []reason{reasonCold, reasonSessionNew}[i%2]; whyA != want {
			t.Fatalf("request %d: a first prompt routed %s, want %s", i, whyA, want)
		}
		counts[ca]++
	}
	for _, n := range counts {
		if n < 400 || n > 600 {
			t.Fatalf("2000 cold prefixes over 4 backends: %v", counts)
		}
	}
}

// Their own load estimates differ (each counts what it sent); within the
// bound they still agree, and a backend past (1+ε)·mean + c gets no cold
// prefix from the replica that sees it so.
func TestColdPlacementIsBoundedByLoad(t *testing.T) {
	t.Parallel()
	a, b := newReplica(t, 1, 1, 1, 1), newReplica(t, 1, 1, 1, 1)
	// a sees some load the other does not: costs 2, 1, 1, 3, mean 1.75,
	// bound 1.25·1.75 + 2 = 4.19: every backend within it.
	a.bs[0].outstanding.Store(1)
	a.bs[3].outstanding.Store(2)
	agree := 0
	for i := range 500 {
		ca, _ := a.route(promptKey(t, a, coldPrompt(10000+i)))
		cb, _ := b.route(promptKey(t, b, coldPrompt(10000+i)))
		if ca == cb {
			agree++
		}
	}
	if agree != 500 {
		t.Fatalf("replicas whose loads differ within the bound agreed on %d of 500 cold prefixes", agree)
	}
	// Backend 2 far past the bound: costs 2, 1, 11, 3 (requests, the
	// new one included), mean 4.25, bound 1.25·4.25 + 2 = 7.3 < 11.
	a.bs[2].outstanding.Store(10)
	for i := range 500 {
		if c, _ := a.route(promptKey(t, a, coldPrompt(20000+i))); c == 2 {
			t.Fatal("a cold prefix went to a backend past the load bound")
		}
	}
}

// A backend of weight 3 takes about three times the cold prefixes of one
// of weight 1.
func TestColdPlacementFollowsWeight(t *testing.T) {
	t.Parallel()
	r := newReplica(t, 3, 1)
	var n [2]int
	for i := range 4000 {
		c, _ := r.route(promptKey(t, r, coldPrompt(i)))
		r.bs[c].outstanding.Store(0)
		n[c]++
	}
	if n[0] < 2800 || n[0] > 3200 {
		t.Fatalf("weights 3 and 1 took %v of 4000 cold prefixes", n)
	}
}

// Through real gateways: two that never talk, in front of the same
// backends, send each new prompt to the same backend.
func TestTwoGatewaysAgreeOnColdPrefixes(t *testing.T) {
	t.Parallel()
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t)}
	gws := []*testGateway{routingGateway(t, PrefixPolicy, bs, nil), routingGateway(t, PrefixPolicy, bs, nil)}
	where := func(gw *testGateway, body string) int {
		before := chatsOf(bs)
		if code, _, resp := post(t, gw.URL, "/v1/chat/completions", body); code != 200 {
			t.Fatalf("status %d: %s", code, resp)
		}
		for i, b := range bs {
			if b.chats.Load() != before[i] {
				return i
			}
		}
		t.Fatal("no backend got the request")
		return -1
	}
	used := map[int]bool{}
	for i := range 24 {
		body := coldPrompt(i)
		if i%3 == 0 {
			body = fmt.Sprintf(`{"model":"m","prompt_cache_key":"c%d","messages":[{"role":"user","content":"hi %d"}]}`, i, i)
		}
		first, second := where(gws[0], body), where(gws[1], body)
		if first != second {
			t.Fatalf("prompt %d: the first gateway sent it to backend %d, the second to %d", i, first, second)
		}
		used[first] = true
	}
	if len(used) < 3 {
		t.Fatalf("24 new prompts went to %d backends of 4", len(used))
	}
}

// A session that leaves its backend — saturated, or out of selection —
// goes to the next backend its key ranks, so replicas that move it
// each on their own still agree, and it stays there.
func TestReplicasMoveASessionAlike(t *testing.T) {
	t.Parallel()
	a, b := newReplica(t, 1, 1, 1, 1), newReplica(t, 1, 1, 1, 1)
	for i := range 200 {
		body := fmt.Sprintf(`{"model":"m","prompt_cache_key":"moving-%d","messages":[{"role":"user","content":"hi"}]}`, i)
		home, _ := a.route(promptKey(t, a, body))
		if c, _ := b.route(promptKey(t, b, body)); c != home {
			t.Fatalf("session %d: placed on %d and %d", i, home, c)
		}
		// Saturated on both (the imbalance guard: 40 more requests than
		// the least loaded), then out of selection on both.
		a.bs[home].outstanding.Store(40)
		b.bs[home].outstanding.Store(40)
		ma, why := a.route(promptKey(t, a, body))
		mb, _ := b.route(promptKey(t, b, body))
		if why != reasonSessionMoved || ma == home || ma != mb {
			t.Fatalf("session %d on %d, saturated: moved (%s) to %d and %d", i, home, why, ma, mb)
		}
		a.bs[home].outstanding.Store(0)
		b.bs[home].outstanding.Store(0)
		if c, why := a.route(promptKey(t, a, body)); c != ma || why != reasonSessionSticky {
			t.Fatalf("session %d: after the move, %s to %d, not sticky on %d", i, why, c, ma)
		}
		a.bs[ma].healthy.Store(false)
		b.bs[ma].healthy.Store(false)
		na, _ := a.route(promptKey(t, a, body))
		nb, _ := b.route(promptKey(t, b, body))
		a.bs[ma].healthy.Store(true)
		b.bs[ma].healthy.Store(true)
		if na == ma || na != nb {
			t.Fatalf("session %d: its backend %d out of selection, moved to %d and %d", i, ma, na, nb)
		}
	}
}
