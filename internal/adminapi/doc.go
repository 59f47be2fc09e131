// Package adminapi is a gateway's admin API: the one declaration of every
// body its admin listener takes and answers, which the gateway encodes,
// and the typed client every caller decodes them with (the config
// command, top, ab report, bench, diagnose, tune, the overhead harness).
//
//   - client.go: Client, one method per endpoint, the admin key as
//     `Authorization: Bearer`, bounded reads, and the gateway's own
//     message when it refuses.
//   - stats.go: GET /admin/stats, the live view (Stats).
//   - versions.go: GET /admin/config/versions, POST /admin/config/set and
//     POST /admin/config/rollback (Version, SetRequest, RollbackRequest).
//   - pairs.go: GET /admin/pairs (Pairs), and Pair, which is also a line
//     of the mirror's pairs file.
//
// It stays light: net/http on the client side, no fasthttp, nothing of
// the gateway (archtest holds it to that), so a load generator or a
// script can import it.
package adminapi
