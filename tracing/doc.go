// Package tracing holds the per-request timeline that every figure of the
// gateway is computed from: monotonic stamps taken on the request path,
// from which queueing, connect, model and relay times are derived.
package tracing
