package diagnose

import (
	"fmt"
	"math"
)

// knobs lists what to turn for bottleneck b, cheapest first: concurrency
// caps and batching, then quantization, the KV-cache share, context and
// output caps, and parallelism.
func knobs(b string, s signals, capAt int, load string) []Knob {
	capText := "at the knee of a sweep (diagnose --sweep)"
	if capAt > 0 {
		capText = fmt.Sprintf("at about %d requests (infergate serve --max-concurrency %d, or shaping.global.max_requests)", capAt, capAt)
	}
	quant := Knob{Knob: "quantization",
		Action:    "serve an fp8 (or int8/AWQ) build of the model: smaller weights leave more memory for KV cache and decode steps get cheaper",
		Remeasure: "judge it on quality as well as speed: mirror traffic to it and run infergate ab report (format errors, truncation, refusals)",
		Skip:      "the traffic is precision-sensitive structured output (JSON schemas, tool calls, code): quantization breaks it first"}
	switch b {
	case Memory:
		return []Knob{
			{Knob: "concurrency cap", Action: "cap requests in flight " + capText + ", so the KV cache holds every running sequence and none is preempted; the rest wait at the gateway instead of being evicted and recomputed",
				Remeasure: "preemptions/s (should fall to 0), per-request tokens/s and TTFT p99 at the same offered load (infergate bench, then infergate compare)",
				Skip:      "preemptions are already 0 and per-request speed holds as load rises"},
			quant,
			{Knob: "KV-cache share", Action: "give the cache more memory: raise --gpu-memory-utilization (vLLM) / --mem-fraction-static (SGLang), or store it in fp8 (--kv-cache-dtype fp8), about doubling the tokens it holds",
				Remeasure: "the server's KV cache size at start-up (infergate size predicts it) and preemptions/s",
				Skip:      "the GPU is shared or close to out-of-memory already"},
			{Knob: "context and output caps", Action: "trim long histories and clamp max_tokens at the gateway (--max-input-tokens with --trim drop_oldest, --max-output-tokens): each sequence holds fewer KV blocks",
				Remeasure: "KV usage, and the share of answers cut at the cap (length_by_policy in bench's quality counts)",
				Skip:      "answers or contexts need their full length: truncation costs quality"},
			{Knob: "parallelism", Action: "spread the model over more GPUs (--tensor-parallel-size) or add replicas: more memory in all",
				Remeasure: "KV cache size, per-request tokens/s and throughput per GPU", Skip: "a cheaper knob above already stopped the preemptions"},
		}
	case Batching:
		if s.slots {
			return slotKnobs(s)
		}
		bound := "the running batch's bound"
		if s.maxRunning > 0 {
			bound = fmt.Sprintf("the running batch's bound (now %.0f) to about %.0f", s.maxRunning, math.Max(2*s.maxRunning, s.maxRunning+nz(s.waiting)))
		}
		return []Knob{
			{Knob: "batch size", Action: "raise " + bound + ": vLLM --max-num-seqs, SGLang --max-running-requests, TGI --max-batch-size / --max-batch-total-tokens, llama.cpp --parallel; with long prompts also the per-step token budget (--max-num-batched-tokens)",
				Remeasure: "running batch, GPU utilisation and output tokens/s at the same offered load; inter-token latency rises a little, which is the price",
				Skip:      "KV usage is above 70%: a larger batch will preempt (a memory bottleneck next)"},
			{Knob: "concurrency cap", Action: "if the gateway caps concurrency, keep its cap at or above the new batch bound, or the queue moves to the gateway",
				Remeasure: "queue wait at the gateway (infergate top)"},
		}
	case Scheduling:
		capNow := "the gateway's cap"
		if s.gwLimit > 0 {
			capNow = fmt.Sprintf("the gateway's cap (now %.0f)", s.gwLimit)
		}
		target := "the backends' batch bound"
		if s.maxRunning > 0 {
			target = fmt.Sprintf("the backends' batch bound (%.0f)", s.maxRunning)
		}
		return []Knob{
			{Knob: "concurrency cap", Action: "raise " + capNow + " toward " + target + ", per pool or tenant where those caps are the ones that queue; with several replicas sharing caps through Redis, the cap holds across all of them",
				Remeasure: "queue wait at the gateway and TTFT p99 (infergate top; infergate bench then compare)",
				Skip:      "the backend's KV cache is near full at that load: the queue would move to the backend and preempt"},
			{Knob: "scheduler settings", Action: "if no cap is set, look at the backend's scheduler: a low max_num_batched_tokens, chunked prefill off with long prompts, or priority scheduling holding requests back",
				Remeasure: "backend queue time (vllm:request_queue_time_seconds) against the gateway's queue wait"},
		}
	case Compute:
		return []Knob{
			{Knob: "concurrency cap", Action: "for latency, not throughput: cap requests in flight " + capText + " so TTFT stays within the SLO; the excess waits at the gateway or is shed with 503",
				Remeasure: "TTFT p99 and goodput (bench --slo)", Skip: "throughput is all that matters: a cap adds none"},
			quant,
			{Knob: "parallelism", Action: "add GPUs or replicas, or serve a smaller model: only more compute adds throughput here",
				Remeasure: "output tokens/s per GPU", Skip: "traffic peaks are short and a queue is acceptable"},
		}
	}
	k := []Knob{{Knob: "none", Action: "nothing to turn: batching and scheduling knobs will not help at this load",
		Remeasure: "diagnose again at peak traffic, or with --sweep to find the load where the deployment stops keeping up"}}
	if load == "prefill-bound" && !s.slots { // llama.cpp caches prompts by default (cache_prompt)
		k = append(k, Knob{Knob: "prefix caching", Action: "long shared prompts: turn on prefix caching (vLLM --enable-prefix-caching) to cut TTFT",
			Remeasure: "TTFT p50", Skip: "prompts share no prefix"})
	}
	return k
}

