package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/bgqueue"
	"github.com/infergate/infergate/internal/jsonl"
	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/quality"
)

// maxCapture bounds the text kept of each answer of a pair while it is
// judged (an answer that goes on past it is judged on its first MiB).
const maxCapture = 1 << 20

// MaxCapture is how much of an answer's text a flight needs: the
// gateway collects no more.
const MaxCapture = maxCapture

// Recorder judges finished flights and writes their pairs to the JSONL
// file (internal/jsonl: rotated, 0600, reopened after a write error,
// lost lines counted), keeps the recent ones for /admin/pairs and counts
// the copies dropped. Its work runs on one goroutine of its own; its
// methods are safe for concurrent use.
type Recorder struct {
	cfg   Record
	log   *slog.Logger
	judge *quality.Judge
	q     *bgqueue.Queue[*Flight]
	lost  atomic.Int64 // flights the queue refused
	file  *jsonl.Writer

	mu      sync.Mutex
	recent  []Pair // a ring of cfg.Recent
	next    int
	written int64
	drops   map[string]int64 // "rule reason" → copies dropped

	line []byte // the recorder goroutine's
}

// NewRecorder opens cfg.Path (when set) and starts the recorder.
func NewRecorder(cfg Record, log *slog.Logger) (*Recorder, error) {
	j, err := quality.NewJudge(cfg.RefusalPatterns)
	if err != nil {
		return nil, fmt.Errorf("mirror.record.refusal_patterns: %w", err)
	}
	r := &Recorder{cfg: cfg, log: log, judge: j, drops: map[string]int64{}}
	if cfg.Path != "" {
		if r.file, err = jsonl.Open(jsonl.Config{Path: cfg.Path, MaxBytes: cfg.MaxBytes, MaxFiles: cfg.MaxFiles}); err != nil {
			return nil, fmt.Errorf("mirror.record.path: %w", err)
		}
	}
	flush := func() {}
	if r.file != nil {
		flush = r.file.Flush
	}
	r.q = bgqueue.Start(bgqueue.Config[*Flight]{Size: 4096, Handle: r.record, Flush: flush, Tick: time.Second,
		OnPanic: func(v any, stack []byte) {
			log.Error("panic recovered in the pair recorder", "panic", fmt.Sprint(v), "stack", string(stack))
		}})
	return r, nil
}

func (r *Recorder) offer(f *Flight) {
	if !r.q.Offer(f) {
		r.lost.Add(1)
	}
}

// Dropped counts a copy of rule not made, and why (cap_full, aa_cap_full).
func (r *Recorder) Dropped(rule, why string) {
	r.mu.Lock()
	r.drops[rule+" "+why]++
	r.mu.Unlock()
}

// record judges a flight and writes its pair (on the recorder's
// goroutine).
func (r *Recorder) record(f *Flight) {
	p := f.meta
	ask := quality.AskOf(f.Body)
	p.JSONAsked = ask.JSON
	p.SchemaGiven = ask.Schema != nil && r.judge.SchemaUsable(ask.Schema)
	answers := []*Answer{&f.Primary, &f.Candidate}
	if f.Noise != nil {
		answers = append(answers, f.Noise)
	}
	// The served arm's ByPolicy says the gateway's policy set the output
	// limit of the body the copies carry too: a copy's cut at it is the
	// policy's as well, unless the rule sets a limit of its own.
	clamped := f.Served().ByPolicy
	for _, a := range answers {
		aAsk, byPolicy := ask, a.ByPolicy
		if p.Split == "" && a != &f.Primary {
			byPolicy = clamped
			if a == &f.Candidate && f.Rule != nil {
				changed, setsCap := f.Rule.Overrides("max_tokens", "max_completion_tokens", "max_output_tokens")
				if changed {
					aAsk = quality.AskOf(f.Rule.Copy(f.Body))
				}
				byPolicy = clamped && !setsCap
			}
		}
		if a.Body != nil {
			// The one account of an answer (openai.Tally), as a stream's
			// events are counted and as bench reads a plain body.
			t := openai.Tally{TextLimit: maxCapture, Responses: p.Path == openai.ResponsesPath}
			t.AddBody(a.Body, time.Time{})
			a.Text, a.ToolCalls, a.Body = t.Text[:min(len(t.Text), maxCapture)], t.ToolCalls, nil
		}
		if a.OK() {
			a.Signals = r.judge.Judge(quality.Answer{Text: a.Text, ToolCalls: a.ToolCalls, Finish: a.Finish, ByPolicy: byPolicy, OutputTokens: a.OutputTokens, Ask: aAsk})
		}
	}
	p.Primary, p.Candidate = f.Primary.Arm, f.Candidate.Arm
	if p.Split == "" {
		if n := len(f.Primary.Text); n > 0 {
			p.LengthRatio = float64(len(f.Candidate.Text)) / float64(n)
		}
		p.Similarity = similarity(f.Primary.Text, f.Candidate.Text)
	}
	r.keep(&p.Primary, f.Primary.Text)
	r.keep(&p.Candidate, f.Candidate.Text)
	if f.Noise != nil {
		n := f.Noise.Arm
		r.keep(&n, f.Noise.Text)
		p.Noise = &n
	}
	if r.cfg.Output == "full" {
		p.Prompt = cut(lastUserText(f.Body), r.cfg.MaxOutputBytes)
	}
	r.mu.Lock()
	if r.cfg.Recent > 0 {
		if len(r.recent) < r.cfg.Recent {
			r.recent = append(r.recent, p)
		} else {
			r.recent[r.next] = p
			r.next = (r.next + 1) % r.cfg.Recent
		}
	}
	r.written++
	r.mu.Unlock()
	if r.file == nil {
		return
	}
	line, err := json.Marshal(&p)
	if err != nil {
		r.log.Warn("pair not recorded", "id", p.ID, "err", err)
		return
	}
	r.file.Write(line)
}

