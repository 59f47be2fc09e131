package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/infergate/infergate/internal/bgqueue"
	"github.com/infergate/infergate/internal/httpbody"
	"github.com/infergate/infergate/internal/roundtrip"
	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/tracing"
	"github.com/valyala/fasthttp"
)

// maxCapture bounds the text kept of each answer of a pair while it is
// judged (an answer that goes on past it is judged on its first MiB).
const maxCapture = 1 << 20

// A pair is one mirrored request's two answers. Each side is timed from
// the moment its request was sent to its backend, so the pair compares
// the backends and not the gateway's queue. Whichever side ends last
// hands the pair to the recorder, off both request paths.

// Pair is one line of the pairs file and one entry of /admin/pairs.
type Pair struct {
	Time   time.Time `json:"time"`
	ID     string    `json:"id"`
	Rule   string    `json:"rule"`
	Model  string    `json:"model"`
	Path   string    `json:"path"`
	Tenant string    `json:"tenant,omitempty"`
	Stream bool      `json:"stream"`
	// Split is set on a canary's record ("primary" or "candidate"): one
	// request served by one arm, whose answer is in that arm's field.
	Split string `json:"split,omitempty"`
	// Overrides are what the copy was sent with instead.
	Overrides map[string]any `json:"overrides,omitempty"`
	// Prompt is the request's last user message (mirror.record.output
	// full, up to max_output_bytes), for a judge model to grade the
	// answers against.
	Prompt string `json:"prompt,omitempty"`
	// JSONAsked is set when the request asked for JSON (response_format),
	// SchemaGiven when it gave a JSON schema the answers are checked
	// against.
	JSONAsked   bool `json:"json_asked,omitempty"`
	SchemaGiven bool `json:"schema_given,omitempty"`
	Primary     Arm  `json:"primary"`
	Candidate   Arm  `json:"candidate"`
	// Noise is the A/A arm: the primary's request once more to its own
	// pool (mirror rule aa), nil without one.
	Noise *Arm `json:"aa,omitempty"`
	// LengthRatio is the candidate's output length over the primary's
	// (bytes), Similarity the two outputs' word overlap: the Jaccard index
	// of their sets of words and word pairs, 1 for the same text.
	LengthRatio float64 `json:"length_ratio"`
	Similarity  float64 `json:"similarity"`
}

// Arm is one side of a pair.
type Arm struct {
	Backend string `json:"backend,omitempty"`
	Status  int    `json:"status"`
	Error   string `json:"error,omitempty"`
	// TTFTms is the first content event from the request's send (streams
	// only); E2Ems the last content (or the whole body) from the send;
	// TPOTms the mean gap between output tokens.
	TTFTms float64 `json:"ttft_ms,omitempty"`
	E2Ems  float64 `json:"e2e_ms,omitempty"`
	TPOTms float64 `json:"tpot_ms,omitempty"`
	// OutputTokens is the usage's count, else the content events.
	OutputTokens int    `json:"output_tokens,omitempty"`
	PromptTokens int    `json:"prompt_tokens,omitempty"`
	Finish       string `json:"finish_reason,omitempty"`
	// Output is the answer's text (mirror.record.output: full, up to
	// max_output_bytes); OutputSHA256 and OutputBytes are of all of it.
	Output       string `json:"output,omitempty"`
	OutputSHA256 string `json:"output_sha256,omitempty"`
	OutputBytes  int    `json:"output_bytes"`
	// Quality signals.
	InvalidJSON    bool `json:"invalid_json,omitempty"`
	SchemaInvalid  bool `json:"schema_invalid,omitempty"` // JSON, but not as the request's schema says
	Refusal        bool `json:"refusal,omitempty"`
	Empty          bool `json:"empty,omitempty"`
	Truncated      bool `json:"truncated,omitempty"`
	LengthByPolicy bool `json:"length_by_policy,omitempty"`

	text []byte // the answer's text while it is read
}

// OK reports whether the arm answered 2xx without error.
func (a *Arm) OK() bool { return a.Error == "" && a.Status >= 200 && a.Status < 300 }

