package sim

import (
	"testing"
	"time"
)

// BenchmarkEngineStep2000 is one scheduling step (schedule and finish,
// metrics included) with 2,000 sequences decoding: the scheduler's own
// cost, to compare with a 20 ms step. Handlers are not woken here.
func BenchmarkEngineStep2000(b *testing.B) {
	cfg := DefaultConfig().Engine
	cfg.MaxNumSeqs = 2048
	cfg.KVCacheTokens = 1 << 40 // never the limit here
	e := newEngine(cfg, 1, newMetrics("sim-model", DefaultConfig().Engine))
	for range 2000 {
		s := newSeq(100, 1<<30)
		s.arrival = time.Now()
		e.waiting = append(e.waiting, s)
	}
	e.cfg.MaxBatchedTokens = 0
	var touched []*seq
	now := time.Now()
	touched = e.finishStep(e.schedule(), now, touched[:0]) // admit and prefill all
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		now = now.Add(20 * time.Millisecond)
		p := e.schedule()
		touched = e.finishStep(p, now, touched[:0])
		for _, s := range touched {
			s.wake()
			select {
			case <-s.notify:
			default:
			}
		}
		e.metrics.util.add(now, 20*time.Millisecond, 1)
		e.metrics.step(engineStats{running: len(e.runningSeqs)})
	}
	b.StopTimer()
	if len(e.runningSeqs) != 2000 {
		b.Fatalf("%d running, want 2000", len(e.runningSeqs))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(20*time.Millisecond)*100, "%-of-20ms-step")
}
