package shaping

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisConfig shares the caps between replicas. With Addr empty the caps
// are this process's alone.
type RedisConfig struct {
	// Addr is host:port of the Redis server.
	Addr     string `yaml:"addr"`
	Username string `yaml:"username"`
	// PasswordEnv names the environment variable holding the password.
	PasswordEnv string `yaml:"password_env"`
	DB          int    `yaml:"db"`
	// KeyPrefix starts every key; all keys carry it as one hash tag, so
	// one script sees every cap of a request (Redis Cluster included).
	// Default "infergate".
	KeyPrefix string `yaml:"key_prefix"`
	// LeaseTTL is how long a slot outlives a replica that died holding it;
	// live replicas renew their leases every third of it. Default 10s.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// OpTimeout bounds one call to Redis; past it Redis counts as down.
	// Default 250ms.
	OpTimeout time.Duration `yaml:"op_timeout"`
	// OnFailure is what happens while Redis is down: "open" (default)
	// admits under local caps, each shared cap divided by
	// ExpectedReplicas; "closed" refuses with 503.
	OnFailure string `yaml:"on_failure"`
	// ExpectedReplicas is the number of gateway replicas. Default 1.
	ExpectedReplicas int `yaml:"expected_replicas"`
	// PollInterval is how often waiters retry without a release message
	// (slots of a replica that died come back by expiry, unannounced).
	// Default 250ms.
	PollInterval time.Duration `yaml:"poll_interval"`
}

func (c *RedisConfig) defaults() {
	if c.KeyPrefix == "" {
		c.KeyPrefix = "infergate"
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 250 * time.Millisecond
	}
	if c.OnFailure == "" {
		c.OnFailure = "open"
	}
	if c.ExpectedReplicas == 0 {
		c.ExpectedReplicas = 1
	}
	if c.PollInterval == 0 {
		c.PollInterval = 250 * time.Millisecond
	}
}

func (c *RedisConfig) validate() error {
	switch {
	case c.Addr == "":
		return nil
	case c.OnFailure != "open" && c.OnFailure != "closed":
		return fmt.Errorf("shaping: redis.on_failure %q: want open or closed", c.OnFailure)
	case c.LeaseTTL < 100*time.Millisecond:
		return errors.New("shaping: redis.lease_ttl: at least 100ms")
	case c.ExpectedReplicas < 1:
		return errors.New("shaping: redis.expected_replicas: at least 1")
	}
	return nil
}

// rediser is the part of go-redis the shared caps use, so a client, a
// ring or a cluster client all fit.
type rediser interface {
	redis.Scripter
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	Ping(ctx context.Context) *redis.StatusCmd
	Pipeline() redis.Pipeliner
}

// The scripts keep, per cap, a sorted set of leases scored by their
// expiry (Redis's clock, TIME) and a hash of each lease's tokens with
// their total in field "_total". KEYS come in pairs (set, hash), one pair
// per cap; a lease holds a place in every cap of its request or in none.

// acquireScript: ARGV lease, ttl ms, tokens, then max requests and max
// tokens per cap (0: none). Returns 0 when granted, else the 1-based index
// of the first full cap. The token hash is touched only for caps with a
// token limit: Redis's time per script is what bounds the shared rate.
//
// With the waiting board (board.go) its key follows the caps' and ARGV
// goes on with this replica, the mask of the classes above the
// request's (bit c for Class c), and a flag per cap ("1": a global, pool
// or model cap, which the board cuts): such a cap counts as smaller by
// the other replicas' unexpired waiters of those classes.
var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease, ttl, tokens = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local n = math.floor(#KEYS / 2)
local cut, flags = 0, ''
if #KEYS > 2 * n then
  local me, mask = ARGV[4+2*n], tonumber(ARGV[5+2*n])
  flags = ARGV[6+2*n]
  if mask > 0 then
    local board = KEYS[2*n+1]
    local all = redis.call('HGETALL', board)
    for j = 1, #all, 2 do
      if all[j] ~= me then
        local f = {}
        for v in string.gmatch(all[j+1], '[^,]+') do f[#f + 1] = tonumber(v) end
        if (f[1] or 0) <= now then
          redis.call('HDEL', board, all[j])
        else
          for c = 0, #f - 2 do
            if math.floor(mask / 2 ^ c) % 2 == 1 then cut = cut + f[c + 2] end
          end
        end
      end
    end
  end
end
for i = 1, n do
  local z, h = KEYS[2*i-1], KEYS[2*i]
  local maxReq, maxTok = tonumber(ARGV[2+2*i]), tonumber(ARGV[3+2*i])
  if maxTok > 0 then
    local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now)
    for _, m in ipairs(gone) do
      local tk = tonumber(redis.call('HGET', h, m) or '0')
      -- 0 - 0 is 0; -tonumber('0') would reach Redis as "-0", no integer.
      if tk ~= 0 then redis.call('HINCRBY', h, '_total', 0 - tk) end
      redis.call('HDEL', h, m)
    end
  end
  redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
  local c = 0
  if maxReq > 0 and string.sub(flags, i, i) == '1' then c = cut end
  if maxReq > 0 and redis.call('ZCARD', z) >= maxReq - c then return i end
  if maxTok > 0 then
    local total = tonumber(redis.call('HGET', h, '_total') or '0')
    if total > 0 and total + tokens > maxTok then return i end
  end
end
for i = 1, n do
  local z, h = KEYS[2*i-1], KEYS[2*i]
  redis.call('ZADD', z, now + ttl, lease)
  redis.call('PEXPIRE', z, ttl * 2)
  if tonumber(ARGV[3+2*i]) > 0 then
    redis.call('HSET', h, lease, tokens)
    redis.call('HINCRBY', h, '_total', tokens)
    redis.call('PEXPIRE', h, ttl * 2)
  end
end
return 0
`)

// renewScript: ARGV lease, ttl ms. Returns how many caps still held the
// lease (0: it expired and was lost).
var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = 0
for i = 1, #KEYS / 2 do
  local z, h = KEYS[2*i-1], KEYS[2*i]
  if redis.call('ZADD', z, 'XX', 'CH', now + tonumber(ARGV[2]), ARGV[1]) == 1 then held = held + 1 end
  redis.call('PEXPIRE', z, tonumber(ARGV[2]) * 2)
  redis.call('PEXPIRE', h, tonumber(ARGV[2]) * 2)
end
return held
`)

