package policy

import (
	"bytes"
	"slices"

	"github.com/infergate/infergate/openai"
)

// edits are the changes to a body: spans replaced by new bytes. Every byte
// outside them stays as received.
type edits []edit

type edit struct {
	at  openai.Span
	new []byte
}

func (e *edits) add(at openai.Span, b []byte) { *e = append(*e, edit{at, b}) }

func (e *edits) replace(at openai.Span, b []byte) { e.add(at, b) }

// insert adds a member at the end of the top-level object body.
func (e *edits) insert(body, member []byte) {
	end := bytes.LastIndexByte(body, '}')
	b := make([]byte, 0, len(member)+1)
	b = append(b, ',')
	e.add(openai.Span{Start: end, End: end}, append(b, member...))
}

// apply returns a new body with the edits made, in order of position.
func (e edits) apply(body []byte) []byte {
	slices.SortStableFunc(e, func(a, b edit) int { return a.at.Start - b.at.Start })
	n := len(body)
	for _, x := range e {
		n += len(x.new) - (x.at.End - x.at.Start)
	}
	out := make([]byte, 0, n)
	at := 0
	for _, x := range e {
		out = append(out, body[at:x.at.Start]...)
		out = append(out, x.new...)
		at = x.at.End
	}
	return append(out, body[at:]...)
}
