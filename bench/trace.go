package bench

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/tokens"
)

// Public traces of production LLM traffic, replayed with their own
// timestamps: open loop, each request sent on schedule whether or not
// earlier ones finished (the runner's replay mode).
//
//   - mooncake: Mooncake's (Kimi's) JSONL, one request per line:
//     {"timestamp": ms from the trace's start, "input_length": tokens,
//     "output_length": tokens, "hash_ids": [ids of the prompt's 512-token
//     blocks; the same id is the same block]}.
//   - azure: the Azure LLM inference traces (2023, 2024), CSV with the
//     header TIMESTAMP,ContextTokens,GeneratedTokens and times like
//     2023-11-16 18:15:46.6805900.
//   - burstgpt: BurstGPT's CSV, header Timestamp,Model,Request tokens,
//     Response tokens,Total tokens,Log Type, Timestamp in seconds; a row
//     with 0 response tokens is a failed request: skipped and counted.
//
// A trace names lengths, not text: each request's prompt is made of
// one-token words to its input length (exact), and max_tokens is its
// output length (with --force-output-length the server is held to it).
// Mooncake's blocks become shared text: every block id always reads the
// same 512 words, so a prefix cache sees the reuse the trace recorded. A
// request longer than the backend's context is sent as recorded: the
// backend's answer (a 400, typically) is that request's result.

// The trace formats.
const (
	traceMooncake = "mooncake"
	traceAzure    = "azure"
	traceBurstGPT = "burstgpt"
)

// mooncakeBlock is the tokens of one Mooncake hash block.
const mooncakeBlock = 512

// maxTraceTokens bounds one request's lengths as a trace states them.
const maxTraceTokens = 10_000_000

// traceRecord is one request of a trace.
type traceRecord struct {
	at          time.Duration // from the trace's first request
	in, out     int
	blocks      []uint64 // mooncake's hash ids
	line        int
	traceOffset time.Duration // the record's own time in the trace
}

// traceData is a parsed trace.
type traceData struct {
	format  string
	records []traceRecord
	// skipped counts rows left out by the format's rule (burstgpt's
	// failed requests).
	skipped int
}

// sniffTrace names the format of a trace from its first line.
func sniffTrace(raw []byte) (string, error) {
	line := raw
	for len(line) > 0 {
		l, rest, _ := bytes.Cut(line, []byte("\n"))
		if l = bytes.TrimSpace(l); len(l) > 0 {
			line = l
			break
		}
		line = rest
	}
	line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
	switch {
	case len(line) == 0:
		return "", errors.New("the file is empty")
	case line[0] == '{':
		return traceMooncake, nil
	case bytes.Contains(line, []byte("ContextTokens")):
		return traceAzure, nil
	case bytes.Contains(line, []byte("Request tokens")):
		return traceBurstGPT, nil
	}
	return "", fmt.Errorf("line 1 (%.60q) is neither Mooncake JSONL, an Azure trace's header nor BurstGPT's: name it with --trace-format", line)
}

// parseTrace reads a trace in format, its records in time order (stable:
// the file's order for equal times), times from the first.
func parseTrace(raw []byte, format string) (*traceData, error) {
	var td *traceData
	var err error
	switch format {
	case traceMooncake:
		td, err = parseMooncake(raw)
	case traceAzure:
		td, err = parseAzure(raw)
	case traceBurstGPT:
		td, err = parseBurstGPT(raw)
	default:
		return nil, fmt.Errorf("trace format %q: want mooncake, azure or burstgpt", format)
	}
	if err != nil {
		return nil, err
	}
	if len(td.records) == 0 {
		return nil, fmt.Errorf("no requests in the trace (%d rows skipped)", td.skipped)
	}
	slices.SortStableFunc(td.records, func(a, b traceRecord) int { return cmpDuration(a.traceOffset, b.traceOffset) })
	first := td.records[0].traceOffset
	for i := range td.records {
		td.records[i].at = td.records[i].traceOffset - first
	}
	return td, nil
}

