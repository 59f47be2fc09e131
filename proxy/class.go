package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/shaping"
	"github.com/valyala/fasthttp"
)

// Service classes on the HTTP side (issue 45; docs/classes.md): the class
// a request asks for (OpenAI's service_tier in the body, or a header),
// held to its tenant's ceiling, echoed in the answer, handed to
// admission (package shaping: order, shedding, preemption), and passed
// to engines that schedule by priority. With classes off none of this
// runs: serveAPI tests one flag.

// ClassesConfig is the top-level classes section: the admission rules
// (package shaping, inline) and what the gateway does on the wire.
type ClassesConfig struct {
	shaping.Classes `yaml:",inline"`
	// Header names the request header that may carry the class (the
	// body's service_tier wins when both are sent). Default
	// x-infergate-class.
	Header string `yaml:"header"`
	// Preempt is what happens to a request of a preemptible class that
	// has sent nothing to its client when a higher class must queue:
	// "answer" (default) cancels it at the backend and answers it 503
	// with X-Infergate-Preempted; "requeue" cancels it at the backend and
	// puts it back in the queue (at most maxRequeues times; then it is
	// answered); "off" never preempts.
	Preempt string `yaml:"preempt"`
	// MidStreamEviction lets a preemptible stream be preempted after its
	// first byte too; it then ends with an SSE error event (code
	// "preempted") and no [DONE]. Default false.
	MidStreamEviction bool `yaml:"mid_stream_eviction"`
}

// Preemption modes.
const (
	preemptOff     = "off"
	preemptAnswer  = "answer"
	preemptRequeue = "requeue"
)

// maxRequeues bounds how often one request goes back to the queue under
// classes.preempt requeue; preempted once more, it is answered.
const maxRequeues = 3

func (c *ClassesConfig) defaults() {
	setDefault(&c.Header, hdrClass)
	setDefault(&c.Preempt, preemptAnswer)
}

func (c *ClassesConfig) validate() error {
	if c.Preempt != preemptOff && c.Preempt != preemptAnswer && c.Preempt != preemptRequeue {
		return fmt.Errorf("classes.preempt: %q: want answer, requeue or off", c.Preempt)
	}
	if c.Preempt == preemptRequeue && c.MidStreamEviction {
		return errors.New("classes.preempt: requeue cannot go with mid_stream_eviction (a stream that has begun cannot start again)")
	}
	if len(c.Header) == 0 || len(c.Header) > 64 || !printable([]byte(c.Header)) || bytes.ContainsAny([]byte(c.Header), ":") {
		return fmt.Errorf("classes.header: %q is not a header name", c.Header)
	}
	return nil
}

// The headers of classes.
const (
	hdrClass        = "X-Infergate-Class"         // the class served (also the default request header)
	hdrClassLowered = "X-Infergate-Class-Lowered" // "asked->served" when held to the tenant's ceiling
	hdrPreempted    = "X-Infergate-Preempted"     // the class that took a preempted request's slot
	hdrRefusal      = "X-Infergate-Refusal"       // why admission refused the request
	hdrRequeued     = "X-Infergate-Requeued"      // times the request went back to the queue (preempt requeue)
)

// Engine priority conventions (pools.<name>.class_priority).
const (
	enginePriorityNone   = "none"
	enginePriorityVLLM   = "vllm"
	enginePrioritySGLang = "sglang"
)

// enginePriority is the body's priority for class c in an engine's
// convention; default is always 0, each engine's own default, so a
// default request is sent as it came. vLLM (--scheduling-policy
// priority) runs lower values first: priority -1, flex 1. SGLang
// (--enable-priority-scheduling) runs higher values first unless started
// with --schedule-low-priority-values-first (then use vllm's mapping):
// priority 1, flex -1.
func enginePriority(mode string, c shaping.Class) int {
	v := 0
	switch c {
	case shaping.ClassPriority:
		v = 1
	case shaping.ClassFlex:
		v = -1
	}
	if mode == enginePriorityVLLM {
		v = -v
	}
	return v
}

