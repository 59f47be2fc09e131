// Package proxy is infergate's data path: the HTTP server and its routes,
// model routing, upstream pools with load balancing, health checks and
// circuit breakers, retries and failover before the first byte, and the
// stream relay that writes and flushes every server-sent event the moment
// it arrives.
package proxy
