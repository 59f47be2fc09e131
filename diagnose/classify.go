package diagnose

import (
	"math"
)

// Bottlenecks, as Report.Bottleneck names them.
const (
	Memory     = "memory"
	Batching   = "batching"
	Scheduling = "scheduling"
	Compute    = "compute"
	None       = "none"
)

// Thresholds of the classifier. They are deliberately coarse: each
// verdict rests on several signals agreeing, not on one figure being
// past a line.
const (
	kvFull      = 0.90 // KV-cache share at which a scheduler stops admitting
	kvRoom      = 0.70 // below this the cache has room for more sequences
	utilBusy    = 85.0 // GPU utilisation (%) that counts as pinned
	utilLow     = 60.0 // below this the GPU has headroom
	queueDepth  = 1.0  // mean requests waiting that count as a queue
	queueWaitS  = 0.05 // mean gateway queue wait (s) that counts as queueing
	sparseLoad  = 2.0  // mean running requests at or below which traffic is sparse
	batchHeld   = 0.8  // running/bound at which the batch is at its bound
	prefillHigh = 4.0  // prompt tokens per output token: prefill-bound
	decodeHigh  = 1.5  // at or below: decode-bound
)

// SweepPoint is one step of a concurrency sweep: what the load generator
// saw and what the metrics showed meanwhile.
type SweepPoint struct {
	Concurrency  float64 `json:"concurrency"`
	RequestsPerS Num     `json:"requests_per_s"`
	// OutputTokPerS is the throughput; PerRequestTokPerS the median
	// request's decode speed (1000 / TPOT ms).
	OutputTokPerS     Num       `json:"output_tokens_per_s"`
	PerRequestTokPerS Num       `json:"per_request_tokens_per_s"`
	TTFTp50           Num       `json:"ttft_p50_ms"`
	TTFTp90           Num       `json:"ttft_p90_ms"`
	Backends          []Backend `json:"backends,omitempty"`
	Gateway           *Gateway  `json:"gateway,omitempty"`
}

// Input is what a diagnosis reads: the backends' and the gateway's
// windows at the load that matters (with a sweep: its heaviest step),
// and the sweep when one ran.
type Input struct {
	Backends []Backend
	Gateway  *Gateway
	Sweep    []SweepPoint
}

// Finding is one signal the classifier looked at and what it found.
type Finding struct {
	Signal string `json:"signal"`
	Holds  bool   `json:"holds"`
	Detail string `json:"detail"`
}

// Knob is a change to try, in order of cost, with the figure to measure
// again after it and when not to turn it.
type Knob struct {
	Knob      string `json:"knob"`
	Action    string `json:"action"`
	Remeasure string `json:"remeasure"`
	Skip      string `json:"skip_if,omitempty"`
}

// Report is a diagnosis.
type Report struct {
	// Bottleneck is memory, batching, scheduling, compute or none.
	Bottleneck string `json:"bottleneck"`
	// Confidence is high, medium or low; Score the share of the
	// verdict's signals that held (of those measurable).
	Confidence string  `json:"confidence"`
	Score      float64 `json:"score"`
	Summary    string  `json:"summary"`
	// Evidence is every signal of the verdict, held or not; Against the
	// other verdicts' signals that held.
	Evidence []Finding `json:"evidence"`
	Against  []Finding `json:"against,omitempty"`
	// Load is prefill-bound, decode-bound, mixed or unknown.
	Load       string       `json:"load"`
	LoadDetail string       `json:"load_detail"`
	Knobs      []Knob       `json:"knobs"`
	Backends   []Backend    `json:"backends"`
	Gateway    *Gateway     `json:"gateway,omitempty"`
	Sweep      []SweepPoint `json:"sweep,omitempty"`
	// PerBackend is each backend's own verdict when there are several:
	// the overall one adds them up, and one sick replica can hide among
	// healthy ones.
	PerBackend []BackendVerdict `json:"per_backend,omitempty"`
	// CapAt is the concurrency at which a cap would hold the backends
	// where they still work well (memory, compute); 0 when none is
	// suggested.
	CapAt int `json:"cap_at,omitempty"`
	// NotSeen names the figures the backends did not report (llama.cpp's
	// KV-cache usage, GPU utilisation without --dcgm, ...): the verdict
	// is made without them.
	NotSeen []string `json:"not_seen,omitempty"`
}

