package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/policy"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The backend's own count of a prompt (tokenizer "backend"). Servers
// count a chat request in different dialects, and one answers another's
// form wrongly rather than with an error: llama.cpp's /tokenize takes
// vLLM's messages form and answers 200 {"tokens":[]}. So each backend's
// form is learned once, by trying them in turn, and kept: a request costs
// one count, not three.
//
// The form is learned with the gateway's own probe (one user message,
// "hi", with the model the backend serves), never with a client's
// request: a client's body that the server rejects (vLLM's 422 for a
// message part its validation refuses) says nothing about the server, and
// must not switch exact counting off for every tenant. Once a form is
// known, a count that fails (a 422, an answer that is not JSON, no count)
// fails that request alone: it is estimated, counted and, now and then,
// logged. Only the probe can say the server stopped speaking the form
// (replaced, upgraded), and the forms are then learned again: it is asked
// after a 404, 405 or 501 on the learned form, and at most once a
// countRelearn after an answer that was no count. A backend that speaks none is estimated
// for countRelearn before it is probed again.

// countForm is a dialect of counting a chat request's prompt.
type countForm int32

const (
	// formUnknown: not learned yet; the forms are tried in turn.
	formUnknown countForm = iota
	// formTokenize: POST /tokenize {"model","messages","tools",
	// "add_generation_prompt":true} → {"count":N} or {"tokens":[…]}
	// (vLLM, SGLang, the simulator).
	formTokenize
	// formInputTokens: the request itself to POST
	// /v1/chat/completions/input_tokens (or /v1/responses/input_tokens)
	// → {"input_tokens":N} (llama.cpp's server).
	formInputTokens
	// formApplyTemplate: POST /apply-template → {"prompt":"…"}, then
	// POST /tokenize {"content":"…","add_special":true} → {"tokens":[…]}
	// (llama.cpp's server before input_tokens; two round trips).
	formApplyTemplate
	// formNone: no form gave the probe a count; the estimate, until
	// countRelearn.
	formNone
	numCountForms
)

// countForms are the forms tried, in order, while a backend's is unknown.
var countForms = [...]countForm{formTokenize, formInputTokens, formApplyTemplate}

// String names a form for logs and the metric's source label.
func (f countForm) String() string {
	switch f {
	case formTokenize:
		return "tokenize"
	case formInputTokens:
		return "input_tokens"
	case formApplyTemplate:
		return "apply_template"
	case formNone:
		return "estimate"
	}
	return "unknown"
}

// countRelearn is how long a backend that gave no count in any form is
// estimated before its forms are tried again (it may have been upgraded
// or replaced); countWarnEvery spaces the warnings of counts that failed
// on a backend whose form is known.
const (
	countRelearn   = time.Minute
	countWarnEvery = time.Minute
)

// errNotThisForm: the answer holds no count (a 422, a 200 answer that is
// not JSON or holds no count). For the probe, the backend does not speak
// the form; for a client's request, that request was not counted.
// errFormGone (which is also errNotThisForm): the route is not there (404,
// 405, 501), the one answer that may say a learned form stopped working.
var (
	errNotThisForm = errors.New("the backend does not count in this form")
	errFormGone    = fmt.Errorf("%w: no such route", errNotThisForm)
)

// countProbeContent is the probe's one user message.
const countProbeContent = "hi"

// countProbe is the gateway's own request to count, with model the name
// the backend serves: what a form is learned and confirmed with.
func countProbe(model string) policy.ExactInput {
	msgs := `[{"role":"user","content":"` + countProbeContent + `"}]`
	body := openai.AppendJSONString([]byte(`{"model":`), model)
	body = append(append(append(body, `,"messages":`...), msgs...), '}')
	return policy.ExactInput{Messages: []byte(msgs), Body: body}
}

// tokenCounts is a backend's learned form and its counts by source.
type tokenCounts struct {
	form     atomic.Int32 // a countForm
	retry    atomic.Int64 // unix nanoseconds: formNone holds until then
	lastWarn atomic.Int64 // unix nanoseconds of the last failure logged
	lastGone atomic.Int64 // of the last "no longer counts" logged
	// lastCheck: of the last probe that checked the form after a
	// request's count that was not a count.
	lastCheck atomic.Int64
	// by counts by the form that gave them; [formNone] the requests that
	// fell back to the estimate.
	by [numCountForms]atomic.Int64
}

// countClient is a backend's client for counts: its own pool (as many
// connections as the backend's requests may hold), whose idle
// connections close before a server's keep-alive (llama.cpp's is 5 s)
// would. Counts are sent by b.fetch (internal/roundtrip), which takes no
// pooled connection the server closed, and sends one that failed on a
// reused connection again on a new one.
func countClient(hc *fasthttp.HostClient) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr: hc.Addr, Dial: hc.Dial, MaxConns: hc.MaxConns, MaxIdleConnDuration: 4 * time.Second,
		MaxResponseBodySize: 16 << 20, NoDefaultUserAgentHeader: true, DisableHeaderNamesNormalizing: true,
		RetryIfErr: func(_ *fasthttp.Request, attempts int, _ error) (bool, bool) { return false, attempts < 2 },
	}
}

