package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/infergate/infergate/openai"
)

// Policy is a compiled Config. It is immutable and safe for concurrent
// use; a reload compiles a new one.
type Policy struct {
	required bool
	keys     keyring
	tenants  map[string]*tenantPolicy
	models   map[string]*modelPolicy
	def      modelPolicy // every model not listed
	usage    bool
	toks     tokenizers
}

type tenantPolicy struct {
	models []string // sorted; empty: all
	limits Limits
}

type modelPolicy struct {
	limits Limits
	count  counter
}

// Compile checks c and builds its Policy, loading every tokenizer it names
// (reusing prev's, which may be nil). A tokenizer that cannot be loaded
// refuses the config, naming the model.
func Compile(c Config, prev *Policy) (*Policy, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	p := &Policy{required: c.Auth.Required, keys: newKeyring(c.Tenants), usage: c.StreamUsage,
		tenants: map[string]*tenantPolicy{}, models: map[string]*modelPolicy{}, toks: tokenizers{}}
	if prev != nil {
		for k, v := range prev.toks {
			p.toks[k] = v
		}
	}
	for name, t := range c.Tenants {
		tp := &tenantPolicy{models: slices.Sorted(slices.Values(t.Models)), limits: t.Limits}
		p.tenants[name] = tp
	}
	def, err := p.model("policy", Model{Tokenizer: c.Tokenizer, Template: c.Template}, c)
	if err != nil {
		return nil, err
	}
	p.def = *def
	for name, m := range c.Models {
		if m.Tokenizer == "" {
			m.Tokenizer = c.Tokenizer
		}
		if m.Template == "" {
			m.Template = c.Template
		}
		mp, err := p.model("policy.models."+name, m, c)
		if err != nil {
			return nil, err
		}
		p.models[name] = mp
	}
	return p, nil
}

func (p *Policy) model(field string, m Model, c Config) (*modelPolicy, error) {
	tn := m.Tokenizer
	if tn == "" {
		tn = TokenizerEstimate
	}
	tok, err := p.toks.get(tn)
	if err != nil {
		return nil, fmt.Errorf("%s.tokenizer: %w", field, err)
	}
	tpl := m.Template
	if tpl == "" {
		tpl = "openai"
	}
	return &modelPolicy{
		limits: m.Limits.merge(c.Limits),
		count: counter{tok: tok, tpl: templates[tpl], name: tn, cache: newCountCache(),
			estimated: tn == TokenizerEstimate || tn == TokenizerBackend, backend: tn == TokenizerBackend},
	}, nil
}

