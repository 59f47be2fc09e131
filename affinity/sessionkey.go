package affinity

import (
	"github.com/cespare/xxhash/v2"
	"github.com/infergate/infergate/openai"
)

// SessionSource is where a request named its conversation, strongest
// first: SessionOf takes the strongest the request has.
type SessionSource uint8

// The sources of a session key.
const (
	// SessionNone: the request names no conversation.
	SessionNone SessionSource = iota
	// SessionPromptCacheKey is OpenAI's prompt_cache_key (chat
	// completions and Responses bodies), meant for exactly this.
	SessionPromptCacheKey
	// SessionPreviousResponse is the Responses API's
	// previous_response_id: the stored response the request continues.
	SessionPreviousResponse
	// SessionConversation is the Responses API's conversation (an id,
	// or an object with one).
	SessionConversation
	// SessionHeader is a header the operator names (x-session-id by
	// default).
	SessionHeader
	// SessionUser is the user field, read only where the operator
	// allows: many clients send one user for every conversation.
	SessionUser
)

// Session is the conversation a request names, as hashes only: the raw
// key is never kept. The zero Session names none.
type Session struct {
	// Key is the hash of the strongest key the request names (0: none),
	// and Source where it came from.
	Key    uint64
	Source SessionSource
	// Response is the hash of previous_response_id when the request has
	// one (0: none), whatever its Key: a stored response lives on the
	// backend that wrote it, which the table may know by its id
	// (ResponseHash of the answer's id).
	Response uint64
}

// SessionOptions are the sources the operator allows beside the body's
// own keys: header values (already read from the request, nil for a
// header it lacks) and the user field.
type SessionOptions struct {
	Headers [][]byte
	User    bool
}

// Seeds keep the sources apart: "abc" as a prompt_cache_key and "abc"
// as a user are different sessions.
var sourceSeed = [...]uint64{0, 0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb, 0xd6e8feb86659fd93, 0xa0761d6478bd642f}

// hashKey is the session hash of a key's bytes from source src, never 0.
func hashKey(src SessionSource, b []byte) uint64 {
	return nonZero(Mix(xxhash.Sum64(b) ^ sourceSeed[src]))
}

// Mix is splitmix64's finaliser: a well-spread, stable hash of x (the
// same on every replica), for session hashes here and the gateway's
// rendezvous placement and tie-breaks.
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// ResponseHash is the session hash of a stored response's id as a
// backend answered it (unquoted): what a later request's
// previous_response_id hashes to, so the gateway learns where the
// response lives and sends its continuation there.
func ResponseHash(id []byte) uint64 {
	if len(id) == 0 {
		return 0
	}
	return hashKey(SessionPreviousResponse, id)
}

// ResponseSession is ResponseHash of an id whose xxhash is sum (as
// openai.Tally keeps it), 0 for none.
func ResponseSession(sum uint64) uint64 {
	if sum == 0 {
		return 0
	}
	return nonZero(Mix(sum ^ sourceSeed[SessionPreviousResponse]))
}

// jsonString is the inside of a JSON string value, nil for any other
// value or an empty string. The escapes are kept as written: a client
// that writes its key the same way each time (every one does) gets the
// same hash, and nothing is decoded or allocated.
func jsonString(v []byte) []byte {
	if len(v) < 3 || v[0] != '"' || v[len(v)-1] != '"' {
		return nil
	}
	return v[1 : len(v)-1]
}

// conversationID is the Responses API's conversation: a string id, or
// an object whose id is one.
func conversationID(v []byte) []byte {
	if len(v) > 0 && v[0] == '{' {
		var id []byte
		openai.EachMember(v, func(key []byte, f openai.Field) bool {
			if openai.KeyIs(key, "id") {
				id = jsonString(f.Of(v))
			}
			return true
		})
		return id
	}
	return jsonString(v)
}

// SessionOf reads the conversation a request names, from its body (as
// openai.ScanRequest read it into env) and what opt allows: the
// strongest of prompt_cache_key, previous_response_id, conversation, the
// headers in their order, and user. A key of the wrong JSON type (a
// number, an array, an object without an id) or an empty one is no key:
// the next source counts. The cost is a hash of each key's bytes (a
// megabyte of key hashes in about a hundred microseconds); nothing is
// allocated.
func SessionOf(body []byte, env *openai.Envelope, opt SessionOptions) Session {
	var s Session
	if id := jsonString(env.PreviousResponseID.Of(body)); id != nil {
		s.Response = hashKey(SessionPreviousResponse, id)
	}
	set := func(src SessionSource, b []byte) bool {
		if len(b) == 0 {
			return false
		}
		s.Key, s.Source = hashKey(src, b), src
		return true
	}
	switch {
	case set(SessionPromptCacheKey, jsonString(env.PromptCacheKey.Of(body))):
	case s.Response != 0:
		s.Key, s.Source = s.Response, SessionPreviousResponse
	case set(SessionConversation, conversationID(env.Conversation.Of(body))):
	default:
		for _, h := range opt.Headers {
			if set(SessionHeader, h) {
				return s
			}
		}
		if opt.User {
			set(SessionUser, jsonString(env.User.Of(body)))
		}
	}
	return s
}
