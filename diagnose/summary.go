package diagnose

import (
	"math"
	"strings"
)

// edgeText names the hardware figures at their limit, "" when none is.
func edgeText(s signals) string {
	var parts []string
	if s.kvMax >= kvFull {
		parts = append(parts, say("the KV cache is %.0f%% full", pct(s.kvMax)))
	}
	if s.util >= utilBusy {
		parts = append(parts, say("the GPU is %.0f%% busy", s.util))
	}
	if s.speedKept < 0.6 {
		parts = append(parts, say("each request runs at %.0f%% of the lightest step's speed", pct(s.speedKept)))
	}
	return strings.Join(parts, " and ")
}

// roomText is the backend_has_room finding: the figures that were read.
func roomText(s signals) string {
	var parts []string
	if !math.IsNaN(s.kvMax) {
		parts = append(parts, say("KV cache %.0f%% full", pct(s.kvMax)))
	}
	if !math.IsNaN(s.util) {
		parts = append(parts, say("GPU %.0f%% busy", s.util))
	}
	switch {
	case s.slots:
		parts = append(parts, say("%.1f of %.0f slots busy", s.running, s.maxRunning))
	case s.maxRunning > 0:
		parts = append(parts, say("%.1f running of a bound of %.0f", s.running, s.maxRunning))
	default:
		parts = append(parts, say("%.1f running", s.running))
	}
	return "backend " + strings.Join(parts, ", ")
}

func nz(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

func summary(b string, s signals) string {
	switch b {
	case Memory:
		if s.preempt > 0 {
			return say("the KV cache is full (%.0f%%) and sequences are preempted (%.2f/s): more concurrency only evicts work; each request's speed falls as load rises",
				pct(s.kvMax), s.preempt)
		}
		return say("the KV cache is full (%.0f%%) though nothing was preempted in the window: more concurrency will evict work; each request's speed already falls as load rises",
			pct(s.kvMax))
	case Compute:
		busy := "the GPU is busy"
		if !math.IsNaN(s.util) {
			busy = say("the GPU is busy (%.0f%%)", s.util)
		}
		if s.waiting >= queueDepth || s.gwQueued >= queueDepth {
			return busy + " and requests queue: the hardware is the limit; only more hardware, a smaller model or quantization add throughput"
		}
		if s.speedKept < 0.6 {
			return busy + say(" and each request at the heaviest step runs at %.0f%% of the lightest step's speed: the hardware is the limit; more concurrency buys throughput with every request's speed, and soon a queue", pct(s.speedKept))
		}
		return busy + ": the hardware is the limit; only more hardware, a smaller model or quantization add throughput"
	case Batching:
		if s.slots {
			busy := say("every one of llama.cpp's %.0f slots is busy (%.1f on average)", s.maxRunning, s.running)
			if s.maxRunning == 1 {
				busy = "llama.cpp's only slot is busy"
			}
			return busy + say(" and %.1f requests wait for one (requests_deferred, the server's queue): the slot count (-np/--parallel) is the batch bound and the limit", s.waiting)
		}
		head := ""
		if s.util < utilLow {
			head = say(" and the GPU has headroom (%.0f%%)", s.util)
		}
		return say("requests wait (%.1f on average) while the running batch is held at %.0f", s.waiting, s.running) + head + ": the batch bound is set too low"
	case Scheduling:
		return say("requests queue at the gateway (%.1f waiting) while the backend has room (%.1f running, none waiting): a cap or scheduler holds them back", nz(s.gwQueued), s.running)
	}
	return ""
}
