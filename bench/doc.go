// Package bench is infergate's load generator: it runs a workload against
// any OpenAI-compatible server (closed loop, open loop, replay, sweeps),
// records each run with its conditions and formulas, compares two records
// with a keep-or-roll-back verdict, reports in the terminal, CSV and HTML,
// and probes where one request's time goes.
package bench
