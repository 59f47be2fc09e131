package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Service classes (issue 45): a workload with a class mix sends OpenAI's
// service_tier on every request, drawn from the mix by the seed, and the
// report gives each class its own row. A gateway answers with the class it
// served (X-Infergate-Class) and, when it refuses, a reason.

// Classes are the service_tier values a class mix may name, highest
// first: OpenAI's priority, default and flex, and auto (the API's
// default, which a gateway serves as the tenant's default class).
var Classes = [...]string{"priority", "default", "flex", "auto"}

// Response headers of an infergate gateway serving classes: the class it
// served, why it refused a request, and that it preempted one.
const (
	headerClass     = "X-Infergate-Class"
	headerRefusal   = "X-Infergate-Refusal"
	headerPreempted = "X-Infergate-Preempted"
	// headerRequeued: the gateway preempted the request and put it back
	// in its queue this many times before it was served (classes.preempt
	// requeue).
	headerRequeued = "X-Infergate-Requeued"
)

// Bounds on a class mix as the user writes it.
const (
	maxClassMix    = 256 // bytes
	maxReasonBytes = 48  // a refusal reason as recorded
)

// classMix is a parsed WorkloadSpec.ClassMix: the share of requests each
// class of Classes gets, summing to 1; all zero for none.
type classMix [len(Classes)]float64

// classIndex is c's index in Classes, -1 when it is not one.
func classIndex(c string) int {
	for i, k := range Classes {
		if c == k {
			return i
		}
	}
	return -1
}

var errClassMix = errors.New("want CLASS=WEIGHT,... with classes priority, default, flex or auto, each once, weights ≥ 0 summing to more than 0 (e.g. priority=0.2,default=0.5,flex=0.3)")

// parseClassMix reads "priority=0.2,default=0.5,flex=0.3": each class
// at most once, weights finite and not negative, at least one positive;
// the shares are the weights over their sum. "" is no mix.
func parseClassMix(s string) (classMix, error) {
	var m classMix
	if len(s) > maxClassMix {
		return m, fmt.Errorf("%d bytes, more than %d: %w", len(s), maxClassMix, errClassMix)
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return m, nil
	}
	seen := [len(Classes)]bool{}
	sum := 0.0
	for part := range strings.SplitSeq(s, ",") {
		name, weight, ok := strings.Cut(part, "=")
		name, weight = strings.TrimSpace(name), strings.TrimSpace(weight)
		i := classIndex(name)
		if !ok || i < 0 {
			return m, fmt.Errorf("%q: %w", clip(part, 40), errClassMix)
		}
		if seen[i] {
			return m, fmt.Errorf("%s given twice: %w", name, errClassMix)
		}
		seen[i] = true
		w, err := strconv.ParseFloat(weight, 64)
		if err != nil || w < 0 || math.IsInf(w, 0) || math.IsNaN(w) {
			return m, fmt.Errorf("%s weight %q: %w", name, clip(weight, 24), errClassMix)
		}
		m[i] = w
		sum += w
	}
	if !(sum > 0) || math.IsInf(sum, 0) {
		return m, fmt.Errorf("weights sum to %v: %w", sum, errClassMix)
	}
	for i := range m {
		m[i] /= sum
	}
	return m, nil
}