// countTokens counts a prompt in the backend's form, learning the form
// first (with the probe). An error means no exact count: the policy keeps
// its estimate, which is counted (source estimate) and, now and then,
// logged.
func (b *backend) countTokens(model string, in policy.ExactInput, timeout time.Duration, log *slog.Logger) (int, error) {
	c := &b.counts
	now := time.Now()
	f := countForm(c.form.Load())
	if f == formNone && now.UnixNano() >= c.retry.Load() {
		c.form.CompareAndSwap(int32(formNone), int32(formUnknown))
		f = formUnknown
	}
	if f == formNone {
		c.by[formNone].Add(1)
		return 0, fmt.Errorf("count %s: no form of counting answered; estimating until %s", b.name, time.Unix(0, c.retry.Load()).UTC().Format(time.TimeOnly))
	}
	if f == formUnknown {
		var err error
		if f, err = b.learnCountForm(model, timeout, log); err != nil {
			c.by[formNone].Add(1)
			return 0, err
		}
	}
	n, err := b.countBy(f, model, in, timeout)
	if err == nil {
		c.by[f].Add(1)
		return n, nil
	}
	// The server may have stopped speaking the form (replaced,
	// upgraded): the probe says whether, and the form it learns then
	// counts this request. A 404 asks the probe every time; an answer
	// that is not a count (a client can provoke one) asks it at most once
	// per countRelearn, which is how a vLLM replaced by a llama.cpp, whose
	// /tokenize answers 200 {"tokens":[]}, is found.
	if errors.Is(err, errFormGone) || errors.Is(err, errNotThisForm) && c.checkDue(now) {
		if _, perr := b.countBy(f, model, countProbe(model), timeout); errors.Is(perr, errNotThisForm) {
			warnEvery(&c.lastGone, now, log, "backend no longer counts tokens in its form; trying the others", "backend", b.name, "form", f.String(), "err", perr)
			if c.form.CompareAndSwap(int32(f), int32(formUnknown)) {
				if nf, lerr := b.learnCountForm(model, timeout, log); lerr == nil && nf != f {
					if n, err := b.countBy(nf, model, in, timeout); err == nil {
						c.by[nf].Add(1)
						return n, nil
					}
				}
			}
		}
	}
	c.by[formNone].Add(1)
	warnEvery(&c.lastWarn, now, log, "backend token count failed; the prompt is estimated", "backend", b.name, "form", f.String(), "err", err)
	return 0, err
}

// checkDue says whether the probe may check the form now, after an answer
// that was no count: not within countRelearn of the last check.
func (c *tokenCounts) checkDue(now time.Time) bool {
	last := c.lastCheck.Load()
	return now.UnixNano()-last >= int64(countRelearn) && c.lastCheck.CompareAndSwap(last, now.UnixNano())
}

// warnEvery logs msg unless the warning last was (unix nanoseconds) less
// than countWarnEvery ago.
func warnEvery(lastP *atomic.Int64, now time.Time, log *slog.Logger, msg string, args ...any) {
	if last := lastP.Load(); now.UnixNano()-last >= int64(countWarnEvery) && lastP.CompareAndSwap(last, now.UnixNano()) {
		log.Warn(msg, args...)
	}
}