func cmpDuration(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkLengths holds a record's lengths to what a request can be.
func checkLengths(line, in, out int) error {
	switch {
	case in < 1 || in > maxTraceTokens:
		return fmt.Errorf("line %d: input length %d: want 1 to %d tokens", line, in, maxTraceTokens)
	case out < 0 || out > maxTraceTokens:
		return fmt.Errorf("line %d: output length %d: want 0 to %d tokens", line, out, maxTraceTokens)
	}
	return nil
}

func parseMooncake(raw []byte) (*traceData, error) {
	td := &traceData{format: traceMooncake}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		l := bytes.TrimSpace(sc.Bytes())
		if len(l) == 0 {
			continue
		}
		var e struct {
			Timestamp    *float64 `json:"timestamp"`
			InputLength  *int     `json:"input_length"`
			OutputLength *int     `json:"output_length"`
			HashIDs      []uint64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(l, &e); err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		if e.Timestamp == nil || e.InputLength == nil || e.OutputLength == nil {
			return nil, fmt.Errorf("line %d: want timestamp, input_length and output_length", n)
		}
		if ts := *e.Timestamp; ts < 0 || ts > 1e13 || math.IsNaN(ts) {
			return nil, fmt.Errorf("line %d: timestamp %v ms: want a time from the trace's start", n, ts)
		}
		if err := checkLengths(n, *e.InputLength, *e.OutputLength); err != nil {
			return nil, err
		}
		if len(e.HashIDs) > (*e.InputLength+mooncakeBlock-1)/mooncakeBlock {
			return nil, fmt.Errorf("line %d: %d hash blocks of %d tokens for an input of %d tokens", n, len(e.HashIDs), mooncakeBlock, *e.InputLength)
		}
		td.records = append(td.records, traceRecord{traceOffset: time.Duration(*e.Timestamp * float64(time.Millisecond)), in: *e.InputLength, out: *e.OutputLength,
			blocks: e.HashIDs, line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	return td, nil
}

// csvRows reads a CSV with a header, calling row with each record's
// fields by the header's names and its line number.
func csvRows(raw []byte, want []string, row func(line int, get func(string) string) error) error {
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(raw, []byte("\xef\xbb\xbf"))))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	head, err := r.Read()
	if err != nil {
		return fmt.Errorf("line 1: %v", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(h)] = i
	}
	for _, w := range want {
		if _, ok := col[w]; !ok {
			return fmt.Errorf("line 1: the header has no %q column (it has %q)", w, head)
		}
	}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return fmt.Errorf("line %d: %v", pe.Line, pe.Err)
			}
			return fmt.Errorf("line ?: %v", err)
		}
		line, _ := r.FieldPos(0)
		get := func(name string) string {
			if i := col[name]; i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		if err := row(line, get); err != nil {
			return err
		}
	}
}

// azureTimeLayouts are the Azure traces' timestamp forms: seven
// fractional digits, optionally a zone.
var azureTimeLayouts = []string{"2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999 -07:00", time.RFC3339Nano}

func parseAzure(raw []byte) (*traceData, error) {
	td := &traceData{format: traceAzure}
	var base time.Time
	err := csvRows(raw, []string{"TIMESTAMP", "ContextTokens", "GeneratedTokens"}, func(line int, get func(string) string) error {
		ts := get("TIMESTAMP")
		var t time.Time
		var err error
		for _, layout := range azureTimeLayouts {
			if t, err = time.Parse(layout, ts); err == nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("line %d: TIMESTAMP %q: want a time like 2023-11-16 18:15:46.6805900", line, ts)
		}
		in, err1 := strconv.Atoi(get("ContextTokens"))
		out, err2 := strconv.Atoi(get("GeneratedTokens"))
		if err1 != nil || err2 != nil {
			return fmt.Errorf("line %d: ContextTokens %q, GeneratedTokens %q: want whole numbers", line, get("ContextTokens"), get("GeneratedTokens"))
		}
		if err := checkLengths(line, in, out); err != nil {
			return err
		}
		if base.IsZero() {
			base = t
		}
		d := t.Sub(base)
		if d < -1000*time.Hour || d > 1000*time.Hour {
			return fmt.Errorf("line %d: TIMESTAMP %q is %v from the first row's", line, ts, d)
		}
		td.records = append(td.records, traceRecord{traceOffset: d, in: in, out: out, line: line})
		return nil
	})
	return td, err
}

