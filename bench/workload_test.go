package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/tokens"
	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/quality"
)

var (
	tokOnce sync.Once
	tok     *tokens.Tokenizer
)

func tokenizer(t testing.TB) *tokens.Tokenizer {
	tokOnce.Do(func() {
		var err error
		if tok, err = tokens.New(); err != nil {
			t.Fatal(err)
		}
	})
	return tok
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func userContent(t *testing.T, body []byte) string {
	t.Helper()
	var r openai.Request
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	var s string
	if len(r.Messages) > 0 {
		_ = json.Unmarshal(r.Messages[0].Content, &s)
	} else {
		_ = json.Unmarshal(r.Prompt, &s)
	}
	return s
}

func TestSyntheticPromptsHaveExactLengths(t *testing.T) {
	t.Parallel()
	tk := tokenizer(t)
	for _, tc := range []struct {
		name, in string
		endpoint string
	}{{"fixed chat", "300", "chat"}, {"uniform completions", "uniform:10-900", "completions"}, {"normal", "normal:200,50", "chat"}} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &WorkloadSpec{Endpoint: tc.endpoint, Model: "m", Stream: true, InputTokens: tc.in, OutputTokens: "64", ForceOutputLength: true, Seed: 7}
			w, err := newWorkload(spec, tk)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for i := range 20 {
				r := w.Request(i)
				text := userContent(t, r.Body)
				if n := tk.Count(text); n != r.InputTokens {
					t.Errorf("request %d: prompt is %d tokens, want %d", i, n, r.InputTokens)
				}
				head := text[:min(len(text), 40)]
				if seen[head] {
					t.Errorf("request %d shares its first words with another: %q", i, head)
				}
				seen[head] = true
				var req openai.Request
				_ = json.Unmarshal(r.Body, &req)
				if *req.MaxTokens != 64 || *req.MinTokens != 64 || !req.IgnoreEOS || !req.StreamOptions.IncludeUsage {
					t.Errorf("request %d: body %s lacks the forced length or include_usage", i, r.Body[len(r.Body)-120:])
				}
			}
			// Same seed, same requests.
			w2, _ := newWorkload(spec, tk)
			if !bytes.Equal(w.Request(3).Body, w2.Request(3).Body) {
				t.Error("the same seed made another request")
			}
		})
	}
}

func TestSharedPrefix(t *testing.T) {
	t.Parallel()
	tk := tokenizer(t)
	spec := &WorkloadSpec{Endpoint: "chat", Model: "m", InputTokens: "100", SharedPrefix: 60, Seed: 3}
	w, err := newWorkload(spec, tk)
	if err != nil {
		t.Fatal(err)
	}
	a, b := userContent(t, w.Request(0).Body), userContent(t, w.Request(1).Body)
	common := 0
	for common < len(a) && common < len(b) && a[common] == b[common] {
		common++
	}
	if n := tk.Count(a[:common]); n < 59 || n > 61 {
		t.Errorf("prompts share %d tokens, want 60", n)
	}
}

func TestDatasetAndShareGPT(t *testing.T) {
	t.Parallel()
	tk := tokenizer(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "d.jsonl")
	os.WriteFile(path, []byte(`{"model":"x","messages":[{"role":"user","content":"one"}],"max_tokens":5,"stream":false}
{"prompt":"two"}

{"conversations":[{"from":"human","value":"three"},{"from":"gpt","value":"a reply of some words"}]}
`), 0o644)
	spec := &WorkloadSpec{Endpoint: "chat", Model: "m", Stream: true, Dataset: path, Seed: 1}
	w, err := newWorkload(spec, tk)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.DatasetSHA256) != 64 {
		t.Errorf("dataset hash %q", spec.DatasetSHA256)
	}
	got := map[string]bool{}
	for i := range 3 {
		r := w.Request(i)
		var req openai.Request
		if err := json.Unmarshal(r.Body, &req); err != nil {
			t.Fatal(err)
		}
		if req.Model != "m" || !req.Stream {
			t.Errorf("request %s: want model m and stream", r.Body)
		}
		got[userContent(t, r.Body)] = true
		if userContent(t, r.Body) == "three" && r.MaxTokens != tk.Count("a reply of some words") {
			t.Errorf("ShareGPT max_tokens %d, want the reply's length", r.MaxTokens)
		}
	}
	if len(got) != 3 {
		t.Errorf("3 draws gave %v, want each entry once (a permutation)", got)
	}
	os.WriteFile(path, []byte("{\"prompt\":\"a\"}\nnot json\n"), 0o644)
	if _, err := newWorkload(&WorkloadSpec{Endpoint: "chat", Dataset: path}, tk); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line: err %v, want it named", err)
	}
}

