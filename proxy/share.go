package proxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/infergate/infergate/affinity/share"
	"github.com/infergate/infergate/internal/adminapi"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Replicas that agree: each gateway sends where it placed prompts under
// selection prefix to the others through shaping.redis (package
// affinity/share), and learns theirs, off the request path.

// ShareConfig is what gateway replicas share of their routing: where
// each placed prompts under selection prefix, through the Redis of
// shaping.redis, so that a prefix one replica sent to a backend goes
// there from every replica. Sharing is on when shaping.redis.addr is set
// and a pool's selection is prefix; without Redis each replica's index is
// its own. A reload cannot change this section.
type ShareConfig struct {
	// Off keeps each replica's index its own even with shaping.redis
	// set. Default false.
	Off bool `yaml:"off"`
	// Interval is the longest a placement waits before it is sent to the
	// other replicas, in a batch with the others of that interval.
	// Default 20ms.
	Interval time.Duration `yaml:"interval"`
	// Queue bounds the placements waiting to be sent (320 bytes each,
	// allocated at start); past it a placement is not shared, and
	// counted (infergate.share.records, kind dropped). Default 4096.
	Queue int `yaml:"queue"`
}

func (c *ShareConfig) defaults() {
	setDefault(&c.Interval, 20*time.Millisecond)
	setDefault(&c.Queue, 4096)
}

func (c *ShareConfig) validate() error {
	switch {
	case c.Interval < time.Millisecond || c.Interval > 10*time.Second:
		return fmt.Errorf("share.interval: %v: want 1ms to 10s", c.Interval)
	case c.Queue < 16 || c.Queue > 1<<20:
		return fmt.Errorf("share.queue: %d: want 16 to 1048576", c.Queue)
	}
	return nil
}

// wantsShare reports whether cfg shares placements: Redis is set, the
// section is not off, and a pool routes by prefix.
func wantsShare(cfg *Config) bool {
	if cfg.Share.Off || cfg.Shaping.Redis.Addr == "" {
		return false
	}
	for _, p := range cfg.Pools {
		if p.Selection == PrefixPolicy {
			return true
		}
	}
	return false
}

// startShare starts the bus when cfg wants one and none runs (at start,
// or at the reload that adds the first prefix pool). Called at New and
// under reloadMu; pools read the bus through g.bus, so one built before
// it started shares from then on.
func (g *Gateway) startShare(cfg *Config) {
	if g.bus.Load() != nil || !wantsShare(cfg) {
		return
	}
	r := cfg.Shaping.Redis
	// Its own client: publishing never waits behind admission's calls.
	// No retries inside go-redis: a failed call is counted and retried
	// by the bus, with backoff.
	rc := redis.NewClient(&redis.Options{Addr: r.Addr, Username: r.Username, Password: os.Getenv(r.PasswordEnv), DB: r.DB,
		DialTimeout: r.OpTimeout, ReadTimeout: r.OpTimeout, WriteTimeout: r.OpTimeout, MaxRetries: -1, DialerRetries: 1, PoolSize: 2})
	bus := share.New(rc, share.Config{Channel: "{" + r.KeyPrefix + "}:placements", Interval: cfg.Share.Interval,
		Queue: cfg.Share.Queue, OpTimeout: r.OpTimeout}, g.learn, g.log.With("component", "share"))
	g.bus.Store(bus)
}

// closeShare stops the bus, after sending what is queued.
func (g *Gateway) closeShare() {
	if bus := g.bus.Load(); bus != nil {
		_ = bus.Close()
	}
}

// learn applies another replica's placement to the pool it names, the
// backend mapped from its URL's hash to its place here; false when this
// replica has no such pool (under selection prefix) or backend.
func (g *Gateway) learn(r *share.Record) bool {
	for _, p := range g.state.Load().pools {
		if p.prefix == nil || p.prefix.poolID != r.Pool {
			continue
		}
		for i, b := range p.backends {
			if b.nameHash == r.Backend {
				p.prefix.learn(r, b, i)
				return true
			}
		}
		return false
	}
	return false
}

// shareState is the bus's account for /admin/stats; nil when replicas
// do not share.
func (g *Gateway) shareState() *adminapi.ShareState {
	bus := g.bus.Load()
	if bus == nil {
		return nil
	}
	s := bus.Stats()
	return &adminapi.ShareState{Up: s.Up, Replica: strconv.FormatUint(s.Replica, 16),
		Published: s.Published, Dropped: s.Dropped, Lost: s.Lost, Received: s.Received, Applied: s.Applied,
		Ignored: s.Ignored, Batches: s.Batches, Invalid: s.Invalid, Errors: s.Errors}
}

// observeShare registers the bus's counts: records by what became of
// them, malformed batches refused, failed calls to Redis, and whether
// the last call worked.
func (g *Gateway) observeShare(meter metric.Meter) error {
	in := instruments{meter: meter}
	records := in.counter("infergate.share.records", "{record}", "Placements shared with the other gateway replicas through Redis: "+
		"published, dropped (queue full), lost (Redis down), received from the others, applied to this replica's index, ignored (a pool or backend unknown here).")
	invalid := in.counter("infergate.share.invalid_batches", "{batch}", "Malformed batches on the placements channel, refused whole.")
	errs := in.counter("infergate.share.errors", "{error}", "Failed calls to Redis while sharing placements.")
	up := in.gauge("infergate.share.redis_up", "", "1 when the last call to Redis of the placement sharing worked, else 0 (this replica routes on what it learns itself).")
	return in.register(func(_ context.Context, o metric.Observer) error {
		bus := g.bus.Load()
		if bus == nil {
			return nil
		}
		s := bus.Stats()
		for _, k := range []struct {
			kind string
			n    int64
		}{{"published", s.Published}, {"dropped", s.Dropped}, {"lost", s.Lost}, {"received", s.Received}, {"applied", s.Applied}, {"ignored", s.Ignored}} {
			o.ObserveInt64(records, k.n, metric.WithAttributes(attribute.String("kind", k.kind)))
		}
		o.ObserveInt64(invalid, s.Invalid)
		o.ObserveInt64(errs, s.Errors)
		v := int64(0)
		if s.Up {
			v = 1
		}
		o.ObserveInt64(up, v)
		return nil
	})
}

// errShareReload refuses a reload that changes the share section.
var errShareReload = errors.New("share: changing it needs a restart")
