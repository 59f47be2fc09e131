// Package fastsrv holds the small pieces the gateway's and the
// simulator's fasthttp servers share: a logger adapter and the Prometheus
// text endpoint.
package fastsrv

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"regexp"
	"strconv"
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
	l.Log.Debug(redactQuoted(fmt.Sprintf(format, args...)), "component", "fasthttp")
}

// quoted matches a Go-quoted string, as fasthttp quotes the bytes it
// could not parse.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// redactQuoted replaces every quoted string in a fasthttp message but
// the connection's addresses by its length: fasthttp quotes the request
// it failed to read (header values, the first kilobyte of the buffer),
// and that holds Authorization headers and query-string keys.
func redactQuoted(msg string) string {
	return quoted.ReplaceAllStringFunc(msg, func(q string) string {
		s, err := strconv.Unquote(q)
		if err != nil {
			return `"(redacted)"`
		}
		if _, err := netip.ParseAddrPort(s); err == nil {
			return q
		}
		return fmt.Sprintf(`"(%d bytes redacted)"`, len(s))
	})
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
