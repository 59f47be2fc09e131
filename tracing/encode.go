package tracing

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
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
	dst = appendString(dst, e.ID)
	dst = optString(dst, `,"path":`, e.Path)
	dst = optString(dst, `,"tenant":`, e.Tenant)
	dst = optString(dst, `,"model":`, e.Model)
	dst = optString(dst, `,"backend":`, e.Backend)
	dst = append(dst, `,"stream":`...)
	dst = strconv.AppendBool(dst, e.Stream)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(e.Status), 10)
	dst = append(dst, `,"outcome":`...)
	dst = appendString(dst, e.Outcome)
	dst = optInt(dst, `,"input_tokens":`, e.InputTokens)
	dst = optInt(dst, `,"output_tokens":`, e.OutputTokens)
	dst = optInt(dst, `,"events":`, e.Events)
	dst = optInt(dst, `,"attempts":`, e.Attempts)
	if e.TTFT != 0 {
		dst = appendFloat(append(dst, `,"ttft_ms":`...), e.TTFT)
	}
	dst = optString(dst, `,"finish_reason":`, e.FinishReason)
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
	return append(dst, '}')
}

// AppendJSON appends t as one JSON object.
func (t *Timing) AppendJSON(dst []byte) []byte {
	for i, f := range [...]struct {
		key string
		v   float64
	}{{`{"ttft_ms":`, t.TTFT}, {`,"queue_ms":`, t.Queue}, {`,"gateway_ms":`, t.Gateway}, {`,"connect_ms":`, t.Connect},
		{`,"network_ms":`, t.Network}, {`,"model_ttft_ms":`, t.ModelTTFT}, {`,"decode_ms":`, t.Decode}, {`,"total_ms":`, t.Total},
		{`,"relay_ms":`, t.Relay}, {`,"relay_max_ms":`, t.RelayMax}} {
		if i >= 8 && f.v == 0 {
			continue // omitempty
		}
		dst = appendFloat(append(dst, f.key...), f.v)
	}
	if b := t.Backend; b != nil {
		dst = append(dst, `,"backend":{"source":`...)
		dst = appendString(dst, b.Source)
		for _, f := range [...]struct {
			key string
			v   *float64
		}{{`,"queue_ms":`, b.Queue}, {`,"prefill_ms":`, b.Prefill}, {`,"decode_ms":`, b.Decode}, {`,"inference_ms":`, b.Inference}} {
			if f.v != nil {
				dst = appendFloat(append(dst, f.key...), *f.v)
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

func optString(dst []byte, key, s string) []byte {
	if s == "" {
		return dst
	}
	return appendString(append(dst, key...), s)
}

func optInt(dst []byte, key string, n int) []byte {
	if n == 0 {
		return dst
	}
	return strconv.AppendInt(append(dst, key...), int64(n), 10)
}

// appendFloat appends v as a JSON number (NaN and infinities, which JSON
// cannot hold, as 0).
func appendFloat(dst []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	return strconv.AppendFloat(dst, v, 'f', -1, 64)
}

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced, as encoding/json does.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