// classNote is what the exchange knows of its class.
type classNote struct {
	on      bool          // classes are enabled: the request has a class
	class   shaping.Class // served
	asked   shaping.Class // asked for, when lowered
	lowered bool
	tier    bool // the body set service_tier: a plain answer echoes it
	armed   bool // preemptible until its first byte (Permit.Arm)
	// requeues counts its returns to the queue (classes.preempt requeue).
	requeues int
	// refusal is why admission refused it (hdrRefusal), "" otherwise.
	refusal string
}

// Errors of preemption, one per class that took the slot (no allocation
// on the request path).
var (
	errPreempted   = errors.New("proxy: preempted for a request of a higher class")
	errPreemptedBy = func() (e [shaping.NumClasses]error) {
		for c := range e {
			e[c] = fmt.Errorf("%w (%s)", errPreempted, shaping.Class(c))
		}
		return e
	}()
)

// preemptedBy returns the class named by a preemption error.
func preemptedBy(err error) (shaping.Class, bool) {
	for c, e := range errPreemptedBy {
		if errors.Is(err, e) {
			return shaping.Class(c), true
		}
	}
	return 0, false
}

// classify reads, checks and resolves the request's class, sets the
// answer's class headers and returns the body to forward (with the
// engine's priority when its pool asks for it). It reports false when
// the request was refused (400 or 403). json tells that body is the
// request's JSON object (a completion route or a JSON body).
func (x *exchange) classify(rc *fasthttp.RequestCtx, body []byte, json bool) ([]byte, bool) {
	cc := &x.st.cfg.Classes
	asked, hset := shaping.ClassDefault, false
	// The header: once, short, and a class or auto. Its value is never
	// echoed: it may be anything a client sends.
	var hv []byte
	n := 0
	for k, v := range rc.Request.Header.All() {
		if len(k) == len(cc.Header) && bytes.EqualFold(k, []byte(cc.Header)) {
			n++
			hv = v
		}
	}
	if n > 1 {
		x.classReject(rc, http.StatusBadRequest, "invalid_class", "", fmt.Sprintf("%s: sent %d times; send it once", cc.Header, n))
		return nil, false
	}
	if n == 1 {
		c, set, ok := parseClassValue(hv, false)
		if !ok {
			x.classReject(rc, http.StatusBadRequest, "invalid_class", "", fmt.Sprintf("%s: a value of %d bytes; want priority, default, flex or auto", cc.Header, len(hv)))
			return nil, false
		}
		asked, hset = c, set
	}
	// The body's service_tier wins over the header: it is the API's own
	// field; "auto" there means the tenant's default whatever the header
	// says.
	set := hset
	if json {
		if v := topMember(body, "service_tier"); v != nil && string(v) != "null" {
			x.cls.tier = true
			c, tset, ok := parseClassValue(v, true)
			if !ok {
				x.classReject(rc, http.StatusBadRequest, "invalid_value", "service_tier", "service_tier: want priority, default, flex or auto")
				return nil, false
			}
			asked, set = c, tset
		}
	}
	served, lowered, err := x.st.cfg.Shaping.ResolveClass(x.tenant, asked, set)
	if err != nil {
		x.classReject(rc, http.StatusForbidden, "class_not_allowed", "service_tier",
			fmt.Sprintf("class %s is above this API key's highest class (%s)", asked, served))
		return nil, false
	}
	x.cls = classNote{on: true, class: served, tier: x.cls.tier, lowered: lowered, asked: asked}
	h := &rc.Response.Header
	h.Set(hdrClass, served.String())
	if lowered {
		h.Set(hdrClassLowered, asked.String()+"->"+served.String())
	}
	if json {
		body = x.withEnginePriority(body)
	}
	return body, true
}

// parseClassValue reads a class as a header (raw) or the body's
// service_tier (a JSON string) writes it: a class (set), "auto" (not
// set: the tenant's default), or anything else (not ok). Values longer
// than any class name are refused unread.
func parseClassValue(v []byte, quoted bool) (c shaping.Class, set, ok bool) {
	if quoted {
		if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
			return 0, false, false
		}
		v = v[1 : len(v)-1] // a class name has no escapes: one that does is no class
	}
	if len(v) > shaping.MaxClassNameBytes {
		return 0, false, false
	}
	if string(v) == "auto" {
		return shaping.ClassDefault, false, true
	}
	c, ok = shaping.ParseClass(v)
	return c, ok, ok
}