func TestReplayKeepsTiming(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	var b strings.Builder
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Out of order, as a request log written at each request's end is.
	for i, off := range []time.Duration{0, 600 * time.Millisecond, 200 * time.Millisecond} {
		e := replayEntry{Time: t0.Add(off), Model: "sim-model", InputTokens: 20 + i, OutputTokens: 5}
		line, _ := json.Marshal(e)
		b.Write(line)
		b.WriteByte('\n')
	}
	os.WriteFile(path, []byte(b.String()), 0o644)
	url := startSim(t, time.Millisecond, time.Millisecond)
	cfg := baseConfig(url)
	cfg.Workload = WorkloadSpec{Endpoint: "chat", Stream: true, Replay: path, Speedup: 2, Seed: 1}
	cfg.Load = LoadSpec{Mode: "replay"}
	var csv strings.Builder
	cfg.CSV = &csv
	rec, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Stages[0].OK != 3 {
		t.Fatalf("%d of 3 replayed: %+v", rec.Stages[0].OK, rec.Stages[0])
	}
	// Sent at 0, 100 and 300ms (twice as fast as recorded).
	var sent []time.Time
	sc := bufio.NewScanner(strings.NewReader(csv.String()))
	sc.Scan()
	for sc.Scan() {
		ts, _ := time.Parse(time.RFC3339Nano, strings.Split(sc.Text(), ",")[3])
		sent = append(sent, ts)
	}
	if len(sent) != 3 {
		t.Fatalf("%d rows", len(sent))
	}
	for i, want := range []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond} {
		got := sent[i].Sub(sent[0])
		if math.Abs(float64(got-want)) > float64(15*time.Millisecond) {
			t.Errorf("request %d sent at +%v, want +%v", i, got, want)
		}
	}
	if p := rec.Stages[0].Metrics["output_tokens"]; p.Max != 5 {
		t.Errorf("output tokens max %v, want the log's 5", p.Max)
	}
}

func TestArrivals(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 1))
	for _, tc := range []struct {
		arrival string
		shape   float64
		cv      float64 // coefficient of variation of the gaps
	}{{"constant", 0, 0}, {"poisson", 0, 1}, {"gamma", 0.25, 2}, {"gamma", 4, 0.5}} {
		s := &stage{l: LoadSpec{Rate: 100, Arrival: tc.arrival, Burstiness: tc.shape}}
		var sum, sq float64
		const n = 20000
		for range n {
			g := float64(s.gap(rng)) / 1e6
			sum += g
			sq += g * g
		}
		mean := sum / n
		cv := math.Sqrt(sq/n-mean*mean) / mean
		if math.Abs(mean-10) > 0.4 || math.Abs(cv-tc.cv) > 0.1 {
			t.Errorf("%s(%v): mean gap %.2fms cv %.2f, want 10ms and %.2f", tc.arrival, tc.shape, mean, cv, tc.cv)
		}
	}
}

func TestParseLengths(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"0", "-5", "x", "uniform:9-3", "normal:5", "poisson:3", "1e9"} {
		if _, err := parseLengths(bad); err == nil {
			t.Errorf("parseLengths(%q) accepted", bad)
		}
	}
}

func FuzzParseLengths(f *testing.F) {
	for _, s := range []string{"512", "uniform:1-9", "normal:100,10", ":", "normal:,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseLengths(s)
		if err != nil || l.zero() {
			return
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for range 10 {
			if n := l.Sample(rng); n < 1 {
				t.Fatalf("%q sampled %d", s, n)
			}
		}
	})
}

// FuzzReadStream feeds arbitrary bytes to the stream reader: it must end
// with a result, never panic or hang.
func FuzzReadStream(f *testing.F) {
	f.Add([]byte(roleChunk + chunk("a") + finalChunk + usageChunk + doneChunk))
	f.Add([]byte("data: {\"error\":{}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"\\u00\"}}]}\n\n"))
	f.Add([]byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		// As chat and completion chunks, and as the Responses API's events.
		for _, responses := range []bool{false, true} {
			p := newParser(nil, mustJudge(t))
			p.tally.Responses = responses
			r := &Result{Sent: time.Now(), Status: 200}
			p.keepAll = true
			p.read(context.Background(), bytes.NewReader(stream), r, true)
			if r.OK() && (r.OutputTokens < 0 || r.TTFO < 0 || r.TTFO > 0 && r.TTFO < r.TTFT) {
				t.Fatalf("ok with %d tokens, ttft %v, ttfo %v", r.OutputTokens, r.TTFT, r.TTFO)
			}
			p.read(context.Background(), bytes.NewReader(stream), &Result{Sent: time.Now(), Status: 200}, false)
		}
	})
}

// FuzzDataset: any file given as a dataset or a replay log gives a
// workload or an error, never a panic, and every request it makes is JSON.
func FuzzDataset(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}]}`+"\n"+`{"conversations":[{"from":"human","value":"x"}]}`), false)
	f.Add([]byte(`[{"prompt":"a","max_tokens":3}]`), false)
	f.Add([]byte(`{"time":"2026-01-01T00:00:00Z","input_tokens":3,"output_tokens":2}`), true)
	f.Fuzz(func(t *testing.T, data []byte, replay bool) {
		path := filepath.Join(t.TempDir(), "f.jsonl")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		spec := &WorkloadSpec{Endpoint: "chat", Model: "m", Stream: true, Seed: 1}
		if replay {
			spec.Replay = path
		} else {
			spec.Dataset = path
		}
		w, err := newWorkload(spec, tokenizer(t))
		if err != nil {
			return
		}
		for i := range 3 {
			if b := w.Request(i).Body; !json.Valid(b) {
				t.Fatalf("request %d is not JSON: %s", i, b)
			}
		}
	})
}

func mustJudge(t testing.TB) *quality.Judge {
	j, err := quality.NewJudge(nil)
	if err != nil {
		t.Fatal(err)
	}
	return j
}
