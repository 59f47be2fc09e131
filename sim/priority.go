package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// requestPriority reads the body's "priority" (vLLM's request field: an
// integer, 0 when absent, lower runs first). Under fcfs a nonzero one is
// refused, as vLLM refuses it without --scheduling-policy priority (its
// processor raises "Got priority N but Priority scheduling is not
// enabled.", answered 400), so a gateway that forwards a class to an
// engine not configured for it finds out here as it would in production.
func (s *Server) requestPriority(body []byte) (int, error) {
	// Most bodies carry no priority: skip the second decode for them.
	if !bytes.Contains(body, []byte(`"priority"`)) {
		return 0, nil
	}
	var v struct {
		Priority *int32 `json:"priority"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return 0, fmt.Errorf("priority: must be an integer: %w", err)
	}
	if v.Priority == nil {
		return 0, nil
	}
	p := int(*v.Priority)
	if p != 0 && s.cfg.SchedulingPolicy != PolicyPriority {
		return 0, fmt.Errorf("Got priority %d but Priority scheduling is not enabled.", p)
	}
	return p, nil
}
