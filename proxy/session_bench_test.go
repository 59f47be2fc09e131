package proxy

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/infergate/infergate/affinity"
)

// BenchmarkPickSessions is the routing decision of selection prefix with
// its tables full: 10,000 indexed prefixes and 100,000 sessions. Each
// pick is a request of a known session (sticky: the table, then the
// index for its expected blocks) or, every fourth, of a new one (placed
// by the index or the rendezvous hash, then learnt); the breaker's permit
// included. The target is 2 µs and no allocation beyond the permit's.
func BenchmarkPickSessions(b *testing.B) {
	cfg := testConfig("http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", "http://127.0.0.1:4")
	pc := cfg.Pools["p"]
	pc.Selection = PrefixPolicy
	pc.Load.Interval = time.Hour // no scrape during the run
	pc.Load.StaleAfter = time.Hour
	cfg.Pools["p"] = pc
	cfg.Defaults()
	p, err := newPool("p", cfg.Pools["p"], time.Second, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	keys := make([]affinity.Key, 10000)
	text := bytes.Repeat([]byte("x"), 16<<10)
	for i := range keys {
		var h affinity.Hasher
		h.Reset(&keys[i], 128, 1024)
		h.Write([]byte(strconv.Itoa(i)))
		h.Write(text)
		p.prefix.index.Add(&keys[i], i%4)
	}
	const sessions = 100000
	for i := range uint64(sessions) {
		p.prefix.sessions.Learn(affinity.Mix(i+1), p.backends[i%4].nameHash)
	}
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := &keys[i%len(keys)]
		k.Session = affinity.Session{Key: affinity.Mix(uint64(i%sessions) + 1), Source: affinity.SessionPromptCacheKey}
		if i%4 == 3 {
			k.Session.Key = affinity.Mix(uint64(i) + sessions + 1) // a new session
		}
		be, permit, _, _, err := p.pick(nil, now, k)
		if err != nil {
			b.Fatal(err)
		}
		be.settle(permit, true)
	}
}
