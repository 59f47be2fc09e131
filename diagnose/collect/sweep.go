package collect

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/diagnose"
)

// SweepConfig is a concurrency sweep: the benchmark to run at each level
// (its Load.Duration is each step's length) and what to sample meanwhile.
type SweepConfig struct {
	Bench  bench.Config
	Levels []float64
	Sample Config
}

// Sweep runs the benchmark once per level, in closed loop, sampling the
// metrics over each step's last three quarters (the first quarter fills
// the batch). It returns one point per level that ran.
func Sweep(ctx context.Context, sc SweepConfig, progress io.Writer) ([]diagnose.SweepPoint, error) {
	step := sc.Bench.Load.Duration
	if step <= 0 {
		step = 10 * time.Second
	}
	var out []diagnose.SweepPoint
	for _, level := range sc.Levels {
		bc := sc.Bench
		bc.Sweep = nil
		bc.Workload.Stream = true // per-request speed needs the token times
		bc.Load.Mode, bc.Load.Concurrency, bc.Load.Rate, bc.Load.Duration, bc.Load.Requests = "closed", int(level), 0, step, 0
		if progress != nil {
			fmt.Fprintf(progress, "diagnose: sweep step at concurrency %.0f for %v\n", level, step)
		}
		type result struct {
			rec *bench.Record
			err error
		}
		done := make(chan result, 1)
		go func() {
			rec, err := bench.Run(ctx, bc)
			done <- result{rec, err}
		}()
		scfg := sc.Sample
		scfg.Window = step * 3 / 4
		var w Windows
		var werr error
		select {
		case <-time.After(step / 4):
			w, werr = Sample(ctx, scfg)
		case <-ctx.Done():
		}
		res := <-done
		if res.err != nil {
			return out, fmt.Errorf("collect: sweep at %.0f: %w", level, res.err)
		}
		if werr != nil {
			return out, werr
		}
		p := diagnose.SweepPoint{Concurrency: level, Backends: w.Backends, Gateway: w.Gateway}
		p.RequestsPerS, p.OutputTokPerS, p.PerRequestTokPerS, p.TTFTp50, p.TTFTp90 = nan(), nan(), nan(), nan(), nan()
		if len(res.rec.Stages) > 0 {
			st := res.rec.Stages[0]
			p.RequestsPerS, p.OutputTokPerS = diagnose.Num(st.RequestThroughput), diagnose.Num(st.OutputTokenThroughput)
			if m := st.Metrics["tpot"]; m != nil && m.P50 > 0 {
				p.PerRequestTokPerS = diagnose.Num(1000 / m.P50)
			}
			if m := st.Metrics["ttft"]; m != nil {
				p.TTFTp50 = diagnose.Num(m.P50)
				if m.P90 != nil {
					p.TTFTp90 = diagnose.Num(*m.P90)
				}
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func nan() diagnose.Num { return diagnose.Num(diagnose.Unknown()) }