// releaseScript: ARGV lease, channel, then max requests and max tokens
// per cap. Removes the lease from every cap, once (a second call finds
// nothing), and announces the free slot when a cap it frees was full, so
// waiters anywhere try again. Returns 1 when the lease was still held.
var releaseScript = redis.NewScript(`
local held, wake = 0, false
for i = 1, #KEYS / 2 do
  local z, h = KEYS[2*i-1], KEYS[2*i]
  local maxReq, maxTok = tonumber(ARGV[1+2*i]), tonumber(ARGV[2+2*i])
  local before = redis.call('ZCARD', z)
  if redis.call('ZREM', z, ARGV[1]) == 1 then
    held = 1
    if maxReq > 0 and before >= maxReq then wake = true end
  end
  if maxTok > 0 then
    local tk = tonumber(redis.call('HGET', h, ARGV[1]) or '0')
    if tk ~= 0 then
      redis.call('HINCRBY', h, '_total', 0 - tk)
      wake = true
    end
    redis.call('HDEL', h, ARGV[1])
  end
end
if wake then redis.call('PUBLISH', ARGV[2], '1') end
return held
`)

// sharedCaps is the Redis side of a limiter.
type sharedCaps struct {
	c       rediser
	cfg     RedisConfig
	replica string // this process's lease prefix
	channel string
}

func newSharedCaps(c rediser, cfg RedisConfig) *sharedCaps {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &sharedCaps{c: c, cfg: cfg, replica: hex.EncodeToString(b[:]), channel: "{" + cfg.KeyPrefix + "}:released"}
}

// capKey is one cap's pair of keys.
func (s *sharedCaps) capKeys(level, name string) (string, string) {
	base := "{" + s.cfg.KeyPrefix + "}:cap:" + level + ":" + name
	return base + ":leases", base + ":tokens"
}

// lease is a slot held in Redis.
type lease struct {
	id   string
	keys []string
	caps []any // max requests and max tokens per cap, as acquired
	// wake is caps as the release judges them (when a slot it frees
	// may let a waiter in): the lowest class's limits where reserves cut
	// them (classes.<class>.reserved); nil when it is caps.
	wake   []any
	tokens int64
}

// sharedCap is one cap a request counts against in Redis.
type sharedCap struct {
	level, name      string
	maxReqs, maxToks int64
	// wakeReqs and wakeToks are the limits a release judges a cap by:
	// maxReqs and maxToks, or below them the lowest class's where
	// reserves apply (sharedCaps).
	wakeReqs, wakeToks int64
	tenant             bool
	// reserveCut: the reserves above the request's class cut this cap
	// (a full answer may leave room for a higher class).
	reserveCut bool
}