type pair struct {
	Pair
	pending   atomic.Int32
	maxOutput int
	schema    []byte // the request's JSON schema, when it gave one
	// ctx is the copies' (nil for a canary's record); stop ends it.
	ctx    context.Context
	stop   context.CancelFunc
	prompt []byte // the last user message's text, while judged
}

func newPair(x *exchange, m *mirrorRule) *pair {
	p := &pair{Pair: Pair{Time: time.Now().UTC(), ID: x.id, Rule: m.name, Model: x.model, Path: x.path, Tenant: x.tenant, Stream: x.stream},
		maxOutput: x.st.cfg.Server.MaxResponseBytes}
	if len(m.applied) > 0 {
		p.Overrides = m.applied
	}
	p.pending.Store(2)
	return p
}

// done is called by each side when its arm is complete; the last one
// records the pair.
func (p *pair) done(g *Gateway) {
	if p.pending.Add(-1) == 0 {
		if p.stop != nil {
			p.stop()
		}
		g.pairs.offer(p)
	}
}

// primaryDone fills the primary's arm from the finished exchange.
func (x *exchange) primaryDone() {
	p := x.pair
	a := &p.Primary
	if p.Split == "candidate" {
		a = &p.Candidate
	}
	tl := &x.tl
	if x.backend != nil {
		a.Backend = x.backend.name
	}
	a.Status = x.status
	if x.err != nil {
		a.Error = x.err.Error()
	}
	if !tl.Sent.IsZero() {
		if !tl.FirstTokenIn.IsZero() {
			a.TTFTms = ms(tl.FirstTokenIn.Sub(tl.Sent))
		}
		end := tl.LastTokenIn
		if end.IsZero() {
			end = tl.Done
		}
		a.E2Ems = ms(end.Sub(tl.Sent))
	}
	a.OutputTokens, a.PromptTokens, a.Finish = tl.OutputTokens, tl.PromptTokens, tl.FinishReason
	if a.OutputTokens == 0 {
		a.OutputTokens = tl.ContentEvents
	}
	if a.OutputTokens > 1 && !tl.FirstTokenIn.IsZero() {
		a.TPOTms = ms(tl.LastTokenIn.Sub(tl.FirstTokenIn)) / float64(a.OutputTokens-1)
	}
	a.LengthByPolicy = tl.LengthByPolicy()
	a.text = x.captured
	x.captured = nil
	if x.outcome == outcomeClientGone && p.stop != nil {
		// Nobody waits for this request any more: its copies stop too,
		// so no backend generates for nobody.
		p.stop()
	}
	p.done(x.g)
}

// armObserver times a candidate's round trip (roundtrip.Observer).
type armObserver struct {
	b               *Backend
	start, conn, at time.Time
}

func (o *armObserver) Starting()                { o.start = time.Now() }
func (o *armObserver) Connected(net.Conn, bool) { o.conn = time.Now() }
func (o *armObserver) Sent(net.Conn)            { o.at = time.Now() }
func (o *armObserver) Reader(conn net.Conn, last *bufio.Reader) *bufio.Reader {
	if last != nil {
		return nil
	}
	return o.b.hc.AcquireReader(conn)
}
func (o *armObserver) ReleaseReader(br *bufio.Reader) { o.b.hc.ReleaseReader(br) }

