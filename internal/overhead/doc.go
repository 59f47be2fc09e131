// Package overhead is infergate's self-measurement harness: it starts the
// simulator, gateways, nginx, hey and Redis as child processes on loopback
// (and, for gateway replicas, a round-robin HTTP front of its own) and
// measures, in interleaved rounds, what the gateway adds against a
// direct connection and against nginx, how faithful and how cheap the
// simulator and the load generator are, what shaping and tracing cost,
// and how the selection policies route grouped prompts, a slow replica
// and agent sessions, through one gateway and through replicas. Only
// `infergate overhead` uses it.
package overhead