func parseBurstGPT(raw []byte) (*traceData, error) {
	td := &traceData{format: traceBurstGPT}
	err := csvRows(raw, []string{"Timestamp", "Request tokens", "Response tokens"}, func(line int, get func(string) string) error {
		ts, err := strconv.ParseFloat(get("Timestamp"), 64)
		if err != nil || ts < 0 || ts > 1e10 || math.IsNaN(ts) {
			return fmt.Errorf("line %d: Timestamp %q: want seconds from the trace's start", line, get("Timestamp"))
		}
		in, err1 := strconv.Atoi(get("Request tokens"))
		out, err2 := strconv.Atoi(get("Response tokens"))
		if err1 != nil || err2 != nil {
			return fmt.Errorf("line %d: Request tokens %q, Response tokens %q: want whole numbers", line, get("Request tokens"), get("Response tokens"))
		}
		if out == 0 {
			td.skipped++ // a failed request: BurstGPT logs it with no response
			return nil
		}
		if err := checkLengths(line, in, out); err != nil {
			return err
		}
		td.records = append(td.records, traceRecord{traceOffset: time.Duration(ts * float64(time.Second)), in: in, out: out, line: line})
		return nil
	})
	return td, err
}

// parseTraceWindow reads --trace-window FROM:TO, offsets from the trace's
// first request (durations, or seconds as plain numbers); either side may
// be empty (the start, the end).
func parseTraceWindow(s string) (from, to time.Duration, err error) {
	if s == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want FROM:TO (durations or seconds, either may be empty)", s)
	}
	parse := func(v string) (time.Duration, error) {
		if v == "" {
			return 0, nil
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return time.Duration(f * float64(time.Second)), nil
		}
		return time.ParseDuration(v)
	}
	if from, err = parse(a); err != nil {
		return 0, 0, fmt.Errorf("%q: from: %v", s, err)
	}
	if to, err = parse(b); err != nil {
		return 0, 0, fmt.Errorf("%q: to: %v", s, err)
	}
	if from < 0 || to < 0 || (to > 0 && to <= from) {
		return 0, 0, fmt.Errorf("%q: want 0 ≤ FROM < TO", s)
	}
	return from, to, nil
}

// loadTrace reads s.Trace into a replay: each request in the window at
// its offset from the window's start, divided by Speedup.
func loadTrace(s *WorkloadSpec, out lengths, tok *tokens.Tokenizer) (Workload, error) {
	raw, sum, err := hashFile(s.Trace)
	if err != nil {
		return nil, err
	}
	s.TraceSHA256 = sum
	if s.TraceFormat == "" {
		if s.TraceFormat, err = sniffTrace(raw); err != nil {
			return nil, fmt.Errorf("bench: trace %s: %w", s.Trace, err)
		}
	}
	td, err := parseTrace(raw, s.TraceFormat)
	if err != nil {
		return nil, fmt.Errorf("bench: trace %s (%s): %w", s.Trace, s.TraceFormat, err)
	}
	s.TraceSkipped = td.skipped
	from, to, err := parseTraceWindow(s.TraceWindow)
	if err != nil {
		return nil, fmt.Errorf("bench: --trace-window %w", err)
	}
	if s.Speedup <= 0 {
		s.Speedup = 1
	}
	words := tok.Words()
	model, _ := json.Marshal(s.Model)
	rng := rand.New(rand.NewPCG(s.Seed, 3))
	w := &fixedSet{replay: true}
	for _, rec := range td.records {
		if rec.at < from || (to > 0 && rec.at >= to) {
			continue
		}
		maxTokens := max(rec.out, 1) // a trace's 0 would leave the length to the server
		if !out.zero() {
			maxTokens = out.Sample(rng)
		}
		prompt := tracePrompt(words, s.Seed, rec)
		r := Request{InputTokens: rec.in, MaxTokens: maxTokens, At: time.Duration(float64(rec.at-from) / s.Speedup)}
		r.Body = s.appendBody(nil, model, prompt, maxTokens)
		w.reqs = append(w.reqs, r)
	}
	if len(w.reqs) == 0 {
		return nil, fmt.Errorf("bench: trace %s: no request in the window %q", s.Trace, s.TraceWindow)
	}
	return w, nil
}

// tracePrompt makes a record's prompt: exactly rec.in one-token words;
// for a Mooncake record, each hash block's words drawn from the block's
// id alone (the same id, the same text, in any request), the rest from
// the record's own line.
func tracePrompt(words []string, seed uint64, rec traceRecord) []byte {
	b := make([]byte, 0, rec.in*7)
	n := 0
	for _, id := range rec.blocks {
		rng := rand.New(rand.NewPCG(seed^0x6d6f6f6e63616b65, id))
		for k := 0; k < mooncakeBlock && n < rec.in; k++ {
			b = append(b, words[rng.IntN(len(words))]...)
			n++
		}
	}
	rng := rand.New(rand.NewPCG(seed, uint64(rec.line)<<20|0x7472))
	for ; n < rec.in; n++ {
		b = append(b, words[rng.IntN(len(words))]...)
	}
	return b
}