// readArm sends req to b and reads its answer in full into a, timed as
// the primary is. It reports whether the backend did its part (for its
// breaker): any answer but a 5xx or a failure.
func readArm(ctx context.Context, b *Backend, req *fasthttp.Request, stream bool, t Timeouts, a *Arm, maxBody int) bool {
	obs := &armObserver{b: b}
	wait := time.Duration(0)
	if stream {
		wait = t.FirstByte
	}
	trip, err := roundtrip.Do(ctx, b.hc, req, roundtrip.Options{Connect: t.Connect, Deadline: wait}, obs)
	if err != nil {
		a.Error = err.Error()
		return false
	}
	resp := trip.Resp
	a.Status = resp.StatusCode()
	var body httpbody.Reader
	body.Reset(trip.Reader, httpbody.Mode(req, resp), int64(resp.Header.ContentLength()))
	sse := bytes.HasPrefix(resp.Header.ContentType(), eventStream) && a.Status < 300
	fasthttp.ReleaseResponse(resp)
	var tl tracing.Timeline
	tl.Sent = obs.at
	trip.DeadlineSet = true // both readers bound their reads
	if sse {
		err = readArmStream(trip.Conn, &body, t, &tl, a)
	} else {
		err = readArmBody(trip.Conn, &body, t, &tl, a, maxBody)
	}
	trip.Finish(err == nil && body.Complete())
	if err != nil && a.Error == "" {
		a.Error = err.Error()
	}
	if !tl.FirstTokenIn.IsZero() {
		a.TTFTms = ms(tl.FirstTokenIn.Sub(tl.Sent))
	}
	end := tl.LastTokenIn
	if end.IsZero() {
		end = tl.Done
	}
	if !end.IsZero() {
		a.E2Ems = ms(end.Sub(tl.Sent))
	}
	a.OutputTokens, a.PromptTokens, a.Finish = tl.OutputTokens, tl.PromptTokens, tl.FinishReason
	if a.OutputTokens == 0 {
		a.OutputTokens = tl.ContentEvents
	}
	if a.OutputTokens > 1 && !tl.FirstTokenIn.IsZero() {
		a.TPOTms = ms(tl.LastTokenIn.Sub(tl.FirstTokenIn)) / float64(a.OutputTokens-1)
	}
	return err == nil && a.Status < 500
}

