package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// llama.cpp's server keeps its batch bound out of /metrics: the slot
// count (-np/--parallel) is in GET /props as total_slots and in GET
// /slots as one object per slot (with --slots, on by default since
// late 2025), each with its context (n_ctx: -c split between the slots
// unless --kv-unified) and whether it is busy (is_processing).

// maxSlots bounds a slot count read from a server: llama.cpp allocates
// a sequence per slot, and more than this is not a real server's.
const maxSlots = 1 << 16

// Slots is what a llama.cpp server says of its slots.
type Slots struct {
	// Total is the slot count; Context each slot's context in tokens (0
	// when not said).
	Total, Context int
	// Busy is the slots processing a request, -1 when not said (/props
	// does not say).
	Busy int
}

// ErrNoSlots is an answer that parsed but named no slots.
var ErrNoSlots = errors.New("engine: no llama.cpp slot count in the answer")

// ParseProps reads llama.cpp's GET /props: total_slots, and each slot's
// context from default_generation_settings.n_ctx.
func ParseProps(b []byte) (Slots, error) {
	var p struct {
		TotalSlots *int `json:"total_slots"`
		Defaults   struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return Slots{}, fmt.Errorf("engine: llama.cpp /props: %w", err)
	}
	if p.TotalSlots == nil {
		return Slots{}, ErrNoSlots
	}
	if *p.TotalSlots < 1 || *p.TotalSlots > maxSlots {
		return Slots{}, fmt.Errorf("engine: llama.cpp /props: total_slots %d is not a slot count", *p.TotalSlots)
	}
	return Slots{Total: *p.TotalSlots, Context: max(0, p.Defaults.NCtx), Busy: -1}, nil
}

// ParseSlots reads llama.cpp's GET /slots: one object per slot.
func ParseSlots(b []byte) (Slots, error) {
	var slots []struct {
		ID           *int `json:"id"`
		NCtx         int  `json:"n_ctx"`
		IsProcessing bool `json:"is_processing"`
	}
	if err := json.Unmarshal(b, &slots); err != nil {
		return Slots{}, fmt.Errorf("engine: llama.cpp /slots: %w", err)
	}
	if len(slots) == 0 {
		return Slots{}, ErrNoSlots
	}
	if len(slots) > maxSlots {
		return Slots{}, fmt.Errorf("engine: llama.cpp /slots: %d slots is not a slot count", len(slots))
	}
	out := Slots{Total: len(slots)}
	for _, s := range slots {
		if s.ID == nil {
			return Slots{}, fmt.Errorf("engine: llama.cpp /slots: a slot without an id: %w", ErrNoSlots)
		}
		if s.IsProcessing {
			out.Busy++
		}
		out.Context = max(out.Context, s.NCtx)
	}
	return out, nil
}

// Apply sets r's slot figures from sl.
func (sl Slots) Apply(r *Reading) {
	if sl.Total > 0 {
		r.Slots = float64(sl.Total)
	}
	if sl.Context > 0 {
		r.SlotContext = float64(sl.Context)
	}
}

// Sibling is the path of name beside a metrics path: /v1/metrics?model=m
// gives /v1/props?model=m (llama.cpp's router mode wants the model on
// each), and a path that does not end in /metrics gives /name.
func Sibling(metricsPath, name string) string {
	p, q, hasQ := strings.Cut(metricsPath, "?")
	if dir, ok := strings.CutSuffix(p, "/metrics"); ok {
		p = dir + "/" + name
	} else {
		p = "/" + name
	}
	if hasQ {
		return p + "?" + q
	}
	return p
}

// FetchSlots reads a llama.cpp server's slot count beside its metrics
// path: GET /props, else GET /slots (an older server, or one started with
// --no-slots answers only one of them). get fetches a path (Sibling's) and
// returns a 2xx answer's body, which need live only until get is called
// again; its errors need not name the path, which FetchSlots adds.
func FetchSlots(metricsPath string, get func(path string) ([]byte, error)) (Slots, error) {
	var errs []error
	for _, try := range []struct {
		name  string
		parse func([]byte) (Slots, error)
	}{{"props", ParseProps}, {"slots", ParseSlots}} {
		path := Sibling(metricsPath, try.name)
		b, err := get(path)
		if err == nil {
			var sl Slots
			if sl, err = try.parse(b); err == nil {
				return sl, nil
			}
		}
		errs = append(errs, fmt.Errorf("%s: %w", path, err))
	}
	// One line, for a log or a report's list of errors.
	err := fmt.Errorf("engine: llama.cpp's slot count: %w", errs[0])
	for _, e := range errs[1:] {
		err = fmt.Errorf("%w; %w", err, e)
	}
	return Slots{}, err
}
