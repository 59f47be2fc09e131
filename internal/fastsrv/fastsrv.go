// Package fastsrv holds the small pieces the gateway's and the
// simulator's fasthttp servers share: a logger adapter and the Prometheus
// text endpoint.
package fastsrv

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/valyala/fasthttp"
)

// Logger sends fasthttp's own messages (connection errors no handler
// sees) to a structured log at debug level.
type Logger struct{ Log *slog.Logger }

// Printf implements fasthttp.Logger. Nothing is formatted unless debug
// logging is on: fasthttp calls it on the request path.
func (l Logger) Printf(format string, args ...any) {
	if !l.Log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	// fasthttp warns on every Request.Body() of a streamed body; the
	// gateway reads bodies that way on purpose, bounded by
	// server.max_body_bytes (proxy/body.go).
	if strings.HasPrefix(format, "WARNING: Request.Body() reads the entire stream") {
		return
	}
	l.Log.Debug(fmt.Sprintf(format, args...), "component", "fasthttp")
}

// WriteMetrics answers with reg's metrics in the Prometheus text format.
func WriteMetrics(rc *fasthttp.RequestCtx, reg *prometheus.Registry, log *slog.Logger) {
	mfs, err := reg.Gather()
	if err != nil {
		log.Error("gather metrics", "err", err) // partial results still go out
	}
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	rc.SetContentType(string(format))
	enc := expfmt.NewEncoder(rc, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			log.Error("encode metrics", "err", err)
			return
		}
	}
}

var _ fasthttp.Logger = Logger{}
