package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/internal/quantile"
	"github.com/infergate/infergate/internal/tokens"
	"github.com/infergate/infergate/verdict"
)

// Multi-turn sessions: each simulated user keeps its conversation, sends
// a turn, appends the model's answer (the text it got, not a script's),
// waits its think time and sends the next turn with the whole
// conversation so far. The load is the number of users in session at
// once; the figures by turn show what a prefix cache and a growing
// context do to what users see.

// turn is one user turn of a session: the user's message and the output
// asked for.
type turn struct {
	// Text is the user's message (plain text).
	Text string
	// InputTokens is the message's length in tokens when the workload
	// knows it; MaxTokens the output asked for (0: none).
	InputTokens, MaxTokens int
}

// sessionWorkload is a workload of conversations: Session(u) is user u's turns,
// deterministic for the seed.
type sessionWorkload interface {
	Workload
	Session(u int) []turn
	// Turn is session u's request of turn t after the conversation
	// history (its key, when sessions send one, in it).
	Turn(u int, history []message, t turn) Request
	// Count is how many distinct sessions there are (0: unbounded).
	Count() int
	// Turns is every session's number of turns, 0 when they differ (a
	// dataset's conversations).
	Turns() int
}

// sessionSet is a synthetic or dataset session workload.
type sessionSet struct {
	spec  *WorkloadSpec
	model []byte
	// synthetic sessions draw their turns; a dataset's are listed.
	syn   *synthetic
	convs [][]turn
	keys  sessionKeys
}

func (w *sessionSet) Len() int { return 0 }

// Request is a session's first turn, for what reads a workload by index.
func (w *sessionSet) Request(i int) Request { return w.Turn(i, nil, w.Session(i)[0]) }

func (w *sessionSet) Count() int { return len(w.convs) }

func (w *sessionSet) Turns() int {
	if w.convs != nil {
		return 0
	}
	return w.spec.Turns
}

func (w *sessionSet) Session(u int) []turn {
	if w.convs != nil {
		return w.convs[u%len(w.convs)]
	}
	rng := rand.New(rand.NewPCG(w.spec.Seed^0x5e55, uint64(u)))
	turns := make([]turn, w.spec.Turns)
	for k := range turns {
		n := w.syn.in.Sample(rng)
		turns[k] = turn{Text: string(w.syn.prompt(rng, n)), InputTokens: n, MaxTokens: w.syn.out.Sample(rng)}
	}
	return turns
}

// message is one message of a conversation.
type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Turn is the request of a turn after the conversation history: the
// session's group's system prompt (with --prefix-groups), the messages
// (the Responses API's input), the tools, the spec's options and the
// session's key. Its InputTokens is the new message's and the system
// prompt's, without the history (which the server's count shows).
func (w *sessionSet) Turn(u int, history []message, t turn) Request {
	r := Request{InputTokens: t.InputTokens, MaxTokens: t.MaxTokens, At: -1, Header: w.keys.header(u)}
	msgs := make([]message, 0, len(history)+2)
	if g := w.spec.PrefixGroups; g > 0 {
		msgs = append(msgs, message{Role: "system", Content: string(w.syn.groupPrefix(u % g))})
		r.InputTokens += w.spec.PrefixTokens
	}
	msgs = append(append(msgs, history...), message{Role: "user", Content: t.Text})
	raw, _ := json.Marshal(msgs)
	b := append([]byte(`{"model":`), w.model...)
	b = append(b, w.spec.messagesKey()[:len(w.spec.messagesKey())-1]...)
	b = append(b, raw...)
	b = w.syn.appendTools(w.spec.appendOptions(b, t.MaxTokens))
	r.Body = w.keys.appendBodyKey(b, u)
	return r
}

