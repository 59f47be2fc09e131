package tracing

import (
	"strconv"
	"time"

	"github.com/infergate/infergate/openai"
)

// Attribution splits one request's time at the gateway into where it
// went. The parts add up to Total exactly: Gateway is what remains once
// the others are taken out, which is the gateway's own work (choosing a
// backend, failed attempts, writing the request, relaying each event,
// finishing).
type Attribution struct {
	// Queue is the wait for an admission slot (QueueWait: admitted − asked).
	Queue time.Duration
	// Connect is getting a backend connection, new or pooled.
	Connect time.Duration
	// Network is the round trip to the backend as the kernel measured it
	// on the connection (TCP_INFO), at most the time from sending to the
	// first answer.
	Network time.Duration
	// ModelTTFT is the backend's own time to the first token (or to the
	// response headers of a plain answer): sent → first token in, less
	// Network.
	ModelTTFT time.Duration
	// Decode is the backend's time from the first to the last token, less
	// the gateway's relay time in between.
	Decode time.Duration
	// Gateway is the rest: the gateway's own processing. Of it, Relay is
	// the time from reading events off the backend to flushing them to
	// the client, summed over the stream, and RelayMax the longest one
	// read took.
	Gateway, Relay, RelayMax time.Duration
	// Backend is the backend's own split, when it reports one: Queue and
	// Prefill are parts of ModelTTFT (each at most what is left of it;
	// what remains is the backend's HTTP and tokenizing work), Decode and
	// Inference are as reported. Source is empty when there is none.
	Backend openai.ServerTiming
	// Total is received → done.
	Total time.Duration
	// Reasoning is the part of Decode a reasoning model spent thinking,
	// before its first output token (Timeline.Reasoning); TTFO is the
	// time to that token (Timeline.TTFO). Neither is a part of Total.
	Reasoning, TTFO time.Duration
}

// Attribute computes the attribution of a finished request; done stands
// for Done when the timeline is not closed yet (a response being written).
func (t *Timeline) Attribute(done time.Time) Attribution {
	if !t.Done.IsZero() {
		done = t.Done
	}
	a := Attribution{Total: since(t.Received, done), Queue: t.QueueWait(), Connect: t.Connect(), Relay: t.Relay, RelayMax: t.RelayMax,
		Reasoning: t.Reasoning(), TTFO: t.TTFO()}
	if a.TTFO == 0 {
		// Not flushed yet (it leaves with the write being made).
		a.TTFO = since(t.Received, t.FirstOutputIn)
	}
	first := t.FirstTokenIn
	if first.IsZero() {
		first = t.Headers
	}
	if wait := since(t.Sent, first); wait > 0 {
		a.Network = min(t.UpstreamRTT, wait)
		a.ModelTTFT = wait - a.Network
	}
	if d := since(t.FirstTokenIn, t.LastTokenIn) - t.Relay; d > 0 {
		a.Decode = d
	}
	if st := t.Server; st.Source != "" {
		a.Backend = st
		left := a.ModelTTFT
		if st.Queue >= 0 {
			a.Backend.Queue = min(st.Queue, left)
			left -= a.Backend.Queue
		}
		if st.Prefill >= 0 {
			a.Backend.Prefill = min(st.Prefill, left)
		}
	}
	a.Gateway = a.Total - a.Queue - a.Connect - a.Network - a.ModelTTFT - a.Decode
	if a.Gateway < 0 {
		// Stamps of an unfinished request: nothing is left for it.
		a.Gateway = 0
	}
	return a
}

// AppendServerTiming appends the attribution as a W3C Server-Timing header
// value, durations in milliseconds.
func (a Attribution) AppendServerTiming(dst []byte) []byte {
	for i, m := range [...]struct {
		name string
		d    time.Duration
	}{{"queue", a.Queue}, {"gateway", a.Gateway}, {"connect", a.Connect}, {"network", a.Network},
		{"model", a.ModelTTFT}, {"decode", a.Decode}, {"total", a.Total},
		// The backend's own split of model, when it gave one.
		{"backend-queue", a.Backend.Queue}, {"prefill", a.Backend.Prefill}} {
		if i >= 7 && (a.Backend.Source == "" || m.d < 0) {
			continue
		}
		if i > 0 {
			dst = append(dst, ", "...)
		}
		dst = append(dst, m.name...)
		dst = append(dst, ";dur="...)
		dst = strconv.AppendFloat(dst, float64(m.d)/1e6, 'f', 3, 64)
	}
	return dst
}
