// Package fastsrv holds the small pieces the gateway's and the
// simulator's fasthttp servers share: a logger adapter and the Prometheus
// text endpoint.
package fastsrv

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/valyala/fasthttp"
)

// Logger sends fasthttp's own messages (connection errors no handler
// sees) to a structured log at debug level.
type Logger struct{ Log *slog.Logger }

// Printf implements fasthttp.Logger.
func (l Logger) Printf(format string, args ...any) {
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
