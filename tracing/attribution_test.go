package tracing

import (
	"testing"
	"time"
)

func TestAttributionAddsUp(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	tests := []struct {
		name string
		tl   Timeline
		want Attribution
	}{
		{"stream", Timeline{Received: at(0), Admitted: at(30), UpstreamStart: at(31), Connected: at(33), Sent: at(33.5),
			Headers: at(34), FirstTokenIn: at(84), FirstTokenOut: at(84.2), LastTokenIn: at(284), Done: at(285),
			UpstreamRTT: 2 * time.Millisecond, Relay: 4 * time.Millisecond},
			Attribution{Queue: 30 * time.Millisecond, Connect: 2 * time.Millisecond, Network: 2 * time.Millisecond,
				ModelTTFT: 48500 * time.Microsecond, Decode: 196 * time.Millisecond, Gateway: 6500 * time.Microsecond, Total: 285 * time.Millisecond,
				Relay: 4 * time.Millisecond}},
		{"plain, RTT unknown", Timeline{Received: at(0), Admitted: at(0), UpstreamStart: at(0.1), Connected: at(0.2), Sent: at(0.3),
			Headers: at(40.3), Done: at(41)},
			Attribution{Connect: 100 * time.Microsecond, ModelTTFT: 40 * time.Millisecond, Gateway: 900 * time.Microsecond, Total: 41 * time.Millisecond}},
		// The gateway's setup before it asks for a slot is its own work,
		// not a queue.
		{"setup before admission", Timeline{Received: at(0), Asked: at(0.05), Admitted: at(0.051), UpstreamStart: at(0.06), Connected: at(0.06),
			Sent: at(0.07), Headers: at(1.07), Done: at(1.1)},
			Attribution{Queue: time.Microsecond, ModelTTFT: time.Millisecond, Gateway: 99 * time.Microsecond, Total: 1100 * time.Microsecond}},
		// The kernel's RTT can exceed a fast answer: network is capped.
		{"RTT above the wait", Timeline{Received: at(0), Admitted: at(0), UpstreamStart: at(0), Connected: at(0), Sent: at(0),
			Headers: at(1), Done: at(1), UpstreamRTT: 5 * time.Millisecond},
			Attribution{Network: time.Millisecond, Total: time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.tl.Attribute(time.Time{})
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if sum := got.Queue + got.Connect + got.Network + got.ModelTTFT + got.Decode + got.Gateway; sum != got.Total {
				t.Errorf("parts add up to %v, total %v", sum, got.Total)
			}
		})
	}
}

func TestServerTiming(t *testing.T) {
	a := Attribution{Queue: 1500 * time.Microsecond, Total: 10 * time.Millisecond}
	want := "queue;dur=1.500, gateway;dur=0.000, connect;dur=0.000, network;dur=0.000, model;dur=0.000, decode;dur=0.000, total;dur=10.000"
	if got := string(a.AppendServerTiming(nil)); got != want {
		t.Errorf("%s\nwant %s", got, want)
	}
}