// Error is a request the policy refuses: the HTTP status, and the OpenAI
// error type and code the client gets.
type Error struct {
	Status  int
	Type    string
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Identify names the tenant of a request's Authorization header value.
// With auth required, a missing or unknown key is an Error (401
// invalid_api_key) that names no key.
func (p *Policy) Identify(authorization []byte) (Identity, error) {
	id := p.keys.identify(authorization)
	if p.required && !id.Known {
		msg := "Incorrect API key provided. Send a key of this gateway as `Authorization: Bearer KEY`."
		if len(bearerKey(authorization)) == 0 {
			msg = "You didn't provide an API key. Send a key of this gateway as `Authorization: Bearer KEY`."
		}
		return id, &Error{Status: 401, Type: openai.TypeInvalidRequest, Code: "invalid_api_key", Message: msg}
	}
	return id, nil
}

// Needs reports whether a request of this tenant and model can be changed
// or refused by the policy at all: when it cannot (no limit, no model
// list, no usage to ask for), the gateway skips Apply.
func (p *Policy) Needs(tenant, model string, stream bool) bool {
	t := p.tenants[tenant]
	if t != nil && (len(t.models) > 0 || t.limits != Limits{}) {
		return true
	}
	m := p.modelOf(model)
	return m.limits != Limits{} || p.usage && stream
}

// UsesBackend reports whether a model's tokens are counted by its
// backend's /tokenize (Request.Exact).
func (p *Policy) UsesBackend(model string) bool { return p.modelOf(model).count.backend }

func (p *Policy) modelOf(model string) *modelPolicy {
	if m, ok := p.models[model]; ok {
		return m
	}
	return &p.def
}

// Request is what Apply reads of a request.
type Request struct {
	Tenant string
	// Model is the name the client sent.
	Model string
	Body  []byte
	Env   openai.Envelope
	// Chat is set for the chat completions route, Completion for the
	// legacy completions route. Only chat messages are counted and
	// trimmed; only these two routes get output caps and usage; any route
	// gets the tenant's model list.
	Chat, Completion bool
	// Responses is set for the Responses API's route: its input and
	// instructions are counted and trimmed as chat messages are, its
	// max_output_tokens capped.
	Responses bool
	// Count asks for the input tokens even when no limit needs them
	// (token caps of admission).
	Count bool
	// Exact, when set, counts the prompt exactly (the backend's own
	// count) for models whose tokenizer is "backend".
	Exact func(ExactInput) (int, error)
}

// ExactInput is what Request.Exact counts: the prompt as chat messages,
// and the request itself for a server that counts whole requests
// (llama.cpp's /v1/chat/completions/input_tokens and
// /v1/responses/input_tokens), whose template also renders the tools,
// tool_choice and chat_template_kwargs.
type ExactInput struct {
	// Messages is the chat messages array: a chat request's as sent, a
	// Responses request's instructions and input as the messages they
	// amount to (openai.InputMessages).
	Messages []byte
	// Tools is a chat request's tools array, nil without one (a
	// Responses request's tools have another shape and are not here).
	Tools []byte
	// Body is the request as received; Responses says it is a Responses
	// API request, not a chat completion.
	Body      []byte
	Responses bool
}

// Decision is what the policy made of a request.
type Decision struct {
	// Body is the rewritten body; nil means forward the bytes received.
	Body []byte
	// InputTokens is the prompt as counted (after any trimming); 0 when
	// not counted. Estimated is set when the count is an estimate.
	InputTokens int
	Estimated   bool
	Tokenizer   string
	// TrimmedTokens and TrimmedMessages are what trimming removed.
	TrimmedTokens, TrimmedMessages int
	// MaxTokens is the output limit the backend gets, 0 when none.
	MaxTokens int
	// ClampedFrom is set when the policy set the output limit: the limit
	// the client asked for, or -1 when it asked for none. A finish_reason
	// "length" of such a request is the policy's doing.
	ClampedFrom int
	Clamped     bool
	// StripUsage is set when the gateway asked the backend for the
	// stream's usage chunk on its own: the relay removes it.
	StripUsage bool
	// UnknownHistory is set when the request continues a stored response
	// (the Responses API's previous_response_id): the backend prepends a
	// history the gateway never saw, so InputTokens counts only what was
	// sent and no limit can hold the whole.
	UnknownHistory bool
}

// Apply decides a request of a tenant Identify named: refuses a model the
// tenant may not use (403 model_not_allowed), counts and trims the
// context, caps the output and asks for usage. It rewrites only the
// members it changes, leaving every other byte as received; a request it
// does not change is forwarded as it came (Decision.Body nil).
func (p *Policy) Apply(r Request) (Decision, error) {
	var d Decision
	lim := Limits{}
	if t := p.tenants[r.Tenant]; t != nil {
		if len(t.models) > 0 {
			if _, ok := slices.BinarySearch(t.models, r.Model); !ok {
				return d, &Error{Status: 403, Type: openai.TypeInvalidRequest, Code: "model_not_allowed",
					Message: fmt.Sprintf("tenant %s may not use model `%s`", r.Tenant, r.Model)}
			}
		}
		lim = t.limits
	}
	m := p.modelOf(r.Model)
	lim = lim.merge(m.limits)
	if r.Env.Duplicate != "" && (r.Chat || r.Completion || r.Responses) {
		return d, invalidField(r.Env.Duplicate, "the member is sent more than once; parsers disagree on which copy counts, so send it once")
	}

	var ed edits
	d.UnknownHistory = r.Responses && r.Env.ContinuesResponse(r.Body)
	if (r.Chat || r.Responses) && (lim.MaxInputTokens > 0 || r.Count) {
		input := p.input
		if r.Responses {
			input = p.responsesInput
		}
		if err := input(r, m, lim, &d, &ed); err != nil {
			return d, err
		}
	}
	if !r.Chat && !r.Completion && !r.Responses {
		return d, nil
	}
	if err := p.output(r, lim, &d, &ed); err != nil {
		return d, err
	}
	if p.usage && r.Env.Stream && !r.Responses { // a Responses stream always ends with its usage
		p.askUsage(r, &d, &ed)
	}
	if len(ed) > 0 {
		d.Body = ed.apply(r.Body)
	}
	return d, nil
}

// input counts the messages and trims them to the limit.
func (p *Policy) input(r Request, m *modelPolicy, lim Limits, d *Decision, ed *edits) error {
	mf := r.Env.Messages
	if !mf.Present() {
		return invalidField("messages", "missing")
	}
	arr := mf.Of(r.Body)
	// No token is shorter than a byte and every message's JSON framing
	// ({"role":"user","content":""}, 28 bytes) outweighs its template's:
	// a messages array of fewer bytes than the limit, with the tools and
	// the reply's priming, is within it uncounted.
	if !r.Count && len(arr)+len(r.Env.Tools.Of(r.Body))+m.count.tpl.reply <= lim.MaxInputTokens {
		return nil
	}
	fixed := m.count.tpl.reply
	if tools := r.Env.Tools.Of(r.Body); tools != nil {
		fixed += m.count.json(tools)
	}
	var exact func() (int, error)
	if m.count.backend && r.Exact != nil {
		exact = func() (int, error) {
			return r.Exact(ExactInput{Messages: arr, Tools: r.Env.Tools.Of(r.Body), Body: r.Body})
		}
	}
	kept, err := countAndTrim(arr, fixed, exact, m, lim, d)
	if err != nil || kept == nil {
		return err
	}
	ed.replace(mf.Value, encodeMessages(arr, kept))
	return nil
}

// countAndTrim counts the messages of arr, with fixed tokens beside them
// (tools, the reply's priming, instructions), into d: estimated, or the
// backend's count when exact gives one (the per-message counts scaled to
// it, so trimming divides it in their proportions). Over the limit, it
// trims them by its strategy and returns the messages kept; nil when they
// fit. A request that cannot be trimmed to fit is refused.
func countAndTrim(arr []byte, fixed int, exact func() (int, error), m *modelPolicy, lim Limits, d *Decision) ([]message, error) {
	msgs, err := parseMessages(arr, &m.count)
	if err != nil {
		return nil, err
	}
	total := fixed
	for _, msg := range msgs {
		total += msg.tokens
	}
	d.Tokenizer, d.Estimated = m.count.name, m.count.estimated
	if exact != nil {
		if n, err := exact(); err == nil && n > 0 {
			scale(msgs, n-fixed)
			total, d.Estimated = n, false
		}
	}
	d.InputTokens = total
	if lim.MaxInputTokens == 0 || total <= lim.MaxInputTokens {
		return nil, nil
	}
	var kept []message
	switch lim.Trim {
	case DropOldest:
		kept = dropOldest(msgs, lim.MaxInputTokens-fixed)
	case TruncateMiddle:
		if kept, err = truncateMiddle(arr, msgs, lim.MaxInputTokens-fixed, &m.count); err != nil {
			return nil, err
		}
	}
	if kept == nil {
		return nil, contextExceeded(total, lim.MaxInputTokens, lim.Trim)
	}
	after := fixed
	for _, msg := range kept {
		after += msg.tokens
	}
	d.TrimmedTokens, d.TrimmedMessages = total-after, len(msgs)-len(kept)
	d.InputTokens = after
	return kept, nil
}

// scale makes the messages' counts sum to total, in their proportions.
func scale(msgs []message, total int) {
	sum := 0
	for _, m := range msgs {
		sum += m.tokens
	}
	if sum <= 0 || total <= 0 {
		return
	}
	for i := range msgs {
		msgs[i].tokens = msgs[i].tokens * total / sum
	}
}

func contextExceeded(sent, allowed int, s Strategy) error {
	msg := fmt.Sprintf("This request's messages are %d tokens; this gateway allows at most %d. Shorten the messages.", sent, allowed)
	switch s {
	case DropOldest:
		msg = fmt.Sprintf("This request's messages are %d tokens and cannot be trimmed to the %d allowed by dropping older turns: the system messages and the newest turn alone are longer. Shorten the messages.", sent, allowed)
	case TruncateMiddle:
		msg = fmt.Sprintf("This request's messages are %d tokens and cannot be trimmed to the %d allowed by shortening the longest message. Shorten the messages.", sent, allowed)
	}
	return &Error{Status: 400, Type: openai.TypeInvalidRequest, Code: "context_length_exceeded", Message: msg}
}

func invalidField(field, what string) error {
	return &Error{Status: 400, Type: openai.TypeInvalidRequest, Code: "invalid_value", Message: field + ": " + what}
}

// output clamps max_tokens and max_completion_tokens (a Responses
// request's max_output_tokens) to the ceiling and sets a default when the
// request has none.
func (p *Policy) output(r Request, lim Limits, d *Decision, ed *edits) error {
	ceiling, def := lim.MaxOutputTokens, lim.DefaultOutputTokens
	if def == 0 {
		def = ceiling
	}
	if ceiling > 0 && def > ceiling {
		def = ceiling
	}
	asked, seen := -1, false
	type limitField struct {
		name  string
		field openai.Field
	}
	fields := []limitField{{"max_completion_tokens", r.Env.MaxCompletionTokens}, {"max_tokens", r.Env.MaxTokens}}
	setName, set := "max_tokens", r.Env.MaxTokens
	if r.Responses {
		fields = []limitField{{"max_output_tokens", r.Env.MaxOutputTokens}}
		setName, set = "max_output_tokens", r.Env.MaxOutputTokens
	}
	for _, f := range fields {
		v := f.field.Of(r.Body)
		if v == nil || string(v) == "null" {
			continue
		}
		n, err := strconv.ParseFloat(string(v), 64)
		if err != nil || n < 0 || n != float64(int64(n)) {
			return invalidField(f.name, "must be a non-negative integer")
		}
		seen = true
		if asked < 0 || int(n) < asked {
			asked = int(n)
		}
		if ceiling > 0 && n > float64(ceiling) {
			ed.replace(f.field.Value, strconv.AppendInt(nil, int64(ceiling), 10))
			d.Clamped = true
		}
	}
	switch {
	case seen && d.Clamped:
		d.MaxTokens, d.ClampedFrom = ceiling, asked
	case seen:
		d.MaxTokens = asked
	case def > 0:
		// Neither field (or only nulls): set max_tokens (a Responses
		// request's max_output_tokens), replacing a null.
		v := strconv.AppendInt(nil, int64(def), 10)
		if set.Present() {
			ed.replace(set.Value, v)
		} else {
			ed.insert(r.Body, append([]byte(`"`+setName+`":`), v...))
		}
		d.MaxTokens, d.Clamped, d.ClampedFrom = def, true, -1
	}
	return nil
}

// askUsage sets stream_options.include_usage on a stream that does not
// ask for it, and has the relay remove the usage chunk it brings.
func (p *Policy) askUsage(r Request, d *Decision, ed *edits) {
	so := r.Env.StreamOptions
	v := so.Of(r.Body)
	if v == nil || string(v) == "null" {
		if so.Present() {
			ed.replace(so.Value, []byte(`{"include_usage":true}`))
		} else {
			ed.insert(r.Body, []byte(`"stream_options":{"include_usage":true}`))
		}
		d.StripUsage = true
		return
	}
	var iu openai.Field
	if !openai.EachMember(v, func(key []byte, f openai.Field) bool {
		if openai.KeyIs(key, "include_usage") {
			iu = f
		}
		return true
	}) {
		return // not an object: the backend will say so
	}
	base := so.Value.Start
	switch {
	case !iu.Present():
		// After the opening brace, with a comma when members follow.
		at := base + 1
		ins := []byte(`"include_usage":true`)
		if !emptyObject(v) {
			ins = append(ins, ',')
		}
		ed.add(openai.Span{Start: at, End: at}, ins)
	case string(iu.Of(v)) != "true":
		ed.replace(openai.Span{Start: base + iu.Value.Start, End: base + iu.Value.End}, []byte("true"))
	default:
		return // the client asked for it
	}
	d.StripUsage = true
}

func emptyObject(v []byte) bool {
	empty := true
	openai.EachMember(v, func([]byte, openai.Field) bool { empty = false; return false })
	return empty
}

// responsesInput counts a Responses request's instructions and input and
// trims the input to the limit, with the chat strategies: the input items
// are the messages (a function call and its output one turn, as a tool
// call and its result are), the instructions a system message always
// kept, a string input one user message.
func (p *Policy) responsesInput(r Request, m *modelPolicy, lim Limits, d *Decision, ed *edits) error {
	in := r.Env.Input
	raw := in.Of(r.Body)
	if raw == nil || string(raw) == "null" {
		return invalidField("input", "missing")
	}
	fixed := m.count.tpl.reply
	var instructions *string
	if v := r.Env.Instructions.Of(r.Body); v != nil && v[0] == '"' {
		s, err := openai.Unquote(v)
		if err != nil {
			return invalidField("instructions", err.Error())
		}
		instructions = &s
		fixed += m.count.text("system") + m.count.text(s) + m.count.tpl.perMessage
	}
	if tools := r.Env.Tools.Of(r.Body); tools != nil {
		fixed += m.count.json(tools)
	}
	arr, str := raw, raw[0] == '"'
	if str {
		// A string input is the user's one message.
		arr = append(append([]byte(`[{"role":"user","content":`), raw...), "}]"...)
	} else if raw[0] != '[' {
		return invalidField("input", "must be a string or an array of input items")
	}
	var exact func() (int, error)
	if m.count.backend && r.Exact != nil {
		// A backend that counts chat messages gets the instructions and
		// input as the messages they amount to.
		exact = func() (int, error) {
			chat, err := openai.InputMessages(instructions, raw)
			if err != nil {
				return 0, err
			}
			b, err := json.Marshal(chat)
			if err != nil {
				return 0, err
			}
			return r.Exact(ExactInput{Messages: b, Body: r.Body, Responses: true})
		}
	}
	kept, err := countAndTrim(arr, fixed, exact, m, lim, d)
	if err != nil || kept == nil {
		return err
	}
	if str {
		if len(kept) != 1 || kept[0].edit == nil {
			return contextExceeded(d.InputTokens+d.TrimmedTokens, lim.MaxInputTokens, lim.Trim)
		}
		ed.replace(in.Value, kept[0].edit) // the one message, shortened
		return nil
	}
	ed.replace(in.Value, encodeMessages(arr, kept))
	return nil
}
