//go:build !race

package shaping

import (
	"context"
	"testing"
)

func TestAcquireReleaseAllocatesNothing(t *testing.T) {
	l := mustNew(t, Config{Global: Cap{MaxRequests: 10}, DefaultTenant: Tenant{Cap: Cap{MaxRequests: 10}}})
	hold, _ := l.Acquire(context.Background(), Request{Tenant: "t"})
	defer hold.Release()
	if n := testing.AllocsPerRun(100, func() {
		p, _ := l.Acquire(context.Background(), Request{Tenant: "t", Tokens: 5})
		p.Release()
	}); n != 0 {
		t.Errorf("%v allocations per acquire and release, want 0", n)
	}
}

// A tenant that comes and goes with each request (the gateway's
// anonymous one, or a one-off key) is made again from the spare.
func TestPassingTenantAllocatesNothing(t *testing.T) {
	l := mustNew(t, Config{Global: Cap{MaxRequests: 10}})
	if n := testing.AllocsPerRun(100, func() {
		p, _ := l.Acquire(context.Background(), Request{Tenant: "anonymous"})
		p.Release()
	}); n != 0 {
		t.Errorf("%v allocations per acquire and release, want 0", n)
	}
}
