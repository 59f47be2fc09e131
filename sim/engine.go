package sim

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// seq is one request in the engine. The engine goroutine owns every field
// but the atomics, which the request's handler reads.
type seq struct {
	prompt int // prompt tokens
	target int // output tokens to generate

	// priority orders the queue under the priority policy: lower first,
	// ties by arrival (vLLM's request priority; 0 by default).
	priority int

	generated int // tokens produced so far
	need      int // tokens to prefill: prompt, or prompt+generated after a preemption
	prefilled int // of need
	blocks    int // KV blocks held privately (not in the prefix cache)
	running   bool

	// The prefix cache: the hashes of the prompt's full blocks, the
	// cached blocks this sequence holds a reference on (its prompt's
	// first ones), and the prompt tokens found cached when it was last
	// admitted.
	hashes     []uint64
	shared     []*cachedBlock
	registered bool
	cached     atomic.Int32

	arrival, scheduled, firstToken, lastToken time.Time
	// charge is its place under the admission limits: its prompt stops
	// counting as queued at its first token (nil in benchmarks).
	charge *admitted

	emitted atomic.Int32 // tokens the handler may send
	// The engine's own split, for per-request metrics: scheduler queue,
	// scheduling → first token, first → latest token (nanoseconds).
	queueNs, prefillNs, decodeNs atomic.Int64
	done                         atomic.Bool   // generation finished or aborted
	aborted                      atomic.Bool   // the client went away; set by the handler
	notify                       chan struct{} // capacity 1: wakes the handler
	// kick wakes the engine mid-step on an abort (set by add; nil in
	// tests that drive the engine by hand).
	kick chan struct{}
}

func newSeq(prompt, target int) *seq {
	return &seq{prompt: prompt, target: target, need: prompt, notify: make(chan struct{}, 1)}
}

