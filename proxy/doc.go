// Package proxy is infergate's data path: the HTTP server and its routes,
// model routing, upstream pools with load balancing, health checks and
// circuit breakers, retries and failover before the first byte, the
// stream relay that writes and flushes every server-sent event the moment
// it arrives, and the mirror's tap.
//
// The files read in the order of a request's life:
//
//   - server.go: the Gateway, New, Serve and Shutdown; state.go its
//     configuration made live; reload.go Reload, and versions.go the
//     history a rollback goes back to. The settings: config.go the
//     file's root (defaults, validation), serverconfig.go the listening
//     side and its timeouts, poolconfig.go the pools, tenants.go the
//     tenants (and their legacy place under shaping).
//   - listener.go: the cap on client connections; routes.go which handler
//     a path gets; admin.go the admin listener's; body.go a request body
//     read as it arrives.
//   - exchange.go: one request read, routed and set up (serveAPI, start),
//     and released through one funnel (finishWith); headers.go what is
//     copied to and from the backend; otel.go its trace context.
//   - policy.go: the tenant, the model, trimming and output caps (the
//     policy package); admit.go the admission slot (the shaping package).
//   - mirror.go: the tap, where a sampled copy leaves for a candidate
//     (the mirror package does the rest); arm.go the primary's answer
//     handed to its pair, and the copy's round trip.
//   - forward.go: a backend picked (pool.go; selector.go the selector
//     every policy is, select_load.go and select_prefix.go the two that
//     score the backends' load, select_place.go where prefix sends what
//     no backend holds yet, load.go where they read it; backend.go;
//     budget.go the retry budget) and tried, with failover; upstream.go
//     the round trip to it; rtt_linux.go (rtt_other.go elsewhere) the
//     kernel's round-trip time.
//   - response.go: the backend's answer committed to the client, or a
//     failure answered; errors.go, the one place failures become
//     responses, beside the errors it maps.
//   - hijack.go: a stream written straight onto the client connection;
//     stream.go its life there; keepalive.go a stream committed before its
//     backend answered; deadline.go the coarse deadlines it re-arms.
//   - relay.go: each event read, accounted (openai.Tally), flushed and
//     timed; timing.go the timing handed to a client that asks.
//   - telemetry.go: the finished request's log line, metrics (metrics.go),
//     span and request-log entry, built off the request path; panics.go
//     a panic contained to the request it happened in.
package proxy
