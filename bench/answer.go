package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/infergate/infergate/openai"
)

// KeyHint is what a 401 or 403 tells the user: where the key comes from.
const KeyHint = "the server refused the request's credentials: a missing or wrong API key (give it with --api-key or $OPENAI_API_KEY)"

// DescribeAnswer says, in one line, what a server answered when it was not
// what an OpenAI-compatible client expected: its status and content type,
// then the cause. A 401 or 403 is the key; an OpenAI-style error body
// (a gateway's own, or the engine's) gives its message; anything else is
// shown as a short clipped snippet (an HTML page as its title), followed
// by want, what the caller expected, when want is not empty. The model
// lookup, bench's requests and probe's all describe answers here, so a
// wrong key, a web server and a gateway's 502 read the same everywhere.
func DescribeAnswer(status int, contentType string, body []byte, want string) string {
	head := fmt.Sprintf("status %d", status)
	if ct, _, _ := strings.Cut(contentType, ";"); ct != "" {
		head += ", " + strings.TrimSpace(ct)
	}
	msg := errorMessage(body)
	switch {
	case status == 401 || status == 403:
		if msg != "" {
			return fmt.Sprintf("%s: %s: %s", head, KeyHint, msg)
		}
		return head + ": " + KeyHint
	case msg != "":
		return head + ": " + msg
	}
	s := fmt.Sprintf("%s: %s", head, Snippet(body, contentType))
	if want != "" {
		s += "; want " + want
	}
	return s
}

// errorMessage is the message of an error body as OpenAI, vLLM, llama.cpp
// and infergate's gateway write it ({"error":{"message":…}}), as some
// servers do ({"error":"…"}, {"message":…}, FastAPI's {"detail":"…"}),
// clipped and on one line; "" when the body is none of these.
func errorMessage(body []byte) string {
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &env) != nil {
		return ""
	}
	var msg string
	var e openai.Error
	switch {
	case len(env.Error) > 0 && env.Error[0] == '{' && json.Unmarshal(env.Error, &e) == nil && e.Message != "":
		msg = e.Message
		if e.Type != "" {
			msg += " (" + e.Type + ")"
		}
	case len(env.Error) > 0 && env.Error[0] == '"':
		_ = json.Unmarshal(env.Error, &msg)
	case env.Message != "":
		msg = env.Message
	case len(env.Detail) > 0 && env.Detail[0] == '"':
		_ = json.Unmarshal(env.Detail, &msg)
	}
	return clip(strings.Join(strings.Fields(msg), " "), 300)
}

// Snippet is a short quoted excerpt of a body for an error line: an HTML
// page's title (or its text without tags), whitespace folded, clipped to
// about 120 characters, so a whole page never lands in a terminal.
func Snippet(body []byte, contentType string) string {
	b := bytes.TrimSpace(body)
	if len(b) == 0 {
		return "an empty body"
	}
	if strings.Contains(contentType, "html") || b[0] == '<' {
		if t := htmlTitle(b); len(t) > 0 {
			b = t
		} else {
			b = stripTags(b)
		}
	}
	return fmt.Sprintf("%q", clip(strings.Join(strings.Fields(string(b)), " "), 120))
}

// htmlTitle is the text inside an HTML page's <title>, or nil.
func htmlTitle(b []byte) []byte {
	lower := bytes.ToLower(b)
	i := bytes.Index(lower, []byte("<title"))
	if i < 0 {
		return nil
	}
	j := bytes.IndexByte(lower[i:], '>')
	if j < 0 {
		return nil
	}
	start := i + j + 1
	end := bytes.Index(lower[start:], []byte("</title"))
	if end < 0 {
		return nil
	}
	return bytes.TrimSpace(b[start : start+end])
}

// stripTags drops everything between < and >.
func stripTags(b []byte) []byte {
	out := make([]byte, 0, len(b))
	in := false
	for _, c := range b {
		switch {
		case c == '<':
			in = true
		case c == '>' && in:
			in = false
			out = append(out, ' ')
		case !in:
			out = append(out, c)
		}
	}
	return out
}

// clip cuts s to at most n bytes on a character boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