// keep sets what the record keeps of an arm's text.
func (r *Recorder) keep(a *Arm, text []byte) {
	a.OutputBytes = len(text)
	if r.cfg.Output == "none" {
		return
	}
	sum := sha256.Sum256(text)
	a.OutputSHA256 = hex.EncodeToString(sum[:])
	if r.cfg.Output == "full" {
		a.Output = cut(text, r.cfg.MaxOutputBytes)
	}
}

// cut is t's first limit bytes as a string, not ending in half a
// character.
func cut(t []byte, limit int) string {
	t = t[:min(len(t), limit)]
	for len(t) > 0 && !utf8.Valid(t) {
		t = t[:len(t)-1]
	}
	return string(t)
}

// Stats returns the recent pairs and the counts (/admin/pairs), every
// flight handed over before the call included.
func (r *Recorder) Stats() adminapi.Pairs {
	r.q.Sync()
	s := r.Counts()
	r.mu.Lock()
	defer r.mu.Unlock()
	s.Pairs = make([]Pair, 0, len(r.recent))
	s.Pairs = append(s.Pairs, r.recent[r.next:]...)
	s.Pairs = append(s.Pairs, r.recent[:r.next]...)
	return s
}

// Counts is Stats without the pairs, and without waiting for the queue:
// what a metrics scrape reads.
func (r *Recorder) Counts() adminapi.Pairs {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := adminapi.Pairs{Recorded: r.written, Lost: r.lost.Load(), Dropped: make(map[string]int64, len(r.drops))}
	if r.file != nil {
		s.FileLost = r.file.Lost()
	}
	for k, v := range r.drops {
		s.Dropped[k] = v
	}
	return s
}

// Close records what is queued and closes the file. It is safe to call
// twice.
func (r *Recorder) Close() {
	r.q.Close()
	if r.file != nil {
		if err := r.file.Close(); err != nil {
			r.log.Warn("pairs file", "err", err)
		}
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

// lastUserText is the text of a chat request's last user message (its
// text parts joined), for the judge; of a Responses request, its input's.
func lastUserText(body []byte) []byte {
	var text []byte
	openai.EachMember(body, func(key []byte, f openai.Field) bool {
		if !openai.KeyIs(key, "messages") && !openai.KeyIs(key, "input") {
			return true
		}
		arr := f.Of(body)
		if len(arr) > 0 && arr[0] == '"' { // a Responses string input
			s, _ := openai.Unquote(arr)
			text = append(text, s...)
			return false
		}
		openai.EachElement(arr, func(sp openai.Span) bool {
			m := arr[sp.Start:sp.End]
			user := false
			var content []byte
			openai.EachMember(m, func(k []byte, mf openai.Field) bool {
				switch {
				case openai.KeyIs(k, "role"):
					user = string(mf.Of(m)) == `"user"`
				case openai.KeyIs(k, "content"):
					content = mf.Of(m)
				}
				return true
			})
			if user && len(content) > 0 {
				text = text[:0]
				if content[0] == '"' {
					s, _ := openai.Unquote(content)
					text = append(text, s...)
				} else {
					text = openai.AppendContent(text, content) // the parts' text
				}
			}
			return true
		})
		return false
	})
	return text
}