// withEnginePriority sets the body's priority in the convention of the
// request's pool (class_priority), when it has one. A default request
// that sets none is left as it came.
func (x *exchange) withEnginePriority(body []byte) []byte {
	mode := x.st.cfg.Pools[x.route.pool.name].ClassPriority
	if mode == "" || mode == enginePriorityNone {
		return body
	}
	if x.cls.class == shaping.ClassDefault && topMember(body, "priority") == nil {
		return body
	}
	return openai.SetMember(body, "priority", strconv.AppendInt(nil, int64(enginePriority(mode, x.cls.class)), 10))
}

// topMember returns the value of body's top-level member name (its last
// copy), or nil. body must be a valid JSON object.
func topMember(body []byte, name string) []byte {
	var out []byte
	openai.EachMember(body, func(key []byte, f openai.Field) bool {
		if openai.KeyIs(key, name) {
			out = f.Of(body)
		}
		return true
	})
	return out
}

// classReject refuses a request for its class, with param in the error
// body when the body's field was the cause.
func (x *exchange) classReject(rc *fasthttp.RequestCtx, status int, code, param, msg string) {
	e := openai.Error{Message: msg, Type: openai.TypeInvalidRequest, Code: &code}
	if param != "" {
		e.Param = &param
	}
	b, _ := json.Marshal(struct {
		Error openai.Error `json:"error"`
	}{e})
	x.reject(rc, status, openai.TypeInvalidRequest, code, msg)
	rc.SetBody(b) // the same error, with its param
}

// armPreempt makes the request preemptible until its first byte when its
// class is and classes.preempt says so.
func (x *exchange) armPreempt() {
	cc := &x.st.cfg.Classes
	if cc.Preempt == preemptOff || !x.st.cfg.Shaping.Classes.Preemptible(x.cls.class) {
		return
	}
	// A keep-alive stream forwards off the handler: it cannot go back to
	// the queue, and is answered.
	if cc.Preempt == preemptRequeue && (x.st.cfg.KeepAlive.Delay == 0 || !x.stream) {
		a := &classAttempt{done: make(chan struct{})}
		a.ctx, a.cancel = context.WithCancelCause(&x.ctx)
		if x.cls.armed = x.permit.Arm(a.preempted); x.cls.armed {
			x.att = a
		} else {
			a.cancel(nil)
		}
		return
	}
	x.cls.armed = x.permit.Arm(x.preempt)
}

// classAttempt is one admission of a request under classes.preempt
// requeue: a preemption ends its backend exchange (ctx, a child of the
// request's) and marks it, and the request goes back to the queue. Each
// admission has its own, so a late preemption of an earlier one touches
// nothing of the next.
type classAttempt struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	by     atomic.Int32  // the class that took the slot, plus 1; 0: not preempted
	done   chan struct{} // closed once preempted has ended the exchange
}

// errRequeued ends a preempted attempt under classes.preempt requeue.
var errRequeued = errors.New("proxy: preempted for a request of a higher class; back to the queue")

// preempted is the attempt's preemption (the limiter calls it).
func (a *classAttempt) preempted(by shaping.Class) {
	a.by.Store(int32(by) + 1)
	a.cancel(errRequeued)
	close(a.done)
}

// attemptCtx is the context of the request's backend exchange: its own,
// or under classes.preempt requeue the attempt's.
func (x *exchange) attemptCtx() context.Context {
	if x.att != nil {
		return x.att.ctx
	}
	return &x.ctx
}

// attemptCause is why the backend exchange was ended, nil while it runs.
func (x *exchange) attemptCause() error {
	if c := x.ctx.Cause(); c != nil || x.att == nil {
		return c
	}
	return context.Cause(x.att.ctx)
}

