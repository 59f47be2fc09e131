// Package bench is infergate's load generator and measurement harness:
// closed-loop load at a fixed concurrency over real HTTP, per-request TTFT
// and inter-event gaps with HdrHistogram percentiles, and the overhead
// harness that measures a backend directly, through the gateway and
// through nginx, interleaved in one run.
package bench