// newSessions builds the session workload of s: synthetic turns
// (InputTokens, OutputTokens per turn) or a dataset's conversations
// (ShareGPT: each human turn in order; the reply's counted length as its
// max_tokens unless --output-tokens says).
func newSessions(s *WorkloadSpec, in, out lengths, tok *tokens.Tokenizer) (Workload, error) {
	model, _ := json.Marshal(s.Model)
	mode, err := parseSessionKey(s.SessionKey)
	if err != nil {
		return nil, fmt.Errorf("bench: session key: %w", err)
	}
	if err := s.checkPrefixGroups(); err != nil {
		return nil, err
	}
	// The words draw a dataset's system prompts and tools too.
	w := &sessionSet{spec: s, model: model, keys: newSessionKeys(mode),
		syn: newSynthetic(s, in, out, tok.Words(), model)}
	if s.Dataset == "" {
		if in.zero() {
			return nil, fmt.Errorf("bench: sessions need --input-tokens (per turn) or a --dataset of conversations")
		}
		return w, nil
	}
	items, err := s.datasetItems()
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(s.Seed, 4))
	for n, it := range items {
		var obj struct {
			Conversations []struct {
				From  string `json:"from"`
				Value string `json:"value"`
			} `json:"conversations"`
		}
		if err := json.Unmarshal(it, &obj); err != nil {
			return nil, fmt.Errorf("bench: dataset %s entry %d: not a ShareGPT conversation: %v", s.Dataset, n+1, err)
		}
		var turns []turn
		for i, c := range obj.Conversations {
			if c.From != "human" && c.From != "user" || c.Value == "" {
				continue
			}
			text := c.Value
			if len(turns) == 0 {
				text = s.Salt + text // the conversation's start: every turn carries it
			}
			t := turn{Text: text, InputTokens: tok.Count(text), MaxTokens: out.Sample(rng)}
			if out.zero() && i+1 < len(obj.Conversations) && obj.Conversations[i+1].Value != "" {
				t.MaxTokens = max(1, tok.Count(obj.Conversations[i+1].Value))
			}
			turns = append(turns, t)
			if s.Turns > 0 && len(turns) == s.Turns {
				break
			}
		}
		if len(turns) > 0 {
			w.convs = append(w.convs, turns)
		}
	}
	if len(w.convs) == 0 {
		return nil, fmt.Errorf("bench: dataset %s holds no conversation with a user turn", s.Dataset)
	}
	perm := rng.Perm(len(w.convs))
	shuffled := make([][]turn, len(perm))
	for i, j := range perm {
		shuffled[i] = w.convs[j]
	}
	w.convs = shuffled
	return w, nil
}

// sessions runs the stage's users: Concurrency users at once (the
// first sessions starting evenly over RampUp), each through sessions one
// after another until the stage's requests or time
// are spent (the last sessions may end between turns then) or, with
// neither bound, every conversation of a dataset was held once. A failed
// turn ends its session.
func (s *stage) sessions(ctx context.Context, sw sessionWorkload) {
	var users atomic.Int64
	users.Store(int64(s.l.Concurrency))
	for u := range s.l.Concurrency {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				if users.Add(-1) == 0 {
					s.markStop() // sending stopped when the last user did
				}
			}()
			if !s.rampWait(ctx, u) {
				return
			}
			p := s.rn.parser()
			defer s.rn.parsers.Put(p)
			for {
				u := int(s.rn.nextSession.Add(1) - 1)
				if c := sw.Count(); c > 0 && u-s.firstSession >= c && s.l.Requests == 0 && s.l.Duration == 0 {
					return
				}
				// A stage of N requests holds N/T whole sessions: a user
				// done early (ramped up first, or quicker answers) opens
				// no session whose turns the others' last turns would
				// then go without.
				if t := sw.Turns(); t > 0 && s.l.Requests > 0 && u-s.firstSession >= max(s.l.Requests/t, 1) {
					return
				}
				if !s.session(ctx, p, sw, s.rn.session.of(u)) {
					return
				}
			}
		}()
	}
}

// session runs user u's session; false when the stage is over.
func (s *stage) session(ctx context.Context, p *parser, sw sessionWorkload, u int) bool {
	turns := sw.Session(u)
	var history []message
	for k, t := range turns {
		now := time.Now()
		ok, warm := s.take(ctx, int(s.local.Add(1)-1), now)
		if !ok {
			return false
		}
		req := sw.Turn(u, history, t)
		i := int(s.rn.next.Add(1) - 1)
		r := s.doTurn(ctx, p, i, warm, now, req, u, k+1)
		if !r {
			return true // the session ends; the user starts another
		}
		history = append(history, message{Role: "user", Content: t.Text}, message{Role: "assistant", Content: string(p.text)})
		if k+1 < len(turns) && s.l.ThinkTime > 0 {
			tm := time.NewTimer(s.l.ThinkTime)
			select {
			case <-tm.C:
			case <-ctx.Done():
				tm.Stop()
				return false
			}
		}
	}
	return true
}

