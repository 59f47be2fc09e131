package mirror

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/infergate/infergate/openai"
)

// A live rule is a Rule made ready for the request path: its match
// lists sorted for a binary search, its sample as a hash threshold, its
// overrides as JSON, and its cap as a semaphore. Everything the tap asks
// of it is cheap and allocation-free; the copy itself is made off the
// primary's goroutine (Copy).

// Request is what the rules read of a request: its routing names and a
// way to look at its headers.
type Request struct {
	ID, Model, Tenant, Path string
	// Header returns a request header's value (nil when absent).
	Header func(name string) []byte
}

type matcher struct {
	models, tenants, paths []string
	headers                [][2]string
}

func newMatcher(m Match) matcher {
	mm := matcher{models: sorted(m.Models), tenants: sorted(m.Tenants), paths: sorted(m.Paths)}
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		mm.headers = append(mm.headers, [2]string{k, m.Headers[k]})
	}
	return mm
}

func (m *matcher) matches(r *Request) bool {
	if !in(m.models, r.Model) || !in(m.tenants, r.Tenant) || !in(m.paths, r.Path) {
		return false
	}
	for _, h := range m.headers {
		if string(r.Header(h[0])) != h[1] {
			return false
		}
	}
	return true
}

// LiveRule is a mirror rule made live. It is safe for concurrent use.
type LiveRule struct {
	name      string
	pool      string
	threshold uint64 // a request is sampled when the hash of its id is below
	all       bool   // sample 1
	match     matcher
	overrides []member // applied to the copy, in order
	applied   map[string]any
	aa        bool
	sem       chan struct{}
}

type member struct {
	name  string
	value []byte
}

// Live makes r live.
func Live(r Rule) *LiveRule {
	m := &LiveRule{name: r.Name, pool: r.Pool, all: r.Sample >= 1, match: newMatcher(r.Match), sem: make(chan struct{}, r.MaxInFlight), aa: r.AA}
	m.threshold = uint64(r.Sample * math.MaxUint64)
	if r.Overrides.Model != "" {
		q, _ := json.Marshal(r.Overrides.Model)
		m.overrides = append(m.overrides, member{"model", q})
		m.applied = map[string]any{"model": r.Overrides.Model}
	}
	for _, k := range slices.Sorted(maps.Keys(r.Overrides.Fields)) {
		q, _ := json.Marshal(r.Overrides.Fields[k]) // Validate checked it
		m.overrides = append(m.overrides, member{k, q})
		if m.applied == nil {
			m.applied = map[string]any{}
		}
		m.applied[k] = r.Overrides.Fields[k]
	}
	return m
}

// Name is the rule's name; Pool its candidate pool's.
func (m *LiveRule) Name() string { return m.name }
func (m *LiveRule) Pool() string { return m.pool }

// AA reports whether the rule also sends an A/A copy.
func (m *LiveRule) AA() bool { return m.aa }

// Takes reports whether the rule matches r and samples it. The sample is
// decided by a hash of the request id that does not change between runs,
// so a replay that sends the same ids copies the same requests.
func (m *LiveRule) Takes(r *Request) bool {
	return m.match.matches(r) && (m.all || hash(r.ID) < m.threshold)
}

// Acquire takes one of the rule's copies in flight, without waiting; it
// reports false when the cap is full (the copy is dropped).
func (m *LiveRule) Acquire() bool {
	select {
	case m.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

// Release gives back a copy Acquire took.
func (m *LiveRule) Release() { <-m.sem }

// InFlight is the rule's copies in flight.
func (m *LiveRule) InFlight() int { return len(m.sem) }

// Copy is the body the candidate gets: body (the primary's, not
// changed) with the rule's overrides.
func (m *LiveRule) Copy(body []byte) []byte {
	out := body
	for _, o := range m.overrides {
		out = openai.SetMember(out, o.name, o.value)
	}
	if len(m.overrides) == 0 {
		out = slices.Clone(body)
	}
	return out
}

// Overrides reports whether the copy's body differs from the primary's
// (the rule sets members), and whether it sets any of names.
func (m *LiveRule) Overrides(names ...string) (any, named bool) {
	for _, o := range m.overrides {
		if slices.Contains(names, o.name) {
			named = true
		}
	}
	return len(m.overrides) > 0, named
}

// LiveSplit is the canary made live. It is safe for concurrent use.
type LiveSplit struct {
	pool      string
	threshold uint64
	header    string // sticky by this header's value
	tenant    bool   // sticky by tenant
	model     string
	match     matcher
}

// LiveSplitOf makes s live.
func LiveSplitOf(s *Split) *LiveSplit {
	l := &LiveSplit{pool: s.Pool, threshold: uint64(s.Weight * math.MaxUint64), model: s.Model, match: newMatcher(s.Match)}
	if s.Weight >= 1 {
		l.threshold = math.MaxUint64
	}
	l.tenant = s.Sticky == "tenant"
	l.header, _ = strings.CutPrefix(s.Sticky, "header:")
	return l
}

// Pool is the candidate's pool; Model the model name it gets ("" keeps
// the request's).
func (s *LiveSplit) Pool() string  { return s.pool }
func (s *LiveSplit) Model() string { return s.model }

// Matches reports whether the split takes r.
func (s *LiveSplit) Matches(r *Request) bool { return s.match.matches(r) }

// Candidate reports whether the candidate serves r: by its sticky key,
// or its id when it has none.
func (s *LiveSplit) Candidate(r *Request) bool {
	key := r.ID
	switch {
	case s.tenant:
		key = r.Tenant
	case s.header != "":
		if v := r.Header(s.header); len(v) > 0 {
			return hashBytes(v) < s.threshold
		}
	}
	return hash(key) < s.threshold
}

func sorted(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return slices.Sorted(slices.Values(s))
}

func in(s []string, v string) bool {
	if s == nil {
		return true
	}
	_, ok := slices.BinarySearch(s, v)
	return ok
}

// hash is FNV-1a of s, its bits then mixed (MurmurHash3's finalizer) so
// that keys differing in their last byte ("user-1", "user-2") spread
// over the whole range the thresholds cut: the same on every replica and
// in every run.
func hash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix(h)
}

func hashBytes(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return mix(h)
}

func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
