package proxy

import (
	"bytes"
	"time"

	"github.com/infergate/infergate/tracing"
)

// The gateway's timeline goes back to a client that asks for it (request
// header X-Infergate-Timing): Server-Timing on a plain response, and on a
// stream an "infergate_timing" object added to the usage chunk, as vLLM
// puts its per-request metrics there (typed SDKs keep unknown fields).
// Nothing changes for a client that does not ask.

// appendTimed appends ev, a usage chunk, with the timing object inserted
// before the data object's closing brace. An event it cannot read is
// appended unchanged.
func appendTimed(dst, ev []byte, a tracing.Attribution, ttft time.Duration) []byte {
	end := bytes.LastIndexByte(ev, '}')
	if end < 0 {
		return append(dst, ev...)
	}
	dst = append(dst, ev[:end]...)
	dst = append(dst, `,"infergate_timing":`...)
	dst = tracing.NewTiming(a, ttft).AppendJSON(dst)
	return append(dst, ev[end:]...)
}
