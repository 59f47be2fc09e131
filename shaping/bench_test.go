package shaping

import (
	"context"
	"testing"
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
