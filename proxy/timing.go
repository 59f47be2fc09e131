package proxy

import (
	"bytes"
	"strconv"
	"time"

	"github.com/infergate/infergate/tracing"
)

// The gateway's timeline goes back to a client that asks for it (request
// header X-Infergate-Timing): Server-Timing on a plain response, and on a
// stream an "infergate_timing" object added to the usage chunk, as vLLM
// puts its per-request metrics there (typed SDKs keep unknown fields).
// Nothing changes for a client that does not ask.

var keyUsageObj = []byte(`"usage":{`)

// appendTimed appends ev, a usage chunk, with the timing object inserted
// before the data object's closing brace. An event it cannot read is
// appended unchanged.
func appendTimed(dst, ev []byte, a tracing.Attribution, ttft time.Duration) []byte {
	end := bytes.LastIndexByte(ev, '}')
	if end < 0 {
		return append(dst, ev...)
	}
	dst = append(dst, ev[:end]...)
	dst = append(dst, `,"infergate_timing":{`...)
	for i, f := range [...]struct {
		name string
		d    time.Duration
	}{{"ttft_ms", ttft}, {"queue_ms", a.Queue}, {"gateway_ms", a.Gateway}, {"connect_ms", a.Connect},
		{"network_ms", a.Network}, {"model_ttft_ms", a.ModelTTFT}, {"decode_ms", a.Decode}, {"total_ms", a.Total}} {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, f.name...)
		dst = append(dst, `":`...)
		dst = strconv.AppendFloat(dst, float64(f.d)/1e6, 'f', 3, 64)
	}
	dst = append(dst, '}')
	return append(dst, ev[end:]...)
}
