// Package overhead is infergate's self-measurement harness: it starts the
// simulator, gateways, nginx, hey and Redis as child processes on loopback
// and measures, in interleaved rounds, what the gateway adds against a
// direct connection and against nginx, how faithful and how cheap the
// simulator and the load generator are, and what shaping and tracing
// cost. Only `infergate overhead` uses it.
package overhead
