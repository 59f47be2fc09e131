// Package share passes what each gateway replica learnt of its placements
// (which backend a prompt's prefix, or a session, went to) to the other
// replicas, through the Redis they already share, off the request path.
//
// A replica that places a prompt offers a Record: a fixed-size value put
// on a bounded queue without blocking or allocating (a full queue drops
// it and counts). A goroutine sends the queue in batches (one every
// Interval at most, or sooner when MaxBatchRecords wait) on a Redis
// pub/sub channel; another receives the other replicas' batches and
// hands each record to the gateway, which teaches its own index. Nothing
// here is on the request path: a replica that loses Redis keeps routing
// on what it learnt itself, reconnects with backoff, and logs each change
// of state once.
//
// Pub/sub, not a stream: what is shared is a hint whose worth fades with
// the engines' caches, so a batch lost while a replica is away costs a
// few cold prefills, while a stream would keep a backlog in Redis and
// replay placements whose blocks may long be evicted.
package share

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"
)

// rediser is the part of go-redis the bus uses, so a client, a ring or a
// cluster client all fit.
type rediser interface {
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
	Ping(ctx context.Context) *redis.StatusCmd
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Config shapes a Bus. The zero value, after Defaults, works on channel
// "infergate:placements".
type Config struct {
	// Channel is the pub/sub channel; every replica of a deployment
	// uses the same one. Default "infergate:placements".
	Channel string
	// Interval is the longest a record waits to be sent. Default 20ms.
	Interval time.Duration
	// Queue bounds the records waiting to be sent (each 320 bytes,
	// allocated once); past it a record is dropped and counted. Default
	// 4096.
	Queue int
	// OpTimeout bounds one publish. Default 250ms.
	OpTimeout time.Duration
	// Heartbeat is how long the subscription may stay silent before it
	// is pinged; with no answer for another Heartbeat it counts as down
	// and is made anew (a connection that went silent, not closed, shows
	// within two). Default 5s.
	Heartbeat time.Duration
}

// Defaults fills the zero fields.
func (c *Config) Defaults() {
	if c.Channel == "" {
		c.Channel = "infergate:placements"
	}
	if c.Interval <= 0 {
		c.Interval = 20 * time.Millisecond
	}
	if c.Queue <= 0 {
		c.Queue = 4096
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = 250 * time.Millisecond
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 5 * time.Second
	}
}

// Backoff bounds the wait between two tries of a Redis that failed.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// ApplyFunc teaches the gateway one record another replica sent; it
// reports false when the record names a pool or backend it lacks (a
// replica of another configuration). Called from the bus's goroutine.
type ApplyFunc func(r *Record) bool

// Stats are a bus's counts since it started.
type Stats struct {
	// Up: the last call to Redis worked.
	Up bool
	// Replica is this replica's id in the batches it sends.
	Replica uint64
	// Records offered and sent; dropped at a full queue; lost to a
	// Redis that failed (their batch was not sent).
	Published, Dropped, Lost int64
	// Records received from other replicas, and of those the ones
	// applied and the ones naming a pool or backend unknown here.
	Received, Applied, Ignored int64
	// Batches sent, batches refused as malformed, failed calls to Redis.
	Batches, Invalid, Errors int64
}

// Bus shares records between replicas. Offer is safe for concurrent use;
// Close stops its goroutines and waits for them.
type Bus struct {
	c rediser
	// ps is the subscription, replaced when it goes silent; psMu guards
	// it against Close.
	psMu     sync.Mutex
	ps       *redis.PubSub
	psClosed bool
	cfg      Config
	apply    ApplyFunc
	log      *slog.Logger
	replica  uint64

	q    chan Record
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup

	// Redis is up when the last publish (or probe) and the
	// subscription both worked; mu guards the two halves.
	mu                          sync.Mutex
	pubOK, subOK                bool
	state                       atomic.Int32 // stateUnknown, stateUp, stateDown
	published, dropped, lost    atomic.Int64
	received, applied, ignored  atomic.Int64
	batches, invalid, errs      atomic.Int64
	lastInvalidLog, invalidLogN int64 // the receiver's own
}

const (
	stateUnknown = iota
	stateUp
	stateDown
)

// New starts a bus on c (cfg after Defaults). apply receives the other
// replicas' records; log each change of Redis's state (nil: discarded).
func New(c rediser, cfg Config, apply ApplyFunc, log *slog.Logger) *Bus {
	cfg.Defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	b := &Bus{c: c, cfg: cfg, apply: apply, log: log, replica: binary.LittleEndian.Uint64(id[:]) | 1,
		q: make(chan Record, cfg.Queue), stop: make(chan struct{}), pubOK: true}
	// go-redis subscribes in the background and again after each
	// reconnect; a failure shows in the first Receive.
	b.ps = c.Subscribe(context.Background(), cfg.Channel)
	b.wg.Add(2)
	go b.publisher()
	go b.subscriber()
	return b
}

// PoolID names a pool in records: its name and block size, so replicas
// that cut prompts differently do not fill each other's index with
// hashes that never match.
func PoolID(name string, blockBytes int) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(name)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(blockBytes))
	_, _ = d.Write(n[:])
	return d.Sum64()
}

