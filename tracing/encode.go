package tracing

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/infergate/infergate/openai"
)

// The request log writes a line per request and a stream that asks for
// its timing gets one object: both are encoded by hand, field by field as
// their struct tags say, without reflection (encoding/json was most of
// the request log's cost).

// AppendJSON appends e as one JSON object, as json.Marshal would encode
// it (the body compacted onto the line).
func (e *Entry) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"time":"`...)
	dst = e.Time.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","id":`...)
	dst = openai.AppendJSONString(dst, e.ID)
	dst = optString(dst, `,"path":`, e.Path)
	dst = optString(dst, `,"tenant":`, e.Tenant)
	dst = optString(dst, `,"model":`, e.Model)
	dst = optString(dst, `,"backend":`, e.Backend)
	dst = optString(dst, `,"route":`, e.Route)
	dst = append(dst, `,"stream":`...)
	dst = strconv.AppendBool(dst, e.Stream)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(e.Status), 10)
	dst = append(dst, `,"outcome":`...)
	dst = openai.AppendJSONString(dst, e.Outcome)
	dst = optInt(dst, `,"input_tokens":`, e.InputTokens)
	dst = optInt(dst, `,"output_tokens":`, e.OutputTokens)
	if e.CachedTokens != nil {
		dst = strconv.AppendInt(append(dst, `,"cached_tokens":`...), int64(*e.CachedTokens), 10)
	}
	dst = optInt(dst, `,"events":`, e.Events)
	dst = optInt(dst, `,"attempts":`, e.Attempts)
	if e.TTFT != 0 {
		dst = openai.AppendJSONFloat(append(dst, `,"ttft_ms":`...), e.TTFT)
	}
	dst = optString(dst, `,"finish_reason":`, e.FinishReason)
	if e.LengthByPolicy {
		dst = append(dst, `,"length_by_policy":true`...)
	}
	if p := e.Policy; p != nil {
		dst = append(dst, `,"policy":{`...)
		n := len(dst)
		dst = optInt(dst, `,"input_tokens":`, p.InputTokens)
		if p.Estimated {
			dst = append(dst, `,"estimated":true`...)
		}
		dst = optInt(dst, `,"trimmed_tokens":`, p.TrimmedTokens)
		dst = optInt(dst, `,"trimmed_messages":`, p.TrimmedMessages)
		dst = optInt(dst, `,"max_tokens":`, p.MaxTokens)
		dst = optInt(dst, `,"requested_max_tokens":`, p.RequestedMaxTokens)
		if len(dst) > n {
			dst = append(dst[:n], dst[n+1:]...) // the first comma
		}
		dst = append(dst, '}')
	}
	if e.Timing != nil {
		dst = e.Timing.AppendJSON(append(dst, `,"timing":`...))
	}
	dst = optString(dst, `,"error":`, e.Error)
	if len(e.Body) > 0 {
		var buf bytes.Buffer
		if json.Compact(&buf, e.Body) == nil {
			dst = append(append(dst, `,"body":`...), buf.Bytes()...)
		}
	}
	dst = optString(dst, `,"class":`, e.Class)
	dst = optString(dst, `,"class_requested":`, e.ClassRequested)
	dst = optString(dst, `,"refusal":`, e.Refusal)
	return append(dst, '}')
}

func optString(dst []byte, key, s string) []byte {
	if s == "" {
		return dst
	}
	return openai.AppendJSONString(append(dst, key...), s)
}

func optInt(dst []byte, key string, n int) []byte {
	if n == 0 {
		return dst
	}
	return strconv.AppendInt(append(dst, key...), int64(n), 10)
}
