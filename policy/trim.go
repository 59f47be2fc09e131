package policy

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/infergate/infergate/openai"
)

// alwaysKept reports whether a message of this role survives every trim.
func alwaysKept(role string) bool { return role == "system" || role == "developer" }

// dropOldest keeps every system and developer message and as many of the
// newest turns as fit in budget, dropping whole older turns. A turn is a
// user message and everything after it up to the next user message, so an
// assistant's tool calls and their results are in one turn and go
// together, and what is left still begins with a user turn. It returns
// nil when even the newest turn does not fit.
func dropOldest(msgs []message, budget int) []message {
	for _, m := range msgs {
		if alwaysKept(m.role) {
			budget -= m.tokens
		}
	}
	// Walk back turn by turn; cut is the first message kept.
	cut := len(msgs)
	used := 0
	for end := len(msgs); end > 0; {
		start := end - 1
		for start > 0 && msgs[start].role != "user" {
			start--
		}
		t := 0
		for _, m := range msgs[start:end] {
			if !alwaysKept(m.role) {
				t += m.tokens
			}
		}
		if used+t > budget {
			break
		}
		used += t
		cut = start
		end = start
	}
	cut = pastOrphans(msgs, cut)
	if cut == len(msgs) {
		return nil
	}
	kept := make([]message, 0, len(msgs)-cut+4)
	for _, m := range msgs[:cut] {
		if alwaysKept(m.role) {
			kept = append(kept, m)
		}
	}
	return append(kept, msgs[cut:]...)
}

// pastOrphans moves cut forward, a turn at a time, while a tool result at
// or after it answers a call made before it (a conversation whose calls
// and results straddle a user message): no result is kept without its call.
func pastOrphans(msgs []message, cut int) int {
	for cut < len(msgs) {
		dropped := map[string]bool{}
		for _, m := range msgs[:cut] {
			for _, id := range m.calls {
				dropped[id] = true
			}
		}
		orphan := false
		for _, m := range msgs[cut:] {
			if m.role == "tool" && dropped[m.callID] {
				orphan = true
				break
			}
		}
		if !orphan {
			return cut
		}
		cut++
		for cut < len(msgs) && msgs[cut].role != "user" {
			cut++
		}
	}
	return cut
}

// truncateMarker stands where the middle of a shortened message was.
const truncateMarker = "\n…\n"

// truncateMiddle shortens the longest message with text content, keeping
// its head and tail, until the messages fit in budget. It returns nil when
// no message can be shortened enough.
func truncateMiddle(arr []byte, msgs []message, budget int, c *counter) ([]message, error) {
	total := 0
	longest := -1
	for i, m := range msgs {
		total += m.tokens
		if m.textLen > 0 && (longest < 0 || m.tokens > msgs[longest].tokens) {
			longest = i
		}
	}
	if longest < 0 {
		return nil, nil
	}
	m := msgs[longest]
	text, err := openai.Unquote(arr[m.text.Start:m.text.End])
	if err != nil {
		return nil, invalid("messages[%d].content: %v", longest, err)
	}
	rest := total - m.contentTokens // everything but this content
	allowed := budget - rest
	if allowed-c.text(truncateMarker) <= 0 {
		return nil, nil
	}
	// Cut by bytes in proportion, aiming a little low as tokens are not
	// spread evenly, then count; another round when it still does not fit.
	keep := int(float64(len(text)) * float64(allowed) / float64(max(m.contentTokens, 1)) * 0.97)
	for range 6 {
		short := headTail(text, keep)
		n := c.text(short)
		if n <= allowed {
			m.tokens += n - m.contentTokens
			m.contentTokens = n
			m.edit = appendJSONString(nil, short)
			out := append([]message(nil), msgs...)
			out[longest] = m
			return out, nil
		}
		keep = int(float64(keep)*float64(allowed)/float64(n)*0.97) - 4
		if keep <= 0 {
			break
		}
	}
	return nil, nil
}

// appendJSONString appends s as a JSON string, leaving <, > and & as they
// are (json.Marshal would escape them).
func appendJSONString(dst []byte, s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
}

// headTail keeps about keep bytes of s: its head and its tail, split at
// character boundaries, with the marker between.
func headTail(s string, keep int) string {
	if keep >= len(s) {
		return s
	}
	h := keep / 2
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	t := len(s) - (keep - h)
	for t < len(s) && !utf8.RuneStart(s[t]) {
		t++
	}
	return s[:h] + truncateMarker + s[t:]
}

// encodeMessages writes the kept messages as a JSON array: each as it was
// received, but for a shortened content.
func encodeMessages(arr []byte, kept []message) []byte {
	n := 2
	for _, m := range kept {
		n += m.raw.End - m.raw.Start + 1 + len(m.edit)
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, m := range kept {
		if i > 0 {
			out = append(out, ',')
		}
		if m.edit != nil {
			out = append(out, arr[m.raw.Start:m.text.Start]...)
			out = append(out, m.edit...)
			out = append(out, arr[m.text.End:m.raw.End]...)
			continue
		}
		out = append(out, arr[m.raw.Start:m.raw.End]...)
	}
	return append(out, ']')
}