// BackendVerdict is one backend's bottleneck, diagnosed on its own
// figures (the gateway's are left out: they belong to all of them).
type BackendVerdict struct {
	Name       string `json:"name"`
	Bottleneck string `json:"bottleneck"`
	Confidence string `json:"confidence"`
	Summary    string `json:"summary"`
}

// signals are the window's figures the rules read, across backends.
type signals struct {
	running, waiting, waitTrend, kvMean, kvMax, util, preempt float64
	maxRunning                                                float64
	maxFrom                                                   string
	prompt, output                                            float64
	gwQueued, gwWait, gwRejected, gwLimit                     float64
	// queueShare is the gateway's queue time over its total, -1 unknown.
	queueShare float64
	// speedKept is the heaviest sweep step's per-request speed over the
	// lightest's; gain its throughput over the lightest's; levels the
	// ratio of their concurrencies.
	speedKept, gain, levels float64
	preemptFrom             float64 // first sweep level with preemptions
	// slots is set when every backend's batch bound is llama.cpp's slot
	// count; slotCtx is the smallest slot context (tokens, NaN unknown)
	// and busyPerDecode the batch llama.cpp itself counted per decode.
	slots                  bool
	slotCtx, busyPerDecode float64
	// noKV, noUtil, noQueue and noBound say why the KV usage, the GPU
	// utilisation, the backends' queue and the batch bound are unknown,
	// for a finding that cannot be measured.
	noKV, noUtil, noQueue, noBound string
}

func add(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	}
	return a + b
}

func maxNaN(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	}
	return math.Max(a, b)
}

func gather(in Input) signals {
	nan := math.NaN()
	s := signals{running: nan, waiting: nan, waitTrend: nan, kvMean: nan, kvMax: nan, util: nan, preempt: nan,
		maxRunning: nan, prompt: nan, output: nan, gwQueued: nan, gwWait: nan, gwRejected: nan,
		speedKept: nan, gain: nan, levels: nan, preemptFrom: nan, queueShare: -1,
		slotCtx: nan, busyPerDecode: nan}
	allMax := len(in.Backends) > 0
	s.slots = len(in.Backends) > 0
	utilN := 0
	for _, b := range in.Backends {
		if b.MaxRunningFrom != "slots" {
			s.slots = false
		}
		if c := float64(b.SlotContext); b.SlotContext.Known() && (math.IsNaN(s.slotCtx) || c < s.slotCtx) {
			s.slotCtx = c
		}
		s.busyPerDecode = add(s.busyPerDecode, float64(b.BusyPerDecode))
		s.running = add(s.running, float64(b.Running.Mean))
		s.waiting = add(s.waiting, float64(b.Waiting.Mean))
		s.waitTrend = add(s.waitTrend, float64(b.Waiting.Trend))
		s.kvMean = maxNaN(s.kvMean, float64(b.KVUsage.Mean))
		s.kvMax = maxNaN(s.kvMax, float64(b.KVUsage.Max))
		if b.GPUUtil.Mean.Known() {
			s.util = add(s.util, float64(b.GPUUtil.Mean))
			utilN++
		}
		s.preempt = add(s.preempt, float64(b.PreemptionsPerS))
		s.prompt = add(s.prompt, float64(b.PromptTokPerS))
		s.output = add(s.output, float64(b.OutputTokPerS))
		if b.MaxRunning.Known() {
			s.maxRunning = add(s.maxRunning, float64(b.MaxRunning))
			if s.maxFrom == "" || b.MaxRunningFrom == "observed" {
				s.maxFrom = b.MaxRunningFrom
			}
		} else {
			allMax = false
		}
	}
	if !allMax {
		s.maxRunning, s.maxFrom = nan, ""
	}
	if utilN > 0 {
		s.util /= float64(utilN)
	}
	s.noKV, s.noUtil, s.noQueue, s.noBound = unseen(in.Backends)
	if g := in.Gateway; g != nil && g.Samples > 0 {
		s.gwQueued, s.gwWait, s.gwRejected, s.gwLimit = float64(g.Queued.Mean), float64(g.QueueWait), float64(g.RejectedPerS), g.Limit
		if a := g.Attribution; a != nil && a.Total > 0 {
			s.queueShare = a.Queue / a.Total
		}
	}
	if n := len(in.Sweep); n >= 2 {
		lo, hi := in.Sweep[0], in.Sweep[n-1]
		if lo.PerRequestTokPerS > 0 && hi.PerRequestTokPerS.Known() {
			s.speedKept = float64(hi.PerRequestTokPerS / lo.PerRequestTokPerS)
		}
		if lo.OutputTokPerS > 0 && hi.OutputTokPerS.Known() {
			s.gain = float64(hi.OutputTokPerS / lo.OutputTokPerS)
		}
		if lo.Concurrency > 0 {
			s.levels = hi.Concurrency / lo.Concurrency
		}
		for _, p := range in.Sweep {
			pre := math.NaN()
			for _, b := range p.Backends {
				pre = add(pre, float64(b.PreemptionsPerS))
			}
			if pre > 0 {
				s.preemptFrom = p.Concurrency
				break
			}
		}
	}
	return s
}

