package openai

import (
	"encoding/json"
	"strconv"
	"time"
)

// ServerTiming is a backend's own account of a request's time, as some
// servers report it: vLLM's per-request "metrics" object (vllm serve
// --enable-per-request-metrics), llama.cpp's "timings" object, TGI's
// x-queue-time and x-inference-time headers. A field the server did not
// report is negative.
type ServerTiming struct {
	Source string // "vllm", "llama.cpp" or "tgi"; empty when none
	// Queue is the wait in the server's scheduler; Prefill its time from
	// scheduling to the first token; Decode from the first token to the
	// last; Inference prefill and decode together, when only the sum is
	// known (TGI).
	Queue, Prefill, Decode, Inference time.Duration
}

// NoServerTiming is a ServerTiming with nothing reported.
var NoServerTiming = ServerTiming{Queue: -1, Prefill: -1, Decode: -1, Inference: -1}

var (
	keyMetrics = []byte(`"metrics"`)
	keyTimings = []byte(`"timings"`)
)

// ServerTimingOf reads the backend's timing from a chunk or response
// body: vLLM's "metrics" object or llama.cpp's "timings" object. It
// decodes only that object, and only when the key is there.
func ServerTimingOf(data []byte) (ServerTiming, bool) {
	if v := objectValue(data, keyMetrics); v != nil {
		var m struct {
			TTFT  *float64 `json:"time_to_first_token_ms"`
			Gen   *float64 `json:"generation_time_ms"`
			Queue *float64 `json:"queue_time_ms"`
		}
		if json.Unmarshal(v, &m) == nil && (m.TTFT != nil || m.Gen != nil || m.Queue != nil) {
			st := NoServerTiming
			st.Source = "vllm"
			st.Queue, st.Prefill, st.Decode = msDuration(m.Queue), msDuration(m.TTFT), msDuration(m.Gen)
			return st, true
		}
	}
	if v := objectValue(data, keyTimings); v != nil {
		var m struct {
			Prompt    *float64 `json:"prompt_ms"`
			Predicted *float64 `json:"predicted_ms"`
		}
		if json.Unmarshal(v, &m) == nil && (m.Prompt != nil || m.Predicted != nil) {
			st := NoServerTiming
			st.Source = "llama.cpp"
			st.Prefill, st.Decode = msDuration(m.Prompt), msDuration(m.Predicted)
			return st, true
		}
	}
	return NoServerTiming, false
}

// ServerTimingOfHeaders reads TGI's x-queue-time and x-inference-time
// (integer milliseconds); peek returns a header's value.
func ServerTimingOfHeaders(peek func(name string) []byte) (ServerTiming, bool) {
	q, qok := headerMs(peek("X-Queue-Time"))
	inf, iok := headerMs(peek("X-Inference-Time"))
	if !qok && !iok {
		return NoServerTiming, false
	}
	st := NoServerTiming
	st.Source = "tgi"
	if qok {
		st.Queue = q
	}
	if iok {
		st.Inference = inf
	}
	return st, true
}

// objectValue returns the object that is key's value in data, or nil.
func objectValue(data, key []byte) []byte {
	for v := nextValue(data, key); v != nil; v = nextValue(v, key) {
		if len(v) == 0 || v[0] != '{' {
			continue
		}
		if end := skipValue(v, 0); end <= len(v) {
			return v[:end]
		}
		return nil
	}
	return nil
}

func msDuration(ms *float64) time.Duration {
	if ms == nil || *ms < 0 || *ms > 1e10 {
		return -1
	}
	return time.Duration(*ms * float64(time.Millisecond))
}

func headerMs(v []byte) (time.Duration, bool) {
	if len(v) == 0 {
		return 0, false
	}
	n, err := strconv.ParseFloat(string(v), 64)
	if err != nil || n < 0 || n > 1e10 {
		return 0, false
	}
	return time.Duration(n * float64(time.Millisecond)), true
}