func (s *seq) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// abort tells the engine the client is gone; the engine frees the sequence
// at its next step.
func (s *seq) abort() {
	s.aborted.Store(true)
	s.wake()
	if s.kick != nil {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// before reports whether s goes ahead of o in a priority queue: lower
// priority value first, then earlier arrival (vLLM's (priority,
// arrival_time) ordering).
func (s *seq) before(o *seq) bool {
	if s.priority != o.priority {
		return s.priority < o.priority
	}
	return s.arrival.Before(o.arrival)
}

// engineStats is a snapshot for metrics, written by the engine.
type engineStats struct {
	running, waiting int
	kvUsage          float64 // fraction of KV blocks in use
}

// engine is the continuous-batching scheduler: one goroutine, one loop,
// one sleep per step.
type engine struct {
	cfg     EngineConfig
	speedup float64
	metrics *metrics // may be nil in benchmarks
	// priority is vLLM's --scheduling-policy priority: the queue is
	// ordered by (priority, arrival) and the running sequence latest in
	// that order is preempted first; false is fcfs. Set before start.
	priority bool

	submit chan *seq
	// kick: a sequence was aborted; free it now rather than at the end
	// of the step (capacity 1).
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once

	// owned by the loop
	waiting     []*seq
	runningSeqs []*seq
	freeBlocks  int
	totalBlocks int
	cache       *prefixCache // nil without prefix caching
	// kv, when set, is sent the cache's events once per step (kvevents.go).
	kv        *kvPublisher
	kvPending []kvEvent
	// control runs a function on the loop (a cache reset).
	control chan func(*engine)

	// busy is the scheduler's own compute time, in ns, for overhead checks.
	busy  atomic.Int64
	steps atomic.Int64
}

func newEngine(cfg EngineConfig, speedup float64, m *metrics) *engine {
	total := cfg.KVCacheTokens / cfg.BlockSize
	e := &engine{
		cfg: cfg, speedup: speedup, metrics: m,
		submit: make(chan *seq, 1024), control: make(chan func(*engine)), kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		freeBlocks: total, totalBlocks: total,
	}
	if cfg.PrefixCaching {
		e.cache = newPrefixCache()
	}
	return e
}

// takeBlocks takes n blocks from the free ones, evicting unused cached
// blocks when too few are free; false (and nothing taken) when even
// eviction cannot make room.
func (e *engine) takeBlocks(n int) bool {
	if e.freeBlocks < n && (e.cache == nil || e.freeBlocks+e.cache.idle < n) {
		return false
	}
	for e.freeBlocks < n {
		if h, ok := e.cache.evict(); ok && e.kv != nil {
			e.kvRemoved(h)
		}
		e.freeBlocks++
	}
	e.freeBlocks -= n
	return true
}

// releaseShared drops s's references on cached blocks.
func (e *engine) releaseShared(s *seq) {
	if e.cache != nil {
		e.cache.release(s.shared)
	}
	clear(s.shared)
	s.shared = s.shared[:0]
}

// register puts the full prompt blocks s computed into the prefix cache,
// once its prefill is done. A block another sequence cached meanwhile is
// shared instead, and s's own copy freed.
func (e *engine) register(s *seq) {
	s.registered = true
	if e.cache == nil {
		return
	}
	full := min(len(s.hashes), s.prompt/e.cfg.BlockSize)
	for i := len(s.shared); i < full && s.blocks > 0; i++ {
		h := s.hashes[i]
		if _, ok := e.cache.blocks[h]; ok {
			s.shared = append(s.shared, e.cache.ref(h))
			s.blocks--
			e.freeBlocks++
			continue
		}
		b := &cachedBlock{hash: h, refs: 1}
		e.cache.blocks[h] = b
		if e.kv != nil {
			e.kvStored(s.hashes, i)
		}
		s.shared = append(s.shared, b)
		s.blocks--
	}
}

// fits reports whether a sequence of this size can ever be scheduled.
func (e *engine) fits(prompt, target int) bool {
	return blocksFor(prompt+target, e.cfg.BlockSize) <= e.totalBlocks
}

func blocksFor(tokens, bs int) int { return (tokens + bs - 1) / bs }

func (e *engine) start() { go e.loop() }

// Add queues a sequence. It returns false when the engine has stopped.
func (e *engine) add(s *seq) bool {
	s.arrival = time.Now()
	s.kick = e.kick
	select {
	case e.submit <- s:
		return true
	case <-e.stop:
		return false
	}
}

// close stops the loop and waits for it; queued and running sequences end
// as aborted. Safe to call twice.
func (e *engine) close() {
	e.once.Do(func() { close(e.stop) })
	<-e.done
}

// stepCost is the simulated duration of one forward step.
func (e *engine) stepCost(decodes, kvTokens, prefillTokens int) time.Duration {
	c := &e.cfg
	decodeMs := (c.DecodePerSeqMs*float64(decodes) + c.DecodePerKVTokenUs*float64(kvTokens)/1000) / e.speedup
	ms := c.DecodeBaseMs/e.speedup + decodeMs + float64(prefillTokens)/c.PrefillTokensPerS*1000
	return time.Duration(ms * float64(time.Millisecond))
}

func (e *engine) loop() {
	defer close(e.done)
	defer e.abortAll()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var touched []*seq
	var stepEnd time.Time
	for {
		if len(e.runningSeqs) == 0 && len(e.waiting) == 0 {
			select {
			case s := <-e.submit:
				e.enqueue(s)
			case <-e.kick:
				continue // an abort of a sequence that is already gone
			case f := <-e.control:
				f(e)
				e.kvFlush()
				continue
			case <-e.stop:
				return
			}
			stepEnd = time.Time{}
		}
		t0 := time.Now()
		e.drainSubmit()
		e.dropAborted()
		plan := e.schedule()
		// The gauges show the step being run too: a long prefill step
		// is running, and its blocks are taken, while it runs.
		if e.metrics != nil {
			e.metrics.step(engineStats{running: len(e.runningSeqs), waiting: len(e.waiting), kvUsage: e.kvUsage()})
		}
		dur := e.stepCost(plan.decodes, plan.kvTokens, plan.prefillTokens)
		// Steps are laid end to end on the clock, so time spent scheduling
		// or oversleeping does not accumulate.
		load := min(1, float64(plan.decodes+plan.prefillTokens)/float64(e.cfg.SaturationBatch))
		if stepEnd.IsZero() || t0.Sub(stepEnd) > dur {
			if !stepEnd.IsZero() && e.metrics != nil {
				// Woken later than a whole step with work waiting since the
				// last one ended: the host was starved, not the simulated
				// GPU, which would have gone on stepping. The gap reads as
				// busy, so a busy machine does not show a compute-bound
				// engine as one with headroom.
				e.metrics.util.add(stepEnd, t0.Sub(stepEnd), load)
			}
			stepEnd = t0
		}
		stepStart := stepEnd
		stepEnd = stepEnd.Add(dur)
		if e.metrics != nil {
			e.metrics.util.add(stepStart, dur, load)
		}
		e.busy.Add(int64(time.Since(t0)))
		// Spin the end of the wait only for a small batch: with many
		// handlers to run, a yielding spin returns late.
		if !e.waitStep(stepEnd, timer) {
			return
		}
		t1 := time.Now()
		touched = e.finishStep(plan, t1, touched[:0])
		e.steps.Add(1)
		// Gauges first: a client that sees its last token must see the
		// state after the step that produced it.
		if e.metrics != nil {
			e.metrics.step(engineStats{running: len(e.runningSeqs), waiting: len(e.waiting), kvUsage: e.kvUsage()})
		}
		for i, s := range touched {
			s.wake()
			touched[i] = nil
		}
		e.kvFlush()
		e.busy.Add(int64(time.Since(t1)))
	}
}

// kvUsage is the share of blocks in use, as vLLM reports it: cached
// blocks no sequence uses count as free.
func (e *engine) kvUsage() float64 {
	free := e.freeBlocks
	if e.cache != nil {
		free += e.cache.idle
	}
	return float64(e.totalBlocks-free) / float64(e.totalBlocks)
}

// waitStep sleeps until the step in flight ends at t, freeing aborted
// sequences as soon as their abort arrives: vLLM frees an aborted
// request's blocks between steps, which on a GPU are milliseconds apart,
// while a simulated step can be a long prefill. The step's work goes on;
// an aborted sequence in it just yields nothing. False when stopping.
func (e *engine) waitStep(t time.Time, timer *time.Timer) bool {
	for {
		spin := len(e.runningSeqs)+len(e.waiting) <= engineSpinBatch
		stopped, kicked := waitUntilKick(t, timer, e.stop, e.kick, spin)
		if stopped {
			return false
		}
		if !kicked {
			return true
		}
		e.dropAborted()
		if e.metrics != nil {
			e.metrics.step(engineStats{running: len(e.runningSeqs), waiting: len(e.waiting), kvUsage: e.kvUsage()})
		}
	}
}

func (e *engine) drainSubmit() {
	for {
		select {
		case s := <-e.submit:
			e.enqueue(s)
		default:
			return
		}
	}
}

// enqueue adds a new arrival to the waiting queue: at the back under
// fcfs, in (priority, arrival) order under the priority policy.
func (e *engine) enqueue(s *seq) {
	if !e.priority {
		e.waiting = append(e.waiting, s)
		return
	}
	e.insertOrdered(s)
}

// insertOrdered puts s in the waiting queue after every sequence that
// goes before it.
func (e *engine) insertOrdered(s *seq) {
	i := sort.Search(len(e.waiting), func(i int) bool { return s.before(e.waiting[i]) })
	e.waiting = slices.Insert(e.waiting, i, s)
}

// victim is the index of the running sequence to preempt: the newest
// under fcfs (vLLM's running.pop()), the one latest in (priority,
// arrival) order under the priority policy (vLLM's max(running, key=
// (priority, arrival_time))). running must not be empty.
func (e *engine) victim() int {
	v := len(e.runningSeqs) - 1
	if !e.priority {
		return v
	}
	for i, s := range e.runningSeqs {
		if e.runningSeqs[v].before(s) {
			v = i
		}
	}
	return v
}

// dropAborted frees sequences whose client went away.
func (e *engine) dropAborted() {
	keep := e.runningSeqs[:0]
	for _, s := range e.runningSeqs {
		if s.aborted.Load() {
			e.release(s)
			continue
		}
		keep = append(keep, s)
	}
	clear(e.runningSeqs[len(keep):])
	e.runningSeqs = keep
	w := e.waiting[:0]
	for _, s := range e.waiting {
		if s.aborted.Load() {
			s.done.Store(true)
			continue
		}
		w = append(w, s)
	}
	clear(e.waiting[len(w):])
	e.waiting = w
}

func (e *engine) release(s *seq) {
	e.freeBlocks += s.blocks
	s.blocks = 0
	e.releaseShared(s)
	s.running = false
	s.done.Store(true)
}

// stepPlan is what one step computes.
type stepPlan struct {
	decodes       int
	kvTokens      int
	prefillTokens int
	// prefill[i] tokens of prefillSeqs[i] are processed this step.
	prefillSeqs []*seq
	prefill     []int
}

// schedule picks this step's work: one token for every decoding sequence,
// then prefill chunks within the token budget, admitting waiting sequences
// while the batch and the KV cache have room. A decoding sequence that
// needs a block when none is free preempts a running sequence (victim).
func (e *engine) schedule() stepPlan {
	var p stepPlan
	bs := e.cfg.BlockSize
	budget := e.cfg.MaxBatchedTokens
	preempted := false
	if budget == 0 {
		budget = int(^uint(0) >> 1)
	}
	// Decodes, oldest first; preemption takes the victim (victim()).
	for i := 0; i < len(e.runningSeqs); i++ {
		s := e.runningSeqs[i]
		if s.prefilled < s.need {
			continue
		}
		for blocksFor(s.prompt+s.generated+1, bs) > s.blocks+len(s.shared) {
			if e.takeBlocks(1) {
				s.blocks++
				continue
			}
			vi := e.victim()
			victim := e.runningSeqs[vi]
			if vi < i {
				// Already given its decode this step (vLLM takes it back
				// out of the step's schedule): undo that.
				if victim.prefilled >= victim.need {
					p.decodes--
					p.kvTokens -= victim.prompt + victim.generated
					budget++
				}
				i--
			}
			e.preempt(victim)
			preempted = true
			if victim == s {
				break
			}
		}
		if !s.running {
			i-- // s preempted itself; the next one now sits at i
			continue
		}
		p.decodes++
		p.kvTokens += s.prompt + s.generated
		budget--
	}
	// Continue partial prefills, then admit from the queue.
	for _, s := range e.runningSeqs {
		if budget <= 0 {
			break
		}
		if left := s.need - s.prefilled; left > 0 {
			n := min(left, budget)
			p.prefillSeqs = append(p.prefillSeqs, s)
			p.prefill = append(p.prefill, n)
			p.prefillTokens += n
			budget -= n
		}
	}
	// After a preemption nothing is admitted this step, or the victim
	// would come straight back and thrash.
	for !preempted && len(e.waiting) > 0 && len(e.runningSeqs) < e.cfg.MaxNumSeqs && budget > 0 {
		s := e.waiting[0]
		// The cached blocks the prompt starts with are shared, not
		// computed; at least one token is, to make the first output.
		hit, idleHit := 0, 0
		if e.cache != nil {
			hit, idleHit = e.cache.match(s.hashes)
			if hit*bs >= s.need {
				hit = (s.need - 1) / bs
				_, idleHit = e.cache.match(s.hashes[:hit])
			}
		}
		nb := blocksFor(s.need+1, bs) - hit
		if nb > e.freeBlocks && (e.cache == nil || nb > e.freeBlocks+e.cache.idle-idleHit) {
			break // head-of-line: the oldest waits for memory
		}
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		for _, h := range s.hashes[:hit] {
			s.shared = append(s.shared, e.cache.ref(h))
		}
		e.takeBlocks(nb)
		s.blocks = nb
		s.running = true
		s.prefilled = hit * bs
		s.cached.Store(int32(hit * bs))
		if e.cache != nil && e.metrics != nil {
			e.metrics.prefixQueries.Add(float64(s.need))
			e.metrics.prefixHits.Add(float64(hit * bs))
		}
		if s.scheduled.IsZero() {
			s.scheduled = time.Now()
		}
		e.runningSeqs = append(e.runningSeqs, s)
		n := min(s.need-s.prefilled, budget)
		p.prefillSeqs = append(p.prefillSeqs, s)
		p.prefill = append(p.prefill, n)
		p.prefillTokens += n
		budget -= n
	}
	return p
}

// preempt evicts s (recompute mode): its blocks are freed and it goes
// back to the queue (its front under fcfs, its place by priority and
// arrival otherwise), to prefill its prompt and output again.
func (e *engine) preempt(s *seq) {
	for i := len(e.runningSeqs) - 1; i >= 0; i-- {
		if e.runningSeqs[i] == s {
			copy(e.runningSeqs[i:], e.runningSeqs[i+1:])
			e.runningSeqs[len(e.runningSeqs)-1] = nil
			e.runningSeqs = e.runningSeqs[:len(e.runningSeqs)-1]
			break
		}
	}
	e.freeBlocks += s.blocks
	s.blocks = 0
	e.releaseShared(s)
	s.running = false
	s.need = s.prompt + s.generated
	s.prefilled = 0
	if e.priority {
		// vLLM's priority queue takes it back by its (priority, arrival).
		e.insertOrdered(s)
	} else {
		e.waiting = slices.Insert(e.waiting, 0, s)
	}
	if e.metrics != nil {
		e.metrics.preemptions.Inc()
	}
}

// finishStep applies a completed step at time now: decoding sequences and
// sequences whose prefill completed each gain a token; finished ones leave
// the batch. It returns the sequences whose handlers must be woken.
func (e *engine) finishStep(p stepPlan, now time.Time, touched []*seq) []*seq {
	for i, s := range p.prefillSeqs {
		s.prefilled += p.prefill[i]
	}
	keep := e.runningSeqs[:0]
	for _, s := range e.runningSeqs {
		// A sequence whose prefill completed this step, and every decoding
		// one, produced one token; one still prefilling produced none.
		if s.prefilled >= s.need {
			if !s.registered {
				e.register(s)
			}
			first := s.generated == 0
			s.generated++
			if e.metrics != nil {
				if first {
					e.metrics.ttft.Observe(now.Sub(s.arrival).Seconds())
					e.metrics.queue.Observe(s.scheduled.Sub(s.arrival).Seconds())
				} else {
					e.metrics.itl.Observe(now.Sub(s.lastToken).Seconds())
				}
				e.metrics.generation.Inc()
			}
			if first {
				s.charge.prefilled()
				s.firstToken = now
				s.queueNs.Store(int64(s.scheduled.Sub(s.arrival)))
				s.prefillNs.Store(int64(now.Sub(s.scheduled)))
			}
			s.decodeNs.Store(int64(now.Sub(s.firstToken)))
			s.lastToken = now
			s.emitted.Store(int32(s.generated))
			touched = append(touched, s)
			if s.generated >= s.target {
				e.release(s)
				if e.metrics != nil {
					e.metrics.e2e.Observe(now.Sub(s.arrival).Seconds())
				}
				continue
			}
		}
		keep = append(keep, s)
	}
	clear(e.runningSeqs[len(keep):])
	e.runningSeqs = keep
	return touched
}

// abortAll ends every sequence when the engine stops.
func (e *engine) abortAll() {
	e.drainSubmit()
	for _, s := range e.runningSeqs {
		e.release(s)
		s.wake()
	}
	for _, s := range e.waiting {
		s.done.Store(true)
		s.wake()
	}
	e.runningSeqs, e.waiting = nil, nil
}