// Diagnose names the bottleneck of in: of all its backends together, and
// with several, of each on its own.
func Diagnose(in Input) Report {
	rep := diagnose(in)
	if len(in.Backends) > 1 {
		for _, b := range in.Backends {
			one := diagnose(Input{Backends: []Backend{b}})
			rep.PerBackend = append(rep.PerBackend, BackendVerdict{Name: b.Name, Bottleneck: one.Bottleneck, Confidence: one.Confidence, Summary: one.Summary})
		}
	}
	return rep
}

func diagnose(in Input) Report {
	s := gather(in)
	rep := Report{Backends: in.Backends, Gateway: in.Gateway, Sweep: in.Sweep, NotSeen: notSeen(in.Backends, in.Gateway)}
	if rep.Backends == nil {
		rep.Backends = []Backend{}
	}
	rep.Load, rep.LoadDetail = loadKind(s)

	backendQueue := s.waiting >= queueDepth
	gatewayQueue := s.gwQueued >= queueDepth || s.gwWait >= queueWaitS || s.gwRejected > 0
	heldAtBound := s.maxRunning > 0 && s.running >= batchHeld*s.maxRunning
	// Per-request speed at the sweep's heaviest step well below the
	// lightest's: each request pays for the others, so something is
	// saturated even where nothing queues yet.
	speedFalls := s.speedKept < 0.6
	sweepText := "per-request speed at the heaviest step is %.0f%% of the lightest's; throughput ×%.2f for ×%.0f concurrency"
	noSweep := "no sweep (diagnose --sweep) to compare loads"

	mem := &rule{name: Memory}
	mem.check("kv_cache_full", s.kvMax, s.kvMax >= kvFull, s.noKV, "KV cache at most %.0f%% full (mean %.0f%%)", pct(s.kvMax), pct(s.kvMean))
	mem.check("preemptions", s.preempt, s.preempt > 0, "no preemption count was read", "%.2f preemptions/s", s.preempt)
	mem.check("queue_behind_memory", s.waiting, backendQueue && s.kvMax >= kvFull, s.noQueue, "%.1f requests waiting at the backend", s.waiting)
	if !math.IsNaN(s.speedKept) {
		mem.check("speed_falls_with_load", s.speedKept, speedFalls && s.gain < 0.7*s.levels, noSweep, sweepText, pct(s.speedKept), s.gain, s.levels)
	}
	// A cache this full is the limit even before the first preemption
	// when each request's speed already falls with load: the next step
	// up evicts.
	mem.holds = s.kvMax >= kvFull && (s.preempt > 0 || (backendQueue && !heldAtBound) || speedFalls)

	cmp := &rule{name: Compute}
	cmp.check("gpu_pinned", s.util, s.util >= utilBusy, s.noUtil, "GPU utilisation %.0f%%", s.util)
	cmp.check("queue_full", nz(s.waiting)+nz(s.gwQueued), backendQueue || gatewayQueue, s.noQueue, "%.1f waiting at the backend, %.1f at the gateway", s.waiting, nz(s.gwQueued))
	if !math.IsNaN(s.speedKept) {
		cmp.check("speed_falls_with_load", s.speedKept, speedFalls, noSweep, sweepText, pct(s.speedKept), s.gain, s.levels)
	}
	cmp.check("kv_cache_room", s.kvMax, s.kvMax < kvFull, s.noKV, "KV cache at most %.0f%% full", pct(s.kvMax))
	// A pinned GPU is the limit when requests queue, or when a sweep
	// shows each request slowing as others join: nothing queues yet
	// because the batch still has room, but every added request slows
	// the rest.
	cmp.holds = s.util >= utilBusy && (backendQueue || gatewayQueue || speedFalls)

	bat := &rule{name: Batching}
	bat.check("backend_queue", s.waiting, backendQueue, s.noQueue, "%.1f requests waiting at the backend (trend %+.2f/s)", s.waiting, nz(s.waitTrend))
	if s.slots {
		bat.check("slots_all_busy", s.maxRunning, heldAtBound, s.noBound, "%.1f of llama.cpp's %.0f slots busy on average (requests_processing against total_slots)", s.running, s.maxRunning)
		if !math.IsNaN(s.busyPerDecode) {
			bat.check("batch_full_per_decode", s.busyPerDecode, s.busyPerDecode >= batchHeld*s.maxRunning, "",
				"llama.cpp decoded with %.2f busy slots per step of %.0f (n_busy_slots_per_decode over the window)", s.busyPerDecode, s.maxRunning)
		}
	} else {
		bat.check("batch_at_bound", s.maxRunning, heldAtBound, s.noBound, "running batch %.1f of a bound of %.0f (%s)", s.running, s.maxRunning, s.maxFrom)
	}
	bat.check("gpu_idle", s.util, s.util < utilLow, s.noUtil, "GPU utilisation %.0f%%", s.util)
	bat.check("kv_cache_room", s.kvMax, s.kvMax < kvRoom, s.noKV, "KV cache at most %.0f%% full", pct(s.kvMax))
	// llama.cpp's slots are its batch: every slot busy with requests
	// deferred is the slot count's limit, unless the GPU is known to be
	// pinned (compute, above).
	bat.holds = backendQueue && (s.util < utilLow || (math.IsNaN(s.util) && s.kvMax < kvRoom && heldAtBound) ||
		(s.slots && heldAtBound && !(s.util >= utilBusy)))

	sch := &rule{name: Scheduling}
	sch.check("gateway_queue", s.gwQueued, gatewayQueue, "no gateway figures (give --gateway)", "%.1f queued at the gateway, mean wait %.0f ms, %.2f rejected/s", s.gwQueued, nz(s.gwWait)*1000, nz(s.gwRejected))
	sch.check("backend_not_queueing", s.waiting, s.waiting < 0.5, s.noQueue, "%.1f waiting at the backend", s.waiting)
	room := s.kvMax < kvRoom || s.util < utilLow || ((s.maxFrom == "server" || s.maxFrom == "slots") && s.running < batchHeld*s.maxRunning)
	roomV := s.kvMax
	if math.IsNaN(roomV) {
		roomV = s.util
	}
	if math.IsNaN(roomV) && (s.maxFrom == "server" || s.maxFrom == "slots") {
		roomV = s.maxRunning
	}
	sch.check("backend_has_room", roomV, room, s.noKV+"; "+s.noUtil, "%s", roomText(s))
	if s.queueShare >= 0 {
		sch.check("time_in_gateway_queue", s.queueShare, s.queueShare >= 0.2, "", "%.0f%% of the gateway's recent request time was spent in its queue", pct(s.queueShare))
	}
	if s.gwLimit > 0 {
		sch.check("gateway_cap", s.gwLimit, s.gwLimit <= nz(s.running)+1, "", "the gateway's cap is %.0f requests", s.gwLimit)
	}
	sch.holds = gatewayQueue && s.waiting < 0.5 && room

	rules := []*rule{mem, cmp, bat, sch}
	var pick *rule
	for _, r := range rules {
		if r.holds {
			pick = r
			break
		}
	}
	if pick == nil && (backendQueue || gatewayQueue) {
		// Queues without a clear cause: the likelier, with low
		// confidence. Compute only on a sign that the hardware is loaded;
		// with no hardware figure at all, the batch bound is the
		// cheaper thing to try.
		pick = bat
		if !(s.kvMax < kvRoom) && !(s.util < utilLow) && !(math.IsNaN(s.kvMax) && math.IsNaN(s.util)) {
			pick = cmp
		}
		pick.findings = append(pick.findings, Finding{Signal: "ambiguous",
			Detail: "requests queue but the signals disagree or are missing; GPU utilisation (--dcgm) and KV-cache figures settle it"})
		pick.held = 0
	}
	if pick == nil {
		rep.Bottleneck = None
		idle := &rule{name: None}
		idle.check("no_queue", nz(s.waiting)+nz(s.gwQueued), true, "", "%.1f waiting at the backend, %.1f at the gateway", nz(s.waiting), nz(s.gwQueued))
		idle.check("sparse", s.running, s.running <= sparseLoad, "no running-requests gauge was read", "%.2f requests running on average", s.running)
		idle.check("kv_cache_room", s.kvMax, s.kvMax < kvFull, s.noKV, "KV cache at most %.0f%% full", pct(s.kvMax))
		idle.check("gpu_headroom", s.util, s.util < utilBusy, s.noUtil, "GPU utilisation %.0f%%", s.util)
		if s.slots {
			idle.check("slots_free", s.maxRunning, s.running < s.maxRunning, s.noBound, "%.1f of llama.cpp's %.0f slots busy on average", s.running, s.maxRunning)
		} else {
			idle.check("no_preemptions", s.preempt, s.preempt == 0, "no preemption count was read", "%.2f preemptions/s", s.preempt)
		}
		if !math.IsNaN(s.speedKept) {
			idle.check("speed_holds_with_load", s.speedKept, !speedFalls, noSweep, sweepText, pct(s.speedKept), s.gain, s.levels)
		}
		rep.Evidence, rep.Score = idle.findings, idle.score()
		edge := edgeText(s)
		switch {
		case edge != "":
			rep.Summary = "nothing queues and nothing is preempted yet, but " + edge + ": this load is at the edge of what the deployment holds; "
			if len(in.Sweep) == 0 {
				rep.Summary += "sweep past it (diagnose --sweep) to see which limit gives first"
			} else {
				rep.Summary += "sweep higher to see which limit gives first"
			}
		case s.running <= sparseLoad || math.IsNaN(s.running):
			rep.Summary = "traffic is too sparse for the deployment to be stuck anywhere: nothing queues and the batch is nearly empty; batching and scheduling knobs will not help until load rises"
		default:
			rep.Summary = "the load fits: nothing queues, the KV cache has room and nothing is preempted; no knob is needed at this load"
			if s.slots {
				rep.Summary = "the load fits: nothing queues and llama.cpp has free slots; no knob is needed at this load"
			}
			if len(in.Sweep) == 0 {
				rep.Summary += " (re-run with --sweep to find where it stops fitting)"
			} else {
				rep.Summary += " (the sweep's heaviest step still fits: sweep higher to find the limit)"
			}
		}
	} else {
		rep.Bottleneck, rep.Evidence, rep.Score = pick.name, pick.findings, pick.score()
		rep.Summary = summary(pick.name, s)
	}
	for _, r := range rules {
		if r == pick {
			continue
		}
		for _, f := range r.findings {
			// Memory's signals are worth seeing even when it does not hold,
			// except a falling speed, which is every saturation's.
			if f.Holds && (r.holds || r.name == Memory && f.Signal != "speed_falls_with_load") && f.Signal != "kv_cache_room" {
				rep.Against = append(rep.Against, Finding{Signal: r.name + "." + f.Signal, Holds: true, Detail: f.Detail})
			}
		}
	}
	switch {
	case pick != nil && pick.held == 0:
		rep.Confidence = "low"
	case rep.Score >= 0.75:
		rep.Confidence = "high"
	case rep.Score >= 0.5:
		rep.Confidence = "medium"
	default:
		rep.Confidence = "low"
	}
	if rep.Confidence == "high" && (edgeText(s) != "" && pick == nil || pick != nil && math.IsNaN(s.util) && math.IsNaN(s.kvMax)) {
		// A verdict made with no hardware figure at all (llama.cpp
		// without --dcgm), or "none" with the hardware at its edge, is
		// not certain: more slots help only if the hardware has room.
		rep.Confidence = "medium"
	}
	rep.CapAt = capAt(rep.Bottleneck, s, in.Sweep)
	rep.Knobs = knobs(rep.Bottleneck, s, rep.CapAt, rep.Load)
	return rep
}
