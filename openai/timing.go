package openai

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// Timing is the gateway's account of one request, in milliseconds: the
// "infergate_timing" object an infergate gateway adds to a stream's usage
// chunk for a client that asks (request header X-Infergate-Timing), and
// the "timing" of its request-log lines. TTFT is the gateway's own time to
// first token; the other parts add up to Total.
type Timing struct {
	TTFT      float64 `json:"ttft_ms"`
	Queue     float64 `json:"queue_ms"`
	Gateway   float64 `json:"gateway_ms"`
	Connect   float64 `json:"connect_ms"`
	Network   float64 `json:"network_ms"`
	ModelTTFT float64 `json:"model_ttft_ms"`
	Decode    float64 `json:"decode_ms"`
	Total     float64 `json:"total_ms"`
	// Relay and RelayMax are the gateway's relay time, of Gateway: summed
	// over the stream, and its longest single read → flush.
	Relay    float64 `json:"relay_ms,omitempty"`
	RelayMax float64 `json:"relay_max_ms,omitempty"`
	// TTFO is the time to the first output token, Reasoning the part of
	// Decode a reasoning model spent thinking before it; both absent for a
	// model that did not think.
	TTFO      float64 `json:"ttfo_ms,omitempty"`
	Reasoning float64 `json:"reasoning_ms,omitempty"`
	// Backend is the backend's own split, when it reported one.
	Backend *BackendTiming `json:"backend,omitempty"`
}

// BackendTiming is a backend's own account of its time, in milliseconds;
// a field it did not report is absent. Queue and Prefill are parts of
// Timing.ModelTTFT.
type BackendTiming struct {
	Source    string   `json:"source"`
	Queue     *float64 `json:"queue_ms,omitempty"`
	Prefill   *float64 `json:"prefill_ms,omitempty"`
	Decode    *float64 `json:"decode_ms,omitempty"`
	Inference *float64 `json:"inference_ms,omitempty"`
}

// AppendJSON appends t as one JSON object, as encoding/json would encode
// it, without reflection and without allocating.
func (t *Timing) AppendJSON(dst []byte) []byte {
	for i, f := range [...]struct {
		key string
		v   float64
	}{{`{"ttft_ms":`, t.TTFT}, {`,"queue_ms":`, t.Queue}, {`,"gateway_ms":`, t.Gateway}, {`,"connect_ms":`, t.Connect},
		{`,"network_ms":`, t.Network}, {`,"model_ttft_ms":`, t.ModelTTFT}, {`,"decode_ms":`, t.Decode}, {`,"total_ms":`, t.Total},
		{`,"relay_ms":`, t.Relay}, {`,"relay_max_ms":`, t.RelayMax}, {`,"ttfo_ms":`, t.TTFO}, {`,"reasoning_ms":`, t.Reasoning}} {
		if i >= 8 && f.v == 0 {
			continue // omitempty
		}
		dst = AppendJSONFloat(append(dst, f.key...), f.v)
	}
	if b := t.Backend; b != nil {
		dst = append(dst, `,"backend":{"source":`...)
		dst = AppendJSONString(dst, b.Source)
		for _, f := range [...]struct {
			key string
			v   *float64
		}{{`,"queue_ms":`, b.Queue}, {`,"prefill_ms":`, b.Prefill}, {`,"decode_ms":`, b.Decode}, {`,"inference_ms":`, b.Inference}} {
			if f.v != nil {
				dst = AppendJSONFloat(append(dst, f.key...), *f.v)
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// AppendJSONFloat appends v as a JSON number (NaN and infinities, which
// JSON cannot hold, as 0).
func AppendJSONFloat(dst []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	return strconv.AppendFloat(dst, v, 'f', -1, 64)
}

// AppendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced, as encoding/json
// does (without its HTML escaping).
func AppendJSONString(dst []byte, s string) []byte {
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