// slotKnobs are llama.cpp's batching knobs: its slot count, and the
// context, which it splits between the slots.
func slotKnobs(s signals) []Knob {
	want := math.Max(2*s.maxRunning, s.maxRunning+math.Ceil(nz(s.waiting)))
	ctx := "-c (--ctx-size) with it: unless the server runs with --kv-unified, the context is split between the slots, so each slot gets -c / -np tokens"
	if s.slotCtx > 0 {
		ctx = fmt.Sprintf("-c (--ctx-size) with it: unless the server runs with --kv-unified, the context is split between the slots (each holds %.0f tokens now), so -c %.0f keeps that room per request at -np %.0f",
			s.slotCtx, s.slotCtx*want, want)
	}
	return []Knob{
		{Knob: "batch size", Action: fmt.Sprintf("raise llama-server's slot count, -np/--parallel (now %.0f), to about %.0f, and %s", s.maxRunning, want, ctx),
			Remeasure: "output tokens/s and TTFT at the same offered load (infergate bench, then infergate compare), and requests_deferred (should fall to 0)",
			Skip:      "the CPU or GPU is already saturated: more slots then share the same compute and each request slows; or memory has no room for the larger context"},
		{Knob: "concurrency cap", Action: "if the gateway caps concurrency, keep its cap at or above the new slot count, or the queue moves to the gateway",
			Remeasure: "queue wait at the gateway (infergate top)"},
	}
}

// loadKind says whether the load is prefill- or decode-bound, from the
// token rates.
func loadKind(s signals) (string, string) {
	if !(s.output > 0) || math.IsNaN(s.prompt) {
		return "unknown", "no token counts in the window"
	}
	r := s.prompt / s.output
	switch {
	case r >= prefillHigh:
		return "prefill-bound", fmt.Sprintf("%.1f prompt tokens per output token: long inputs, short outputs; prefill sets TTFT and the batch's step time", r)
	case r <= decodeHigh:
		return "decode-bound", fmt.Sprintf("%.1f prompt tokens per output token: generation dominates; inter-token latency and batch size matter most", r)
	}
	return "mixed", fmt.Sprintf("%.1f prompt tokens per output token: neither phase dominates", r)
}

// capAt suggests a concurrency cap for memory and compute: the sweep's
// last step before preemptions (or its knee in throughput), else what
// the backends ran with the cache full.
func capAt(b string, s signals, sweep []SweepPoint) int {
	if b != Memory && b != Compute {
		return 0
	}
	if len(sweep) >= 2 {
		best := 0.0
		for i, p := range sweep {
			if !math.IsNaN(s.preemptFrom) && p.Concurrency >= s.preemptFrom {
				break
			}
			// Stop where throughput gains less than a third of the
			// added concurrency.
			if i > 0 && sweep[i-1].OutputTokPerS > 0 && p.OutputTokPerS.Known() {
				g := float64(p.OutputTokPerS/sweep[i-1].OutputTokPerS) - 1
				c := p.Concurrency/sweep[i-1].Concurrency - 1
				if g < c/3 {
					break
				}
			}
			best = p.Concurrency
		}
		if best > 0 {
			return int(best)
		}
	}
	if s.running >= 1 {
		return int(math.Max(1, math.Floor(s.running*0.9)))
	}
	return 0
}
