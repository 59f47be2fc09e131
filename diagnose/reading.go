package diagnose

import (
	"time"

	"github.com/infergate/infergate/internal/promtext"
)

// A backend's readings are package engine's (engine.Reading: its
// server's metrics in common terms); a gateway's are read here.

// GatewayReading is an infergate gateway's state at one instant, read
// from its /metrics.
type GatewayReading struct {
	At time.Time
	// Queued waits for a slot; InFlight holds one (the global cap's
	// count); Limit is the global cap (0: none).
	Queued, InFlight, Limit float64
	// Upstream is requests in flight to the backends.
	Upstream float64
	// Admitted, Rejected and Requests are counters since start.
	Admitted, Rejected, Requests float64
	// QueueWait is the histogram of time spent queued (seconds).
	QueueWait promtext.Hist
}