// acquire tries to take a lease in every cap at once (one round trip).
// full is the cap that had no room when it did not work.
// board, when not nil, is the waiting board's arguments (boardArgs).
func (s *sharedCaps) acquire(ctx context.Context, id string, caps []sharedCap, tokens int64, board []any) (l lease, full *sharedCap, err error) {
	l = s.newLease(id, caps, tokens)
	args := append([]any{id, s.cfg.LeaseTTL.Milliseconds(), tokens}, l.caps...)
	keys := l.keys
	if board != nil {
		flags := make([]byte, len(caps))
		for i, c := range caps {
			flags[i] = '0'
			if c.level != "tenant" && c.level != "class" {
				flags[i] = '1'
			}
		}
		keys = append(keys[:len(keys):len(keys)], s.boardKey())
		args = append(append(args, board...), string(flags))
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	n, err := acquireScript.Run(ctx, s.c, keys, args...).Int()
	if err != nil {
		return l, nil, fmt.Errorf("shaping: redis acquire: %w", err)
	}
	if n > 0 && n <= len(caps) {
		return l, &caps[n-1], nil
	}
	return l, nil, nil
}

// renew extends the leases in one pipelined round trip and returns those
// that had expired (their slots were counted free meanwhile).
func (s *sharedCaps) renew(ctx context.Context, ls []lease) (lost []lease, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	ttl := s.cfg.LeaseTTL.Milliseconds()
	pipe := s.c.Pipeline()
	cmds := make([]*redis.Cmd, len(ls))
	for i, l := range ls {
		cmds[i] = renewScript.EvalSha(ctx, pipe, l.keys, l.id, ttl)
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range cmds {
		n, err := cmd.Int()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			n, err = renewScript.Run(ctx, s.c, ls[i].keys, ls[i].id, ttl).Int()
		}
		if err != nil {
			return lost, fmt.Errorf("shaping: redis renew: %w", err)
		}
		if n == 0 {
			lost = append(lost, ls[i])
		}
	}
	return lost, nil
}

// release gives the leases back in one round trip and wakes waiters
// everywhere.
func (s *sharedCaps) release(ctx context.Context, ls []lease) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	if len(ls) == 1 {
		if err := releaseScript.Run(ctx, s.c, ls[0].keys, ls[0].releaseArgs(s.channel)...).Err(); err != nil {
			return fmt.Errorf("shaping: redis release: %w", err)
		}
		return nil
	}
	pipe := s.c.Pipeline()
	cmds := make([]*redis.Cmd, len(ls))
	for i, l := range ls {
		cmds[i] = releaseScript.EvalSha(ctx, pipe, l.keys, l.releaseArgs(s.channel)...)
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range cmds {
		err := cmd.Err()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// The script cache was flushed: once more, loading it.
			err = releaseScript.Run(ctx, s.c, ls[i].keys, ls[i].releaseArgs(s.channel)...).Err()
		}
		if err != nil {
			return fmt.Errorf("shaping: redis release: %w", err)
		}
	}
	return nil
}

// reassertScript: ARGV lease, ttl ms, tokens, then per cap 1 when it has
// a token limit. Puts the lease in every cap whatever the limits say.
var reassertScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease, ttl, tokens = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 1, #KEYS / 2 do
  local z, h = KEYS[2*i-1], KEYS[2*i]
  redis.call('ZADD', z, now + ttl, lease)
  redis.call('PEXPIRE', z, ttl * 2)
  if tonumber(ARGV[3+i]) > 0 and redis.call('HEXISTS', h, lease) == 0 then
    redis.call('HSET', h, lease, tokens)
    redis.call('HINCRBY', h, '_total', tokens)
    redis.call('PEXPIRE', h, ttl * 2)
  end
end
return 0
`)

// newLease names the keys of caps for a lease id.
func (s *sharedCaps) newLease(id string, caps []sharedCap, tokens int64) lease {
	l := lease{id: id, tokens: tokens}
	reserved := false
	for _, c := range caps {
		z, h := s.capKeys(c.level, c.name)
		l.keys = append(l.keys, z, h)
		l.caps = append(l.caps, c.maxReqs, c.maxToks)
		reserved = reserved || c.wakeReqs != c.maxReqs || c.wakeToks != c.maxToks
	}
	if reserved {
		l.wake = make([]any, 0, len(l.caps))
		for _, c := range caps {
			l.wake = append(l.wake, c.wakeReqs, c.wakeToks)
		}
	}
	return l
}

// reassert puts a lease that Redis lost (it restarted, or the lease
// expired while renewals could not reach it) back, whatever the caps say:
// its request is still running and must be counted.
func (s *sharedCaps) reassert(ctx context.Context, l lease) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	args := []any{l.id, s.cfg.LeaseTTL.Milliseconds(), l.tokens}
	for i := 1; i < len(l.caps); i += 2 {
		args = append(args, l.caps[i]) // the cap's token limit
	}
	if err := reassertScript.Run(ctx, s.c, l.keys, args...).Err(); err != nil {
		return fmt.Errorf("shaping: redis reassert: %w", err)
	}
	return nil
}

func (l lease) releaseArgs(channel string) []any {
	if l.wake != nil {
		return append([]any{l.id, channel}, l.wake...)
	}
	return append([]any{l.id, channel}, l.caps...)
}

func (s *sharedCaps) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	return s.c.Ping(ctx).Err()
}

// leaseID makes a lease's name: the replica, then a counter.
func (s *sharedCaps) leaseID(n uint64) string {
	return s.replica + ":" + strconv.FormatUint(n, 36)
}
