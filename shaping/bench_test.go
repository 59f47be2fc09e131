package shaping

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testredis"
)

// Uncontended: one goroutine, caps at every level with room.
func BenchmarkAcquireRelease(b *testing.B) {
	l := mustNew(b, Config{Global: Cap{MaxRequests: 1000, MaxTokens: 1 << 40}, Pools: map[string]Cap{"gpu": {MaxRequests: 1000}},
		Models: map[string]Cap{"llama": {MaxTokens: 1 << 30}}, DefaultTenant: Tenant{Cap: Cap{MaxRequests: 100}}})
	r := Request{Tenant: "t", Pool: "gpu", Model: "llama", Tokens: 1024}
	ctx := context.Background()
	hold, _ := l.Acquire(ctx, r) // the tenant's state stays made
	defer hold.Release()
	b.ReportAllocs()
	for range b.N {
		p, err := l.Acquire(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}

// 64 goroutines at once on caps that always have room: the cost of the
// one mutex under contention.
func BenchmarkAcquireRelease64(b *testing.B) {
	l := mustNew(b, Config{Global: Cap{MaxRequests: 1 << 20}, DefaultTenant: Tenant{Cap: Cap{MaxRequests: 1 << 20}}})
	ctx := context.Background()
	b.SetParallelism(32) // × GOMAXPROCS (2 here) = 64 goroutines
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := Request{Tenant: "t"}
		for pb.Next() {
			p, err := l.Acquire(ctx, r)
			if err != nil {
				b.Error(err)
				return
			}
			p.Release()
		}
	})
}

// Shared caps against a real Redis (skipped without one): acquire and
// release pairs from 64 goroutines of one process, under one shared cap
// (serve --max-concurrency N --redis ADDR) and under two (a global cap and
// a cap per tenant). Each acquire is one round trip; releases go back in
// batches off the request path.
func BenchmarkSharedAcquireRelease64(b *testing.B) {
	b.Run("global", func(b *testing.B) { benchShared(b, Config{Global: Cap{MaxRequests: 1 << 20}}) })
	b.Run("global+tenant", func(b *testing.B) {
		benchShared(b, Config{Global: Cap{MaxRequests: 1 << 20}, DefaultTenant: Tenant{Cap: Cap{MaxRequests: 1 << 20}}})
	})
}

func benchShared(b *testing.B, cfg Config) {
	addr := testredis.Addr(b)
	cfg.Redis = RedisConfig{Addr: addr, KeyPrefix: fmt.Sprintf("bench-%d", time.Now().UnixNano()), OpTimeout: time.Second}
	l, err := New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	b.SetParallelism(32)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := Request{Tenant: "t", Tokens: 100}
		for pb.Next() {
			p, err := l.Acquire(ctx, r)
			if err != nil {
				b.Error(err)
				return
			}
			p.Release()
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	if s := l.Stats(); !s.SharedUp || s.SharedDownTransitions > 0 {
		b.Errorf("redis went down during the benchmark: %+v", s)
	}
}