// doTurn is doAt for a session's turn: the answer's whole text is kept
// (it joins the conversation), and the result says which session and
// turn it was. It reports whether the turn succeeded.
func (s *stage) doTurn(ctx context.Context, p *parser, i int, warm bool, intended time.Time, req Request, session, turn int) bool {
	ok := false
	s.doWith(ctx, p, i, warm, intended, req, func(r *Result) {
		r.Session, r.Turn = session, turn
		ok = r.OK()
	}, true)
	return ok
}

// TurnSummary is one turn index's figures over a stage's sessions, or
// (Turn 0) the follow-up turns' pooled.
type TurnSummary struct {
	Turn int `json:"turn"`
	// N counts the turns that succeeded, Failed those that did not.
	N      int `json:"n"`
	Failed int `json:"failed,omitempty"`
	// TTFT and E2E in milliseconds.
	TTFTP50 float64  `json:"ttft_p50_ms"`
	TTFTP90 *float64 `json:"ttft_p90_ms,omitempty"`
	E2EP50  float64  `json:"e2e_p50_ms"`
	// PromptTokensP50 is the context the turn sent, as the server's usage
	// counted it (the conversation so far and the new message);
	// CachedShare the share of it the server found cached, when it said.
	PromptTokensP50 float64  `json:"prompt_tokens_p50"`
	CachedShare     *float64 `json:"cached_share,omitempty"`
}

// optional returns the p90 (in the table's number format) and the cached
// share as a table shows them: "-" when not there.
func (t TurnSummary) optional(format string) (p90, cached string) {
	p90, cached = "-", "-"
	if t.TTFTP90 != nil {
		p90 = fmt.Sprintf(format, *t.TTFTP90)
	}
	if t.CachedShare != nil {
		cached = fmt.Sprintf("%.0f%%", *t.CachedShare*100)
	}
	return p90, cached
}

// turnSummaries groups a stage's rows by turn index; the second result
// pools the follow-up turns (2 and later: those whose context a cache
// may hold from the turn before), nil with none.
func turnSummaries(rows []row) ([]TurnSummary, *TurnSummary) {
	by := map[int][]*row{}
	var later []*row
	for i := range rows {
		if w := &rows[i]; w.turn > 0 {
			by[int(w.turn)] = append(by[int(w.turn)], w)
			if w.turn > 1 {
				later = append(later, w)
			}
		}
	}
	if len(by) == 0 {
		return nil, nil
	}
	turns := slices.Sorted(maps.Keys(by))
	out := make([]TurnSummary, 0, len(turns))
	for _, turn := range turns {
		out = append(out, turnSummary(turn, by[turn]))
	}
	var follow *TurnSummary
	if len(later) > 0 {
		f := turnSummary(0, later)
		follow = &f
	}
	return out, follow
}

// turnSummary is the figures of the rows ws of one turn index (0: pooled).
func turnSummary(turn int, ws []*row) TurnSummary {
	ts := TurnSummary{Turn: turn}
	var ttft, e2e, prompt []float64
	var cache verdict.CacheTally
	for _, w := range ws {
		if !w.ok {
			ts.Failed++
			continue
		}
		ts.N++
		ttft = append(ttft, float64(w.ttft)/1e6)
		e2e = append(e2e, float64(w.e2e())/1e6)
		if w.prompt > 0 {
			prompt = append(prompt, float64(w.prompt))
		}
		cache.Add(int(w.prompt), int(w.cached))
	}
	for _, v := range [][]float64{ttft, e2e, prompt} {
		slices.Sort(v)
	}
	if len(ttft) > 0 {
		ts.TTFTP50, ts.TTFTP90, ts.E2EP50 = quantile.Rank(ttft, 0.5), quantile.Maybe(ttft, 0.9), quantile.Rank(e2e, 0.5)
	}
	if len(prompt) > 0 {
		ts.PromptTokensP50 = quantile.Rank(prompt, 0.5)
	}
	ts.CachedShare = cache.Share()
	return ts
}

// label is the turn's name in a table: its number, or "2+" for the
// follow-up turns pooled.
func (t TurnSummary) label() string {
	if t.Turn == 0 {
		return "2+"
	}
	return strconv.Itoa(t.Turn)
}
