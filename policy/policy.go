package policy

import (
	"fmt"
	"slices"

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
	// not counted (Estimated, below, when the count is an estimate).
	InputTokens int
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
	// Estimated is set when InputTokens is an estimate. (With the other
	// flags, in the word they share: a Decision is part of every request
	// the gateway serves.)
	Estimated bool
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

func invalidField(field, what string) error {
	return &Error{Status: 400, Type: openai.TypeInvalidRequest, Code: "invalid_value", Message: field + ": " + what}
}