// Offer queues r to be sent, copying it; it never blocks or allocates.
// It reports false when the queue was full (r is dropped and counted).
func (b *Bus) Offer(r *Record) bool {
	select {
	case b.q <- *r:
		return true
	default:
		b.dropped.Add(1)
		return false
	}
}

// Replica is this replica's id.
func (b *Bus) Replica() uint64 { return b.replica }

// Stats returns the counts so far.
func (b *Bus) Stats() Stats {
	return Stats{Up: b.state.Load() == stateUp, Replica: b.replica,
		Published: b.published.Load(), Dropped: b.dropped.Load(), Lost: b.lost.Load(),
		Received: b.received.Load(), Applied: b.applied.Load(), Ignored: b.ignored.Load(),
		Batches: b.batches.Load(), Invalid: b.invalid.Load(), Errors: b.errs.Load()}
}

// Close sends what is queued (while Redis answers), stops the goroutines
// and waits for them, and closes the client when it can be closed. Safe
// to call twice.
func (b *Bus) Close() error {
	first := false
	b.once.Do(func() {
		first = true
		close(b.stop)
		b.psMu.Lock()
		b.psClosed = true
		ps := b.ps
		b.psMu.Unlock()
		_ = ps.Close() // ends a Receive under way
	})
	b.wg.Wait()
	if c, ok := b.c.(interface{ Close() error }); ok && first {
		return c.Close()
	}
	return nil
}

// health notes how a call to Redis went, by the publisher (pub) or the
// subscriber; a change of the whole (up: both halves work) is logged
// once, outside the lock.
func (b *Bus) health(pub, ok bool, err error) {
	if !ok {
		b.errs.Add(1)
	}
	b.mu.Lock()
	if pub {
		b.pubOK = ok
	} else {
		b.subOK = ok
	}
	now := int32(stateDown)
	if b.pubOK && b.subOK {
		now = stateUp
	}
	was := b.state.Swap(now)
	b.mu.Unlock()
	switch {
	case was == now:
	case now == stateDown:
		b.log.Warn("share: redis down; this replica routes on what it learns itself until it answers", "err", err, "channel", b.cfg.Channel)
	case was == stateDown:
		b.log.Info("share: redis answers again; placements are shared", "channel", b.cfg.Channel)
	default:
		b.log.Debug("share: sharing placements", "channel", b.cfg.Channel)
	}
}

// sleep waits d unless the bus stops first; it reports false then.
func (b *Bus) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.stop:
		return false
	case <-t.C:
		return true
	}
}

