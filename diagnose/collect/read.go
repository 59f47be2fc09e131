package collect

import (
	"math"

	"github.com/infergate/infergate/diagnose"
	"github.com/infergate/infergate/internal/promtext"
)

// What diagnose reads beside the servers' own metrics (package engine):
// the DCGM exporter's GPU utilisation and the gateway's own exposition.

// GPUUtil is the DCGM exporter's GPU utilisation (DCGM_FI_DEV_GPU_UTIL,
// percent), averaged over the GPUs; NaN when absent. A sim's /metrics
// carries it too.
func GPUUtil(s *promtext.Scrape) float64 {
	if v, ok := s.Mean("DCGM_FI_DEV_GPU_UTIL"); ok {
		return v
	}
	return math.NaN()
}

// ReadGateway turns an infergate gateway's scrape into a reading; ok is
// false when the scrape is not a gateway's.
func ReadGateway(s *promtext.Scrape) (diagnose.GatewayReading, bool) {
	if !s.Has("infergate_queue_depth") {
		return diagnose.GatewayReading{}, false
	}
	g := diagnose.GatewayReading{At: s.At}
	g.Queued, _ = s.Sum("infergate_queue_depth")
	global := [][2]string{{"level", "global"}, {"unit", "requests"}}
	g.InFlight, _ = s.Sum("infergate_shaping_in_flight", global...)
	g.Limit, _ = s.Sum("infergate_shaping_limit", global...)
	g.Upstream, _ = s.Sum("infergate_upstream_in_flight")
	g.Admitted, _ = s.Sum("infergate_shaping_admitted_total")
	g.Rejected, _ = s.Sum("infergate_shaping_rejections_total")
	g.Requests, _ = s.Sum("infergate_requests_total")
	g.QueueWait, _ = s.Hist("infergate_queue_wait_seconds")
	return g, true
}
