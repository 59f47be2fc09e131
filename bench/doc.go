// Package bench is infergate's load generator and measurement harness:
// workloads of exact prompt lengths, datasets and replayed logs; closed-
// loop, open-loop and replay load with sweeps; per-request TTFT, TPOT,
// inter-token gaps, throughput and goodput with their formulas; versioned
// run records, their comparison with a keep-or-roll-back verdict, and
// terminal, CSV and HTML reports; the probe that splits one request's time;
// and the overhead harness that measures the gateway, the simulator and
// the load generator itself against references, interleaved in one run.
package bench
