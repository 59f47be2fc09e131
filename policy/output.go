package policy

import (
	"strconv"

	"github.com/infergate/infergate/openai"
)

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
