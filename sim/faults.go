package sim

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// FaultHeader names the request header that adds faults to one request:
// semicolon-separated key=value pairs with the keys of Faults' YAML names,
// plus "error" as a shorthand for error_rate=1 with that status. Examples:
// "error=503;retry_after=2s", "reset_after=5", "stall_after=3;stall_for=10s",
// "header_delay=200ms", "net_delay=5ms;net_jitter=1ms".
const FaultHeader = "X-Sim-Fault"

// parseFaults overlays the header value h on base.
func parseFaults(base Faults, h string) (Faults, error) {
	f := base
	for _, kv := range strings.Split(h, ";") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return f, fmt.Errorf("%s: %q is not key=value", FaultHeader, kv)
		}
		var err error
		switch k {
		case "error":
			f.ErrorStatus, err = strconv.Atoi(v)
			f.ErrorRate = 1
		case "error_rate":
			f.ErrorRate, err = strconv.ParseFloat(v, 64)
		case "error_status":
			f.ErrorStatus, err = strconv.Atoi(v)
		case "retry_after":
			f.RetryAfter, err = time.ParseDuration(v)
		case "reset_after":
			f.ResetAfter, err = strconv.Atoi(v)
		case "stall_after":
			f.StallAfter, err = strconv.Atoi(v)
		case "stall_for":
			f.StallFor, err = time.ParseDuration(v)
		case "header_delay":
			f.HeaderDelay, err = time.ParseDuration(v)
		case "net_delay":
			f.NetDelay, err = time.ParseDuration(v)
		case "net_jitter":
			f.NetJitter, err = time.ParseDuration(v)
		default:
			return f, fmt.Errorf("%s: unknown key %q", FaultHeader, k)
		}
		if err != nil {
			return f, fmt.Errorf("%s: %s: %w", FaultHeader, k, err)
		}
	}
	if err := f.validate(FaultHeader + " "); err != nil {
		return f, err
	}
	return f, nil
}

// netDelay returns the delay before one write.
func (f *Faults) netDelay() time.Duration {
	if f.NetDelay == 0 {
		return 0
	}
	if f.NetJitter == 0 {
		return f.NetDelay
	}
	return f.NetDelay - f.NetJitter + time.Duration(rand.Int64N(int64(2*f.NetJitter)+1))
}