// String is the mix in its canonical form: classes in Classes order,
// shares to four significant digits, zero shares left out.
func (m classMix) String() string {
	var b []byte
	for i, v := range m {
		if v <= 0 {
			continue
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = append(b, Classes[i]...)
		b = append(b, '=')
		b = strconv.AppendFloat(b, v, 'g', 4, 64)
	}
	return string(b)
}

func (m classMix) none() bool { return m == classMix{} }

// pick is the class of request i under seed: a deterministic draw, the
// same for the same seed and index whatever the load or the order sent.
func (m classMix) pick(seed uint64, i int) int {
	u := float64(splitmix(seed^uint64(i)*0x9e3779b97f4a7c15)>>11) / (1 << 53)
	last := 0
	for k, v := range m {
		if v <= 0 {
			continue
		}
		last = k
		if u < v {
			return k
		}
		u -= v
	}
	return last // rounding left u at the top
}

// splitmix is SplitMix64's finaliser.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// classWorkload sends each request of its inner workload with the
// service_tier its mix draws for it.
type classWorkload struct {
	Workload
	mix  classMix
	seed uint64
}

// Request is the inner workload's request i with its class.
func (w *classWorkload) Request(i int) Request {
	return withClass(w.Workload.Request(i), w.mix.pick(w.seed, i))
}

// classSessions gives every turn of a session the class its mix draws
// for the session: a conversation keeps its class.
type classSessions struct {
	sessionWorkload
	mix  classMix
	seed uint64
}

// Request is the inner workload's request i with its class.
func (w *classSessions) Request(i int) Request {
	return withClass(w.sessionWorkload.Request(i), w.mix.pick(w.seed, i))
}

// Turn is session u's turn with the session's class.
func (w *classSessions) Turn(u int, history []message, t turn) Request {
	return withClass(w.sessionWorkload.Turn(u, history, t), w.mix.pick(w.seed, u))
}

// withClassMix wraps w to send the classes of mix.
func withClassMix(w Workload, mix classMix, seed uint64) Workload {
	if sw, ok := w.(sessionWorkload); ok {
		return &classSessions{sessionWorkload: sw, mix: mix, seed: seed}
	}
	return &classWorkload{Workload: w, mix: mix, seed: seed}
}

func withClass(r Request, k int) Request {
	r.Class = Classes[k]
	r.Body = withServiceTier(r.Body, r.Class)
	return r
}

// withServiceTier returns a copy of body, a JSON object, with its
// service_tier set to class. One that has none gets it as its first
// member without a re-encoding; one that has one (a replayed request) is
// re-encoded with it replaced. A body that is not an object goes as it is.
func withServiceTier(body []byte, class string) []byte {
	if bytes.Contains(body, []byte(`"service_tier"`)) {
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) == nil && m != nil {
			m["service_tier"] = json.RawMessage(strconv.Quote(class))
			if out, err := json.Marshal(m); err == nil {
				return out
			}
		}
		return body
	}
	t := bytes.TrimLeft(body, " \t\r\n")
	if len(t) < 2 || t[0] != '{' {
		return body
	}
	out := make([]byte, 0, len(t)+len(class)+20)
	out = append(out, `{"service_tier":"`...)
	out = append(out, class...)
	out = append(out, '"')
	if rest := bytes.TrimLeft(t[1:], " \t\r\n"); len(rest) == 0 || rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, t[1:]...)
}

// servedClass reads the class a gateway says it served: one of Classes,
// "other" for a value that is none of them, "" for none.
func servedClass(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	for _, c := range Classes {
		if string(v) == c { // no allocation: the compiler compares in place
			return c
		}
	}
	return "other"
}

// refusalReason names why a 429 or 503 was refused, as "STATUS REASON":
// preempted when the gateway says so, else its refusal header, else the
// error body's code (or type), else the status alone. What the server
// wrote is bounded and reduced to [a-z0-9_.:-], so it can key a table.
func refusalReason(status int, preempted, header, body []byte) string {
	reason := ""
	switch {
	case len(preempted) > 0:
		reason = "preempted"
	case len(header) > 0:
		reason = tidyReason(header)
	default:
		var e struct {
			Error struct {
				Code json.RawMessage `json:"code"`
				Type string          `json:"type"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil {
			var code string
			if json.Unmarshal(e.Error.Code, &code) == nil && code != "" {
				reason = tidyReason([]byte(code))
			} else if e.Error.Type != "" {
				reason = tidyReason([]byte(e.Error.Type))
			}
		}
	}
	if reason == "" {
		return strconv.Itoa(status)
	}
	return strconv.Itoa(status) + " " + reason
}

func tidyReason(v []byte) string {
	b := make([]byte, 0, min(len(v), maxReasonBytes))
	for _, c := range bytes.ToLower(bytes.TrimSpace(v)) {
		if len(b) == maxReasonBytes {
			break
		}
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '.', c == ':', c == '-':
			b = append(b, c)
		case c == ' ':
			b = append(b, '_')
		}
	}
	return string(b)
}
