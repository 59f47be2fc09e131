package shaping

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testredis"
	"github.com/redis/go-redis/v9"
)

// boardPair is two replicas sharing a cap of n through the Redis at addr,
// classes on with lower_share share, polling Redis every poll.
func boardPair(t *testing.T, addr string, n int64, share int, poll time.Duration) (a, b *Limiter) {
	t.Helper()
	prefix := fmt.Sprintf("board-%d", time.Now().UnixNano())
	var lims []*Limiter
	for range 2 {
		cfg := sharedConfig(addr, n)
		cfg.Redis.KeyPrefix = prefix
		cfg.Redis.PollInterval = poll
		cfg.Queue.MaxWaitingPerTenant = -1
		cfg.Classes = Classes{Enabled: true, LowerShare: share}
		lims = append(lims, newShared(t, cfg))
	}
	return lims[0], lims[1]
}

// acquireAsync asks l for a slot of class c in the background; the
// permit is held until the test ends.
func acquireAsync(t *testing.T, l *Limiter, c Class) <-chan error {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		p, err := l.Acquire(ctx, Request{Tenant: "t-" + c.String(), Class: c})
		if err == nil {
			t.Cleanup(p.Release)
		}
		got <- err
	}()
	return got
}

// waitPosted waits until l's post is on the board.
func waitPosted(t *testing.T, rc *redis.Client, l *Limiter) {
	t.Helper()
	waitFor(t, func() bool {
		v, _ := rc.HGet(context.Background(), l.shared.boardKey(), l.shared.replica).Result()
		return v != ""
	})
}

// A slot freed on one replica goes to the priority request waiting on
// the other, not to the flex request waiting where it was freed; the
// flex request gets the next one. Without the waiting board the replica
// that frees a slot rings its own dispatcher first and its flex waiter
// takes it.
func TestClassOrderAcrossReplicas(t *testing.T) {
	addr := testredis.Addr(t)
	a, b := boardPair(t, addr, 2, -1, 10*time.Second)
	held := grab(t, a, ClassDefault, 2)
	prio := acquireAsync(t, b, ClassPriority)
	queued(t, b, 1)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	waitPosted(t, rc, b)
	flex := acquireAsync(t, a, ClassFlex)
	queued(t, a, 1)
	subscribed(t, addr, b.shared.channel, 2)

	held[0].Release()
	select {
	case err := <-prio:
		if err != nil {
			t.Fatalf("priority on the other replica: %v", err)
		}
	case err := <-flex:
		t.Fatalf("the flex request took the freed slot (err %v) while priority waited on the other replica", err)
	case <-time.After(5 * time.Second):
		t.Fatal("nobody got the freed slot in 5s")
	}
	// Priority's post is gone once it is served, and flex still waits.
	waitFor(t, func() bool {
		n, _ := rc.HExists(context.Background(), b.shared.boardKey(), b.shared.replica).Result()
		return !n
	})
	// The removal woke every replica: a flex grant now would show at
	// once (the cap is full again).
	select {
	case err := <-flex:
		t.Fatalf("flex got a slot of a full cap (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	held[1].Release()
	select {
	case err := <-flex:
		if err != nil {
			t.Fatalf("flex after the second release: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("flex did not get the second slot in 5s")
	}
}

// A replica's post is renewed while its waiters wait and expires when it
// stops: a replica that died holds the others back only for boardTTL.
func TestBoardPostExpires(t *testing.T) {
	addr := testredis.Addr(t)
	a, b := boardPair(t, addr, 1, -1, 100*time.Millisecond)
	held := grab(t, a, ClassDefault, 1)
	defer held[0].Release()
	acquireAsync(t, b, ClassPriority) // never granted: b dies below
	queued(t, b, 1)
	flex := acquireAsync(t, a, ClassFlex)
	queued(t, a, 1)
	// b dies with its priority waiter posted: stop its loops without
	// its waiter leaving the queue.
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	waitPosted(t, rc, b)
	b.Close()
	start := time.Now()
	held[0].Release()
	held = held[:0]
	select {
	case err := <-flex:
		if err != nil {
			t.Fatalf("flex: %v", err)
		}
		if d := time.Since(start); d < b.shared.boardTTL()/2 {
			t.Errorf("flex got the slot %v after the release, before the dead replica's post could expire (%v)", d, b.shared.boardTTL())
		}
	case <-time.After(b.shared.boardTTL() + 12*time.Second):
		t.Fatal("flex never got the slot after the dead replica's post expired")
	}
}

// After lower_share-1 tries in a row that a shared cap refused, a lower
// class's next try is not cut by the board: the lower classes' share
// across replicas. Priority is never cut, and a request granted by the
// local share is not.
func TestBoardShareBoundsStarvation(t *testing.T) {
	addr := testredis.Addr(t)
	a, _ := boardPair(t, addr, 1, 3, 10*time.Second)
	full := &sharedCap{level: "global"}
	mask := func(c Class, byShare bool) int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.boardFor(&Permit{class: c, byShare: byShare})[1].(int)
	}
	held := func(c Class, f *sharedCap) {
		a.mu.Lock()
		a.boardHeld(&Permit{class: c}, f)
		a.mu.Unlock()
	}
	want := 1<<ClassPriority | 1<<ClassDefault
	if got := mask(ClassFlex, false); got != want {
		t.Fatalf("flex's mask %b, want %b", got, want)
	}
	if got := mask(ClassPriority, false); got != 0 {
		t.Fatalf("priority's mask %b, want 0", got)
	}
	if got := mask(ClassFlex, true); got != 0 {
		t.Fatalf("a flex request granted by the local share: mask %b, want 0", got)
	}
	held(ClassFlex, full)
	held(ClassPriority, full) // priority's refusals do not count
	if got := mask(ClassFlex, false); got != want {
		t.Fatalf("after one refusal: mask %b, want %b", got, want)
	}
	held(ClassDefault, &sharedCap{level: "tenant"}) // nor a tenant cap's
	held(ClassDefault, full)
	if got := mask(ClassFlex, false); got != 0 {
		t.Fatalf("after lower_share-1 refusals: mask %b, want 0 (the share's turn)", got)
	}
	held(ClassFlex, nil) // one got through: the count starts again
	if got := mask(ClassFlex, false); got != want {
		t.Fatalf("after a grant: mask %b, want %b", got, want)
	}
}
