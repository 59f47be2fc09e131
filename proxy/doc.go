// Package proxy is infergate's data path: the HTTP server and its routes,
// model routing, upstream pools with load balancing, health checks and
// circuit breakers, retries and failover before the first byte, and the
// stream relay that writes and flushes every server-sent event the moment
// it arrives.
//
// The files read in the order of a request's life:
//
//   - server.go: the Gateway, its configuration made live (state), Serve,
//     Reload and Shutdown; config.go its settings.
//   - routes.go: which handler a path gets; admin.go the admin listener's.
//   - exchange.go: one request read, routed and set up (serveAPI, start),
//     and released through one funnel (finishWith); headers.go what is
//     copied to and from the backend; otel.go its trace context.
//   - admit.go: the admission slot (the shaping package) and the tenant.
//   - forward.go: a backend picked (pool.go, selector.go, backend.go,
//     budget.go) and tried, with failover; upstream.go the round trip to
//     it; rtt_linux.go the kernel's round-trip time.
//   - response.go: the backend's answer committed to the client, or a
//     failure answered; errors.go, the one place failures become
//     responses, beside the errors it maps.
//   - hijack.go: a stream written straight onto the client connection;
//     stream.go its life there; keepalive.go a stream committed before its
//     backend answered.
//   - relay.go: each event read, flushed and timed; timing.go the timing
//     handed to a client that asks.
//   - telemetry.go: the finished request's log line, metrics (metrics.go),
//     span and request-log entry, built off the request path.
package proxy
