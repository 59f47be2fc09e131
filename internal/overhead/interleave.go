package overhead

import (
	"context"
	"fmt"

	"github.com/infergate/infergate/bench"
)

// gateway is a named address the interleaved rounds run against.
type gateway struct{ name, addr string }

// interleave warms every gateway up, then runs o.Rounds rounds of a
// closed loop of conc streams of body against each, the order rotating,
// and returns each gateway's pooled figures and its per-round events/s.
func (o *Overhead) interleave(ctx context.Context, gws []gateway, body []byte, conc int) (map[string]*Stats, map[string][]float64, error) {
	pooled := map[string]*Stats{}
	rates := map[string][]float64{}
	clients := map[string]*bench.Client{}
	for _, g := range gws {
		st := Stats{TTFT: bench.NewDist(), Gap: bench.NewDist()}
		pooled[g.name] = &st
		c, err := bench.NewClient("http://"+g.addr+"/v1/chat/completions", bench.ClientOptions{})
		if err != nil {
			return nil, nil, err
		}
		defer c.Close()
		clients[g.name] = c
		if _, err := Load(ctx, c, Target{Body: body, Stream: true}, Options{Concurrency: conc, Duration: o.RoundTime / 3}); err != nil {
			return nil, nil, err
		}
	}
	for r := range o.Rounds {
		for k := range gws {
			g := gws[(r+k)%len(gws)]
			st, err := Load(ctx, clients[g.name], Target{Body: body, Stream: true}, Options{Concurrency: conc, Duration: o.RoundTime})
			if err != nil {
				return nil, nil, err
			}
			if st.Errors > 0 {
				return nil, nil, fmt.Errorf("%s: %d errors, first %s", g.name, st.Errors, st.FirstErr)
			}
			pooled[g.name].Merge(st)
			rates[g.name] = append(rates[g.name], st.EventsPerSecond())
		}
	}
	return pooled, rates, nil
}