// learnCountForm tries the forms in turn with the probe and keeps the
// first that gives a count; none gives formNone until countRelearn. A
// server that fails the probe otherwise (a 500, unreachable) leaves the
// form unknown, to be learned on a later request.
func (b *backend) learnCountForm(model string, timeout time.Duration, log *slog.Logger) (countForm, error) {
	c := &b.counts
	probe := countProbe(model)
	var errs []error
	for _, f := range countForms {
		_, err := b.countBy(f, model, probe, timeout)
		if err == nil {
			if old := countForm(c.form.Swap(int32(f))); old != f {
				log.Info("backend counts tokens", "backend", b.name, "form", f.String())
			}
			return f, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", f, err))
		if !errors.Is(err, errNotThisForm) {
			// The server failed, or could not be reached: whether it
			// speaks the form is not known, and no other is tried.
			return formUnknown, fmt.Errorf("count %s: %w", b.name, errors.Join(errs...))
		}
	}
	c.retry.Store(time.Now().Add(countRelearn).UnixNano())
	if old := countForm(c.form.Swap(int32(formNone))); old != formNone {
		log.Warn("backend gives no token count in any form; prompts are estimated", "backend", b.name, "retry_in", countRelearn.String(), "err", errors.Join(errs...))
	}
	return formNone, fmt.Errorf("count %s: %w", b.name, errors.Join(errs...))
}

// countBy asks the backend for a count in form f. model is the name the
// backend serves, in.Body the request with that name.
func (b *backend) countBy(f countForm, model string, in policy.ExactInput, timeout time.Duration) (int, error) {
	switch f {
	case formTokenize:
		body := openai.AppendJSONString([]byte(`{"model":`), model)
		body = append(body, `,"add_generation_prompt":true,"messages":`...)
		body = append(body, in.Messages...)
		if in.Tools != nil {
			body = append(append(body, `,"tools":`...), in.Tools...)
		}
		var r struct {
			Count  *int              `json:"count"`
			Tokens []json.RawMessage `json:"tokens"`
		}
		if err := b.countCall("/tokenize", append(body, '}'), timeout, &r); err != nil {
			return 0, err
		}
		switch {
		case r.Count != nil && *r.Count > 0:
			return *r.Count, nil
		case len(r.Tokens) > 0:
			return len(r.Tokens), nil
		}
		// llama.cpp: 200 {"tokens":[]}, its answer to a form it ignores.
		return 0, fmt.Errorf("%w: no tokens for a prompt of messages", errNotThisForm)
	case formInputTokens:
		path := "/v1/chat/completions/input_tokens"
		if in.Responses {
			path = "/v1/responses/input_tokens"
		}
		var r struct {
			InputTokens *int `json:"input_tokens"`
		}
		if err := b.countCall(path, in.Body, timeout, &r); err != nil {
			return 0, err
		}
		if r.InputTokens == nil || *r.InputTokens <= 0 {
			return 0, fmt.Errorf("%w: no input_tokens in the answer", errNotThisForm)
		}
		return *r.InputTokens, nil
	case formApplyTemplate:
		chat := in.Body
		if in.Responses {
			chat = append(append([]byte(`{"messages":`), in.Messages...), '}')
		}
		var t struct {
			Prompt *string `json:"prompt"`
		}
		if err := b.countCall("/apply-template", chat, timeout, &t); err != nil {
			return 0, err
		}
		if t.Prompt == nil || *t.Prompt == "" {
			return 0, fmt.Errorf("%w: no prompt in /apply-template's answer", errNotThisForm)
		}
		// As llama.cpp counts a prompt it serves: special tokens added
		// (the BOS) and parsed (the template's markers).
		body := openai.AppendJSONString([]byte(`{"add_special":true,"parse_special":true,"content":`), *t.Prompt)
		var r struct {
			Tokens []json.RawMessage `json:"tokens"`
		}
		if err := b.countCall("/tokenize", append(body, '}'), timeout, &r); err != nil {
			return 0, err
		}
		if len(r.Tokens) == 0 {
			return 0, fmt.Errorf("%w: no tokens for the templated prompt", errNotThisForm)
		}
		return len(r.Tokens), nil
	}
	return 0, fmt.Errorf("count form %d", f)
}

// countCall posts body to path on b and decodes a 200 answer into v.
func (b *backend) countCall(path string, body []byte, timeout time.Duration, v any) error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	b.target(req, path, "")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if b.auth != "" {
		req.Header.Set("Authorization", b.auth)
	}
	req.SetBodyRaw(body)
	if err := b.fetch(b.tc, req, resp, timeout); err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	switch c := resp.StatusCode(); c {
	case fasthttp.StatusOK:
	case fasthttp.StatusNotFound, fasthttp.StatusMethodNotAllowed, fasthttp.StatusNotImplemented:
		return fmt.Errorf("%w: POST %s: status %d", errFormGone, path, c)
	case fasthttp.StatusUnprocessableEntity:
		// A FastAPI server's answer to a body not of the route's schema
		// (SGLang's /tokenize takes a prompt, not messages), or to a
		// message its validation rejects.
		return fmt.Errorf("%w: POST %s: status %d: %.200s", errNotThisForm, path, c, resp.Body())
	default:
		return fmt.Errorf("POST %s: status %d: %.200s", path, c, resp.Body())
	}
	if err := json.Unmarshal(resp.Body(), v); err != nil {
		return fmt.Errorf("%w: POST %s: %v", errNotThisForm, path, err)
	}
	return nil
}

// observeTokenCounts registers each backend's prompts counted, by the form
// that counted them.
func (g *Gateway) observeTokenCounts(meter metric.Meter) error {
	in := instruments{meter: meter}
	counts := in.counter("infergate.backend.token_counts", "{request}", "Prompts counted for tokenizer backend, by source: the backend's form that counted it (tokenize, input_tokens, apply_template) or estimate (no exact count: the policy's estimate was used).")
	return in.register(func(_ context.Context, o metric.Observer) error {
		for _, p := range g.state.Load().pools {
			for _, b := range p.backends {
				for f := formTokenize; f < numCountForms; f++ {
					if n := b.counts.by[f].Load(); n > 0 {
						o.ObserveInt64(counts, n, backendAttrs(p, b, attribute.String("source", f.String())))
					}
				}
			}
		}
		return nil
	})
}
