// Package tracing holds the per-request timeline that every figure of the
// gateway is computed from, and everything that reports it.
//
//   - timeline.go: the monotonic stamps taken on the request path;
//     attribution.go the split of a request's time into queue, gateway,
//     connect, network, model and decode, which add up to its total.
//   - hist.go: the per-request histograms and counters, aggregated here;
//     metrics.go their export (Prometheus text, OTLP push), under the
//     GenAI semantic conventions' names where they exist.
//   - otel.go: a span per request to an OpenTelemetry collector;
//     spanbatch.go their batching.
//   - requestlog.go: one JSON line per request (the file is
//     internal/jsonl's), which bench --replay reads back; encode.go the
//     hand-written encoding of its lines and of the timing object.
//   - recent.go: the live view of the last minute, /admin/stats, by the
//     one percentile rule (internal/quantile).
package tracing
