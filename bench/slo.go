package bench

import (
	"fmt"
	"strings"
	"time"
)

// SLO is one service-level objective on a per-request latency metric.
type SLO struct {
	Metric string        `json:"metric"` // ttft, ttft_sched, tpot, e2e
	Max    time.Duration `json:"max"`
}

// ParseSLOs reads "ttft=500ms,tpot=50ms".
func ParseSLOs(s string) ([]SLO, error) {
	var out []SLO
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if !ok || err != nil || d <= 0 {
			return nil, fmt.Errorf("bench: --slo %q: want metric=duration, e.g. ttft=500ms", part)
		}
		switch k {
		case "ttft", "ttft_sched", "tpot", "e2e":
		default:
			return nil, fmt.Errorf("bench: --slo %q: metric must be ttft, ttft_sched, tpot or e2e", part)
		}
		out = append(out, SLO{Metric: k, Max: d})
	}
	return out, nil
}
