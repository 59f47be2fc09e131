package bench

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A session run's requests can name their conversation, as agent tools
// and SDKs do, so that a router pins each conversation to the replica
// holding its cache: in the body's prompt_cache_key (OpenAI's field, for
// chat and the Responses API) or in a header (x-session-id and the
// like). The key is random per run (a fresh nonce, never the seed, so a
// rerun with --seed is not mistaken for the same conversations) and the
// same for every turn of a session; the record says only how sessions
// named themselves, never a key.

// The session-key modes WorkloadSpec.SessionKey takes besides
// "header:NAME".
const (
	SessionKeyNone           = "none"
	SessionKeyPromptCacheKey = "prompt_cache_key"
	sessionKeyHeaderPrefix   = "header:"
	// maxSessionHeader bounds a session header's name.
	maxSessionHeader = 128
)

// errSessionKey is the shape a session-key mode must have.
var errSessionKey = errors.New("want none, prompt_cache_key or header:NAME")

// sessionKeyMode is a parsed WorkloadSpec.SessionKey: where a session's
// key goes; the zero value sends none.
type sessionKeyMode struct {
	body   bool   // in the body's prompt_cache_key
	header string // in this header, when not ""
}

// parseSessionKey reads a session-key mode: "" or none, prompt_cache_key,
// or header:NAME with NAME an HTTP header name (RFC 9110 token, at most
// 128 bytes).
func parseSessionKey(s string) (sessionKeyMode, error) {
	switch s {
	case "", SessionKeyNone:
		return sessionKeyMode{}, nil
	case SessionKeyPromptCacheKey:
		return sessionKeyMode{body: true}, nil
	}
	name, ok := strings.CutPrefix(s, sessionKeyHeaderPrefix)
	if !ok {
		return sessionKeyMode{}, fmt.Errorf("%q: %w", s, errSessionKey)
	}
	if name == "" || len(name) > maxSessionHeader || !isToken(name) {
		return sessionKeyMode{}, fmt.Errorf("%q: the header's name must be 1 to %d letters, digits or !#$%%&'*+-.^_`|~: %w", s, maxSessionHeader, errSessionKey)
	}
	return sessionKeyMode{header: name}, nil
}

// isToken reports whether s is an RFC 9110 token (a header's name).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// sessionKeys makes the keys of one run's sessions.
type sessionKeys struct {
	mode  sessionKeyMode
	nonce uint64
}

// newSessionKeys draws the run's nonce.
func newSessionKeys(mode sessionKeyMode) sessionKeys {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return sessionKeys{mode: mode, nonce: binary.LittleEndian.Uint64(b[:])}
}

// on reports whether sessions send a key.
func (k sessionKeys) on() bool { return k.mode.body || k.mode.header != "" }

// key is session u's key: "bench-" and 16 hex digits, the same for
// every turn of u in this run, another in the next run.
func (k sessionKeys) key(u int) string {
	x := k.nonce ^ uint64(u)*0x9e3779b97f4a7c15
	// splitmix64's finaliser: neighbouring sessions get unrelated keys.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	s := strconv.FormatUint(x, 16)
	return "bench-" + strings.Repeat("0", 16-len(s)) + s
}

// header is the header session u sends, zero when none.
func (k sessionKeys) header(u int) [2]string {
	if k.mode.header == "" {
		return [2]string{}
	}
	return [2]string{k.mode.header, k.key(u)}
}

// appendBodyKey adds session u's prompt_cache_key to a body that
// appendOptions closed, when the mode says so.
func (k sessionKeys) appendBodyKey(b []byte, u int) []byte {
	if !k.mode.body || len(b) == 0 || b[len(b)-1] != '}' {
		return b
	}
	b = append(b[:len(b)-1], `,"prompt_cache_key":"`...)
	b = append(b, k.key(u)...)
	return append(b, `"}`...)
}
