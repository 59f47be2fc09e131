package shaping

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The waiting board keeps the order between service classes across
// replicas. Each replica's queue orders its own waiters, but a slot a
// release frees is taken by whichever replica's dispatcher asks Redis
// first: without the board, a flex request queued on one replica could
// take it while a priority request waited on another. So each replica
// posts, in one Redis hash, how many of its waiters of each class are
// held up only by the shared caps (not by their own tenant's or class's
// cap), with an expiry; and a request asking for a slot at a global,
// pool or model cap finds that cap smaller by the waiters of the classes
// above its own on the other replicas. The lower classes keep a bounded
// share across replicas too: after lower_share-1 tries in a row that a
// cap refused, a replica's next lower-class try is not cut (boardFor);
// and a request granted by this replica's own share of the queue (the
// lower classes' turn) is not cut at all. A replica that dies stops
// posting; its entry counts until it expires (boardTTL).

// boardScript posts this replica's waiting counts: KEYS[1] the board,
// ARGV replica, ttl ms, then the count of each class (by Class value).
// All zero removes the entry. When the replica's total fell, waiters
// everywhere are woken (ARGV channel): the cut they saw may be smaller.
var boardScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, ttl, channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local total, counts = 0, {}
for i = 4, #ARGV do
  local n = tonumber(ARGV[i])
  total = total + n
  counts[#counts + 1] = ARGV[i]
end
local before = 0
local old = redis.call('HGET', KEYS[1], me)
if old then
  local first = true
  for v in string.gmatch(old, '[^,]+') do
    if first then first = false else before = before + tonumber(v) end
  end
end
if total == 0 then
  redis.call('HDEL', KEYS[1], me)
else
  redis.call('HSET', KEYS[1], me, (now + ttl) .. ',' .. table.concat(counts, ','))
  redis.call('PEXPIRE', KEYS[1], ttl * 2)
end
if total < before then redis.call('PUBLISH', channel, '1') end
return 0
`)

// boardTTL is how long a replica's post counts without being renewed: a
// few polls, at least a second.
func (s *sharedCaps) boardTTL() time.Duration {
	return max(4*s.cfg.PollInterval, time.Second)
}

func (s *sharedCaps) boardKey() string { return "{" + s.cfg.KeyPrefix + "}:waiting" }

// post writes counts to the board.
func (s *sharedCaps) post(ctx context.Context, counts [NumClasses]int) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	args := []any{s.replica, s.boardTTL().Milliseconds(), s.channel}
	for _, n := range counts {
		args = append(args, n)
	}
	if err := boardScript.Run(ctx, s.c, []string{s.boardKey()}, args...).Err(); err != nil {
		return fmt.Errorf("shaping: redis waiting board: %w", err)
	}
	return nil
}

// boardCounts counts this replica's waiters of each class that only the
// shared caps hold up. Called with l.mu held.
func (l *Limiter) boardCounts() [NumClasses]int {
	var n [NumClasses]int
	for c := range NumClasses {
		if l.q.nc[c] == 0 {
			continue
		}
		for _, lv := range l.q.levels[c] {
			for _, t := range lv.ring {
				for e := t.waiting[c].Front(); e != nil; e = e.Next() {
					if w := e.Value.(*waiter); !w.tenantFull && !w.classFull && !w.gone {
						n[c]++
					}
				}
			}
		}
	}
	return n
}

// postBoard posts the waiting counts when classes are on and they
// changed, or to renew a post that is not all zero. Called by the
// dispatcher after each pass, without l.mu.
func (l *Limiter) postBoard() {
	if !l.cfg.Classes.Enabled || !l.sharedUp.Load() {
		return
	}
	l.mu.Lock()
	n := l.boardCounts()
	l.mu.Unlock()
	now := time.Now()
	if n == l.posted && (n == [NumClasses]int{} || now.Sub(l.postedAt) < l.shared.boardTTL()/3) {
		return
	}
	if err := l.shared.post(context.Background(), n); err != nil {
		l.down(err)
		return
	}
	l.posted, l.postedAt = n, now
}

// boardFor is p's board arguments for the acquire script (this
// replica, then the mask of the classes above p's: bit c for Class c),
// nil when classes are off. The mask is empty for a request granted by
// this replica's lower classes' share, and for every lower-class try
// once the board has held them back lower_share-1 times in a row: the
// lower classes' share across replicas. Called with l.mu held.
func (l *Limiter) boardFor(p *Permit) []any {
	if !l.cfg.Classes.Enabled {
		return nil
	}
	above := 0
	for _, c := range ClassesByRank {
		if c == p.class {
			break
		}
		above |= 1 << c
	}
	if p.byShare || l.q.share > 1 && l.boardStreak >= l.q.share-1 {
		above = 0
	}
	return []any{l.shared.replica, above}
}

// boardHeld counts a lower-class try the board may have held back (a
// global, pool or model cap was full for it), and resets the count when
// one got through. Called with l.mu held.
func (l *Limiter) boardHeld(p *Permit, full *sharedCap) {
	switch {
	case p.class == ClassesByRank[0] || !l.cfg.Classes.Enabled:
	case full == nil:
		l.boardStreak = 0
	case full.level != "tenant" && full.level != "class":
		l.boardStreak++
	}
}