func readArmStream(conn net.Conn, body io.Reader, t Timeouts, tl *tracing.Timeline, a *Arm) error {
	er := readerPool.Get().(*openai.EventReader)
	defer readerPool.Put(er)
	er.Reset(body, nil, maxEventBytes)
	for {
		d := t.Idle
		if tl.FirstTokenIn.IsZero() {
			d = t.FirstByte
		}
		_ = conn.SetReadDeadline(time.Now().Add(d))
		ev, err := er.Next()
		now := time.Now()
		if err != nil {
			tl.Done = now
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		data := openai.EventData(ev)
		if openai.IsDone(ev) {
			tl.Done = now
			continue
		}
		if openai.HasContent(data) {
			if tl.FirstTokenIn.IsZero() {
				tl.FirstTokenIn = now
			}
			tl.LastTokenIn = now
			tl.ContentEvents++
			if len(a.text) < maxCapture {
				a.text = openai.AppendContent(a.text, data)
			}
		}
		if f := openai.FinishReason(data); f != nil {
			tl.FinishReason = tracing.FinishReasonOf(f)
		}
		if u, ok := openai.UsageOf(data); ok {
			tl.PromptTokens, tl.OutputTokens = u.PromptTokens, u.CompletionTokens
		}
		if openai.IsErrorChunk(data) {
			a.Error = "error event: " + string(data[:min(len(data), 200)])
		}
	}
}

func readArmBody(conn net.Conn, body io.Reader, t Timeouts, tl *tracing.Timeline, a *Arm, maxBody int) error {
	_ = conn.SetReadDeadline(time.Now().Add(t.Total))
	b, err := io.ReadAll(io.LimitReader(body, int64(maxBody)+1))
	tl.Done = time.Now()
	if err != nil {
		return err
	}
	if len(b) > maxBody {
		return errResponseTooLarge
	}
	if a.Status >= 300 {
		a.Error = fmt.Sprintf("status %d: %s", a.Status, b[:min(len(b), 200)])
		return nil
	}
	a.text = openai.AppendContent(nil, b)
	a.text = a.text[:min(len(a.text), maxCapture)]
	if f := openai.FinishReason(b); f != nil {
		tl.FinishReason = tracing.FinishReasonOf(f)
	}
	if u, ok := openai.UsageOf(b); ok {
		tl.PromptTokens, tl.OutputTokens = u.PromptTokens, u.CompletionTokens
	}
	return nil
}

// judge sets an arm's quality signals from its text.
func (a *Arm) judge(jsonAsked bool, refusals []string) {
	if !a.OK() {
		return
	}
	t := bytes.TrimSpace(a.text)
	a.Empty = len(t) == 0
	a.Truncated = a.Finish == "length"
	if jsonAsked {
		a.InvalidJSON = !json.Valid(t)
	}
	low := strings.ToLower(string(t[:min(len(t), 400)]))
	for _, r := range refusals {
		if strings.Contains(low, strings.ToLower(r)) {
			a.Refusal = true
			break
		}
	}
}

// keep sets what the record keeps of the arm's text.
func (a *Arm) keep(mode string, limit int) {
	a.OutputBytes = len(a.text)
	if mode == "none" {
		return
	}
	sum := sha256.Sum256(a.text)
	a.OutputSHA256 = hex.EncodeToString(sum[:])
	if mode == "full" {
		t := a.text[:min(len(a.text), limit)]
		for len(t) > 0 && !utf8.Valid(t) {
			t = t[:len(t)-1] // not half a character
		}
		a.Output = string(t)
	}
}

// similarity is the Jaccard index of two texts' sets of words and word
// pairs: 1 for the same words in the same order, 0 for nothing shared.
func similarity(a, b []byte) float64 {
	sa, sb := shingles(a), shingles(b)
	if len(sa) == 0 && len(sb) == 0 {
		return 1
	}
	inter := 0
	for k := range sa {
		if sb[k] {
			inter++
		}
	}
	return float64(inter) / float64(len(sa)+len(sb)-inter)
}

func shingles(t []byte) map[string]bool {
	words := strings.Fields(strings.ToLower(string(t)))
	s := make(map[string]bool, 2*len(words))
	for i, w := range words {
		s[w] = true
		if i > 0 {
			s[words[i-1]+" "+w] = true
		}
	}
	return s
}

// pairRecorder writes pairs to the JSONL file (rotated), keeps the recent
// ones for /admin/pairs and counts the copies dropped.
type pairRecorder struct {
	cfg  PairRecord
	log  *slog.Logger
	q    *bgqueue.Queue[*pair]
	lost atomic.Int64 // pairs the queue refused

	mu      sync.Mutex
	recent  []Pair // a ring of cfg.Recent
	next    int
	written int64
	drops   map[string]int64 // rule → copies dropped
	schemas schemaCache      // the recorder goroutine's

	f    *os.File
	w    *bufio.Writer
	size int64
	line []byte
}

func newPairRecorder(cfg PairRecord, log *slog.Logger) (*pairRecorder, error) {
	r := &pairRecorder{cfg: cfg, log: log, drops: map[string]int64{}, schemas: schemaCache{}}
	if cfg.Path != "" {
		f, err := os.OpenFile(cfg.Path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("mirror.record.path: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("mirror.record.path: %w", err)
		}
		r.f, r.w, r.size = f, bufio.NewWriterSize(f, 64<<10), st.Size()
	}
	r.q = bgqueue.Start(bgqueue.Config[*pair]{Size: 4096, Handle: r.record, Flush: r.flush, Tick: time.Second,
		OnPanic: func(v any, stack []byte) {
			log.Error("panic recovered in the pair recorder", "panic", fmt.Sprint(v), "stack", string(stack))
		}})
	return r, nil
}

func (r *pairRecorder) offer(p *pair) {
	if !r.q.Offer(p) {
		r.lost.Add(1)
	}
}

func (r *pairRecorder) dropped(rule, why string) {
	r.mu.Lock()
	r.drops[rule+" "+why]++
	r.mu.Unlock()
}

// record judges a pair and writes it (on the recorder's goroutine).
func (r *pairRecorder) record(p *pair) {
	pp := &p.Pair
	arms := []*Arm{&pp.Primary, &pp.Candidate}
	if pp.Noise != nil {
		arms = append(arms, pp.Noise)
	}
	for _, a := range arms {
		a.judge(pp.JSONAsked, r.cfg.RefusalPatterns)
	}
	if p.schema != nil {
		if s, err := r.schemas.get(p.schema); err == nil {
			pp.SchemaGiven = true
			for _, a := range arms {
				a.SchemaInvalid = a.OK() && !a.InvalidJSON && !fits(s, bytes.TrimSpace(a.text))
			}
		}
	}
	if n := len(pp.Primary.text); n > 0 && pp.Split == "" {
		pp.LengthRatio = float64(len(pp.Candidate.text)) / float64(n)
	}
	if pp.Split == "" {
		pp.Similarity = similarity(pp.Primary.text, pp.Candidate.text)
	}
	for _, a := range arms {
		a.keep(r.cfg.Output, r.cfg.MaxOutputBytes)
		a.text = nil
	}
	if r.cfg.Output == "full" && len(p.prompt) > 0 {
		t := p.prompt[:min(len(p.prompt), r.cfg.MaxOutputBytes)]
		for len(t) > 0 && !utf8.Valid(t) {
			t = t[:len(t)-1]
		}
		pp.Prompt = string(t)
	}
	r.mu.Lock()
	if r.cfg.Recent > 0 {
		if len(r.recent) < r.cfg.Recent {
			r.recent = append(r.recent, *pp)
		} else {
			r.recent[r.next] = *pp
			r.next = (r.next + 1) % r.cfg.Recent
		}
	}
	r.written++
	r.mu.Unlock()
	if r.w == nil {
		return
	}
	line, err := json.Marshal(pp)
	if err != nil {
		r.log.Warn("pair not recorded", "id", pp.ID, "err", err)
		return
	}
	if r.size+int64(len(line))+1 > r.cfg.MaxBytes {
		r.rotate()
	}
	if r.w == nil {
		return
	}
	n, _ := r.w.Write(append(line, '\n'))
	r.size += int64(n)
}

func (r *pairRecorder) flush() {
	if r.w != nil {
		if err := r.w.Flush(); err != nil {
			r.log.Warn("pairs file", "err", err)
		}
	}
}

// rotate moves PATH to PATH.1 (and PATH.1 to PATH.2 ..., up to Keep)
// and starts a new file.
func (r *pairRecorder) rotate() {
	r.flush()
	r.f.Close()
	p := r.cfg.Path
	if r.cfg.Keep == 0 {
		os.Remove(p)
	}
	for i := r.cfg.Keep; i >= 1; i-- {
		from := p
		if i > 1 {
			from = fmt.Sprintf("%s.%d", p, i-1)
		}
		os.Rename(from, fmt.Sprintf("%s.%d", p, i))
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		r.log.Warn("pairs file: rotation failed; pairs go to /admin/pairs only", "err", err)
		r.f, r.w = nil, nil
		return
	}
	r.f, r.w, r.size = f, bufio.NewWriterSize(f, 64<<10), 0
}

// PairStats is /admin/pairs: the recent pairs, oldest first, and counts.
type PairStats struct {
	Recorded int64            `json:"recorded"`
	Lost     int64            `json:"lost,omitempty"`
	Dropped  map[string]int64 `json:"dropped,omitempty"`
	Pairs    []Pair           `json:"pairs"`
}

// Stats returns the recent pairs and the counts.
func (r *pairRecorder) Stats() PairStats {
	r.q.Sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := PairStats{Recorded: r.written, Lost: r.lost.Load(), Dropped: map[string]int64{}, Pairs: make([]Pair, 0, len(r.recent))}
	for k, v := range r.drops {
		s.Dropped[k] = v
	}
	s.Pairs = append(s.Pairs, r.recent[r.next:]...)
	s.Pairs = append(s.Pairs, r.recent[:r.next]...)
	return s
}

// counts is Stats without the pairs, and without waiting for the queue:
// what a metrics scrape reads.
func (r *pairRecorder) counts() PairStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := PairStats{Recorded: r.written, Lost: r.lost.Load(), Dropped: make(map[string]int64, len(r.drops))}
	for k, v := range r.drops {
		s.Dropped[k] = v
	}
	return s
}

// Close records what is queued and closes the file.
func (r *pairRecorder) Close() {
	r.q.Close()
	if r.f != nil {
		r.f.Close()
	}
}