// publisher sends the queue in batches: the first record waits at most
// Interval for company, a full batch goes at once. After a failure it
// sends nothing (the records are lost, counted) until its backoff ends,
// then tries again with the next batch, or with a PING when no record
// comes. At Close it sends what is still queued, until the queue is empty
// or a send fails.
func (b *Bus) publisher() {
	defer b.wg.Done()
	batch := make([]Record, 0, MaxBatchRecords)
	buf := make([]byte, 0, 64<<10)
	var retryAt time.Time
	backoff := minBackoff
	failed := func(err error) {
		b.health(true, false, err)
		retryAt = time.Now().Add(backoff)
		backoff = min(2*backoff, maxBackoff)
	}
	worked := func() {
		backoff, retryAt = minBackoff, time.Time{}
		b.health(true, true, nil)
	}
	send := func() bool {
		if time.Now().Before(retryAt) {
			b.lost.Add(int64(len(batch)))
			return false
		}
		buf = Append(buf[:0], b.replica, batch)
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.OpTimeout)
		err := b.c.Publish(ctx, b.cfg.Channel, buf).Err()
		cancel()
		if err != nil {
			b.lost.Add(int64(len(batch)))
			failed(err)
			return false
		}
		b.published.Add(int64(len(batch)))
		b.batches.Add(1)
		worked()
		return true
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	probe := time.NewTimer(time.Hour)
	defer probe.Stop()
	for {
		probe.Stop()
		if !retryAt.IsZero() {
			probe.Reset(time.Until(retryAt))
		}
		select {
		case r := <-b.q:
			batch = append(batch[:0], r)
		case <-probe.C:
			ctx, cancel := context.WithTimeout(context.Background(), b.cfg.OpTimeout)
			err := b.c.Ping(ctx).Err()
			cancel()
			if err != nil {
				failed(err)
			} else {
				worked()
			}
			continue
		case <-b.stop:
			for {
				batch = batch[:0]
			drain:
				for len(batch) < MaxBatchRecords {
					select {
					case r := <-b.q:
						batch = append(batch, r)
					default:
						break drain
					}
				}
				if len(batch) == 0 || !send() {
					return
				}
			}
		}
		timer.Reset(b.cfg.Interval)
	fill:
		for len(batch) < MaxBatchRecords {
			select {
			case r := <-b.q:
				batch = append(batch, r)
			case <-timer.C:
				break fill
			case <-b.stop:
				break fill // sent now; the next turn sends the rest and returns
			}
		}
		timer.Stop()
		send()
	}
}

// subscriber receives the other replicas' batches and applies them.
// go-redis reconnects and subscribes again at the Receive after a failure;
// the loop waits between tries, longer each time. A subscription silent
// for a Heartbeat is pinged, and one that does not answer the ping within
// another is closed and made anew (a partition closes nothing).
func (b *Bus) subscriber() {
	defer b.wg.Done()
	ctx := context.Background()
	recs := make([]Record, 0, MaxBatchRecords)
	var buf []byte
	backoff := minBackoff
	pinged := false
	for {
		b.psMu.Lock()
		ps := b.ps
		b.psMu.Unlock()
		msg, err := ps.ReceiveTimeout(ctx, b.cfg.Heartbeat)
		select {
		case <-b.stop:
			return
		default:
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if !pinged {
					// The answer (a Pong) or the failure comes at the
					// next Receive.
					if err = ps.Ping(ctx); err == nil {
						pinged = true
						continue
					}
				} else {
					err = errSilent
					b.resubscribe()
				}
			}
			pinged = false
			b.health(false, false, err)
			if !b.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			backoff = minBackoff
			b.health(false, true, nil)
		case *redis.Message:
			if len(m.Payload) > MaxBatchBytes {
				b.refused(errSize)
				continue
			}
			buf = append(buf[:0], m.Payload...)
			recs = b.receive(buf, recs)
		}
	}
}

var errSilent = errors.New("share: the subscription answered no PING")

// resubscribe replaces a subscription that went silent with a new one on
// a new connection.
func (b *Bus) resubscribe() {
	ps := b.c.Subscribe(context.Background(), b.cfg.Channel)
	b.psMu.Lock()
	if b.psClosed {
		b.psMu.Unlock()
		_ = ps.Close()
		return
	}
	old := b.ps
	b.ps = ps
	b.psMu.Unlock()
	_ = old.Close()
}

// receive applies one batch, unless it is this replica's own or malformed.
func (b *Bus) receive(p []byte, recs []Record) []Record {
	replica, recs, err := Parse(p, recs)
	if err != nil {
		b.refused(err)
		return recs
	}
	if replica == b.replica {
		return recs
	}
	b.received.Add(int64(len(recs)))
	for i := range recs {
		if b.apply(&recs[i]) {
			b.applied.Add(1)
		} else {
			b.ignored.Add(1)
		}
	}
	return recs
}

// refused counts a malformed batch; the log says so at most once a
// minute, with how many since.
func (b *Bus) refused(err error) {
	n := b.invalid.Add(1)
	if now := time.Now().Unix(); now-b.lastInvalidLog >= 60 {
		b.log.Warn("share: malformed batches on the channel refused", "err", err, "batches", n-b.invalidLogN, "channel", b.cfg.Channel)
		b.lastInvalidLog, b.invalidLogN = now, n
	}
}