// requeue decides, after forward returned err, whether the request goes
// back to the queue (classes.preempt requeue): it does when it was
// preempted before its first byte, fewer than maxRequeues times. Its
// backend exchange was closed by the preemption; what the attempt held is
// given back and the request waits for a slot again. again false: err
// (or the preemption, past the bound) is its end, or nil to commit.
func (x *exchange) requeue(rc *fasthttp.RequestCtx, body []byte, err error) (again bool, _ error) {
	a := x.att
	if a.by.Load() == 0 {
		if err != nil || !x.cls.armed || x.permit.Disarm() {
			// Failed on its own, or past its preemptible time: its
			// permit is disarmed (or Release will see to it).
			x.cls.armed = x.cls.armed && err != nil
			x.att = nil
			if err != nil {
				a.cancel(nil)
			} // else the exchange goes on under the attempt's context, a child of the request's: it ends with it
			return false, err
		}
		<-a.done // preempted just now: its cancel has run
	}
	by := shaping.Class(a.by.Load() - 1)
	x.att, x.cls.armed = nil, false
	if x.up != nil {
		x.up.finish(false)
		x.up = nil
	}
	if x.backend != nil {
		x.dropAttempt(true) // not the backend's doing
	}
	if x.er != nil {
		x.putReader(x.er)
	}
	x.permit = shaping.Permit{} // the limiter took its slot back
	if x.cls.requeues >= maxRequeues {
		return false, errPreemptedBy[by]
	}
	x.cls.requeues++
	rc.Response.Header.Set(hdrRequeued, strconv.Itoa(x.cls.requeues))
	if err := x.admit(rc, body); err != nil {
		return false, err
	}
	return true, nil
}

// preempt is called by the limiter when a higher class took the
// request's slot: the request ends, which closes its backend connection
// (the engine aborts it and frees its KV cache).
func (x *exchange) preempt(by shaping.Class) { x.ctx.Cancel(errPreemptedBy[by]) }

// firstByte ends the request's preemptible time as its first byte is
// about to go to the client. It reports false when the request was
// preempted first (failPreempted answers it). A stream stays preemptible
// to its end under classes.mid_stream_eviction.
func (x *exchange) firstByte() bool {
	if x.stream && x.st.cfg.Classes.MidStreamEviction {
		return true
	}
	if x.permit.Disarm() {
		x.cls.armed = false
		return true
	}
	return false
}

// failPreempted answers a request preempted before its first byte: 503
// with Retry-After, X-Infergate-Refusal and X-Infergate-Preempted.
func (x *exchange) failPreempted(rc *fasthttp.RequestCtx) {
	if x.er != nil {
		x.putReader(x.er)
	}
	x.fail(rc, x.preemptedErr())
}

// preemptedErr is the request's preemption error: its context's cause
// when the cancel already ran, else one naming the class that took it.
func (x *exchange) preemptedErr() error {
	if c := x.ctx.Cause(); errors.Is(c, errPreempted) {
		return c
	}
	by, _ := x.permit.PreemptedBy()
	return errPreemptedBy[by]
}

// refusalHeaders names why admission refused the request (hdrRefusal,
// and hdrPreempted with the class that took its slot) and restates its
// class on an answer written afresh.
func (x *exchange) refusalHeaders(rc *fasthttp.RequestCtx, err error) {
	why := refusalReason(err)
	if why == "" {
		return
	}
	x.cls.refusal = why
	h := &rc.Response.Header
	h.Set(hdrRefusal, why)
	if by, ok := preemptedBy(err); ok {
		h.Set(hdrPreempted, by.String())
	}
	if x.cls.on {
		h.Set(hdrClass, x.cls.class.String())
	}
}

// refusalReason is the reason of an admission refusal, "" for any other
// error.
func refusalReason(err error) string {
	switch {
	case errors.Is(err, errPreempted):
		return "preempted"
	case !errors.Is(err, errShed):
		return ""
	case errors.Is(err, shaping.ErrShed):
		return "shed"
	case errors.Is(err, shaping.ErrSharedDown):
		return "redis_down"
	case errors.Is(err, shaping.ErrTenantCap):
		return "tenant_cap"
	case errors.Is(err, shaping.ErrClassCap):
		return "class_cap"
	case errors.Is(err, shaping.ErrQueueTimeout):
		return "queue_timeout"
	}
	return "queue_full"
}

// echoTier sets a plain JSON answer's service_tier to the class served,
// for a request that set service_tier (OpenAI echoes the tier it served).
// A stream is never held back for it: there the header is the echo.
func (x *exchange) echoTier(body []byte) []byte {
	b := bytes.TrimLeft(body, " \t\r\n")
	if len(b) == 0 || b[0] != '{' || !json.Valid(body) {
		return body
	}
	return openai.SetMember(body, "service_tier", openai.AppendJSONString(nil, x.cls.class.String()))
}
