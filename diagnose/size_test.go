package diagnose

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func mustModel(t *testing.T, name string) Shape {
	t.Helper()
	m, err := LookupModel(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSizeMatchesVLLM holds the figures vLLM printed at start-up, given
// the KV cache memory it printed beside them:
//   - Qwen3-14B, one GPU (LMCache issue #1739, vLLM V1): "Available KV
//     cache memory: 6.51 GiB", "GPU KV cache size: 42,656 tokens",
//     "Maximum concurrency for 32,768 tokens per request: 1.30x";
//   - Llama-3.1-8B-Instruct on an RTX 3090 (vLLM issue #10517, V0):
//     kv_cache_size=3.81GiB → "GPU blocks: 1952", "Maximum concurrency
//     for 20000 tokens per request: 1.56x"; and kv_cache_size=2.89GiB →
//     1478 blocks, "23648" tokens, "0.82x" for 29000.
//
// The printed GiB are rounded to two places, so the block count must fall
// within what that rounding allows; the Qwen figure is exact.
func TestSizeMatchesVLLM(t *testing.T) {
	for _, tc := range []struct {
		model     string
		kvGiB     float64
		context   int
		tokens    int
		maxConc   string
		exactOnly bool
	}{
		{"Qwen/Qwen3-14B", 6.51, 32768, 42656, "1.30", true},
		{"meta-llama/Llama-3.1-8B-Instruct", 3.81, 20000, 1952 * 16, "1.56", false},
		{"meta-llama/Llama-3.1-8B-Instruct", 2.89, 29000, 23648, "0.82", false},
	} {
		t.Run(fmt.Sprintf("%s/%.2f", tc.model, tc.kvGiB), func(t *testing.T) {
			in := SizeInput{Model: mustModel(t, tc.model), Dtype: "bf16", Context: tc.context, KVMemoryGiB: tc.kvGiB}
			s, err := Estimate(in)
			if err != nil {
				t.Fatal(err)
			}
			if tc.exactOnly {
				if s.KVTokens != tc.tokens {
					t.Fatalf("GPU KV cache size %d tokens, vLLM printed %d", s.KVTokens, tc.tokens)
				}
			} else {
				lo, hi := in, in
				lo.KVMemoryGiB, hi.KVMemoryGiB = tc.kvGiB-0.005, tc.kvGiB+0.005
				a, _ := Estimate(lo)
				b, _ := Estimate(hi)
				if tc.tokens < a.KVTokens || tc.tokens > b.KVTokens {
					t.Fatalf("vLLM's %d tokens outside [%d, %d] for %.2f GiB ± rounding", tc.tokens, a.KVTokens, b.KVTokens, tc.kvGiB)
				}
				s.MaxConcurrency = float64(tc.tokens) / float64(tc.context)
			}
			if got := fmt.Sprintf("%.2f", s.MaxConcurrency); got != tc.maxConc {
				t.Errorf("maximum concurrency %sx, vLLM printed %sx", got, tc.maxConc)
			}
		})
	}
}

// TestKVBytesPerToken holds the per-token cache of each attention kind:
// GQA counts KV heads, not query heads; MLA its latent; tensor
// parallelism splits heads until each rank has one.
func TestKVBytesPerToken(t *testing.T) {
	for _, tc := range []struct {
		model         string
		tp            int
		kv            string
		token, perGPU float64
	}{
		// 2 × 32 layers × 8 KV heads × 128 × 2 bytes = 128 KiB (not the 32
		// query heads' 512 KiB).
		{"llama-3.1-8b", 1, "bf16", 131072, 131072},
		{"llama-3.1-8b", 2, "bf16", 131072, 65536},
		{"llama-3.1-70b", 4, "fp8", 163840, 40960},
		// 4 KV heads on 8 ranks: each keeps one.
		{"qwen3-235b-a22b", 8, "bf16", 2 * 94 * 4 * 128 * 2, 2 * 94 * 1 * 128 * 2},
		// MLA: 61 layers × (512 + 64) × 2 bytes, on every rank.
		{"deepseek-v3", 8, "bf16", 61 * 576 * 2, 61 * 576 * 2},
	} {
		s, err := Estimate(SizeInput{Model: mustModel(t, tc.model), Dtype: "bf16", KVDtype: tc.kv, TP: tc.tp, Context: 4096, KVMemoryGiB: 10})
		if err != nil {
			t.Fatal(err)
		}
		if s.KVBytesPerToken != tc.token || s.KVBytesPerTokenPerGPU != tc.perGPU {
			t.Errorf("%s tp%d %s: %v B/token, %v per GPU; want %v, %v", tc.model, tc.tp, tc.kv, s.KVBytesPerToken, s.KVBytesPerTokenPerGPU, tc.token, tc.perGPU)
		}
	}
}

func TestSizeFromGPU(t *testing.T) {
	h100, err := LookupGPU("h100")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Estimate(SizeInput{Model: mustModel(t, "llama-3.1-8b"), Dtype: "bf16", GPU: h100, Context: 8192, Concurrency: 300})
	if err != nil {
		t.Fatal(err)
	}
	// vLLM loaded these weights as 14.9888 GB (issue #10517): within 1%.
	if math.Abs(s.WeightGiB-14.9888)/14.9888 > 0.01 {
		t.Errorf("weights %.2f GiB, vLLM loaded 14.99", s.WeightGiB)
	}
	// 80 × 0.9 − weights − 2 GiB, in whole 16-token blocks of 128 KiB.
	want := int(math.Floor((72-s.WeightGiB-2)*gib/(16*131072))) * 16
	if s.KVTokens != want || s.Sequences != want/8192 || !s.Fits {
		t.Fatalf("%d tokens, %d sequences; want %d, %d", s.KVTokens, s.Sequences, want, want/8192)
	}
	if s.Replicas != (300+s.Sequences-1)/s.Sequences || s.GPUsNeeded != s.Replicas {
		t.Errorf("%d replicas, %d GPUs for 300 at once with %d each", s.Replicas, s.GPUsNeeded, s.Sequences)
	}

	big, err := Estimate(SizeInput{Model: mustModel(t, "llama-3.1-70b"), Dtype: "bf16", GPU: h100, Context: 8192})
	if err != nil {
		t.Fatal(err)
	}
	if big.Fits || big.KVTokens != 0 || !strings.Contains(strings.Join(big.Notes, " "), "no memory for the cache") {
		t.Errorf("70B in bf16 on one H100: %+v", big)
	}
	tp4, _ := Estimate(SizeInput{Model: mustModel(t, "llama-3.1-70b"), Dtype: "bf16", GPU: h100, TP: 4, Context: 8192})
	if !tp4.Fits || tp4.WeightGiBPerGPU >= 40 {
		t.Errorf("70B on four H100s: %+v", tp4)
	}
}

func TestSlidingWindowPerSequence(t *testing.T) {
	m := mustModel(t, "gpt-oss-120b")
	s, err := Estimate(SizeInput{Model: m, Dtype: "bf16", Context: 8192, KVMemoryGiB: 10})
	if err != nil {
		t.Fatal(err)
	}
	per := 2.0 * 8 * 64 * 2
	if want := per * (18*8192 + 18*128); s.KVBytesPerSequence != want {
		t.Errorf("per sequence %v, want %v (18 full layers × 8192 + 18 window layers × 128)", s.KVBytesPerSequence, want)
	}
}

func TestSizeRefusesNonsense(t *testing.T) {
	m := mustModel(t, "llama-3.1-8b")
	for _, in := range []SizeInput{
		{Model: m, Context: 0, KVMemoryGiB: 1},
		{Model: m, Context: 10},
		{Model: m, Context: 10, KVMemoryGiB: 1, Dtype: "fp3"},
		{Model: m, Context: 10, KVMemoryGiB: 1, TP: 4, GPUs: 2},
		{Model: m, Context: 10, KVMemoryGiB: 1, BlockSize: -16},
		{Model: m, Context: 10, KVMemoryGiB: -1},
		{Model: m, Context: 10, KVMemoryGiB: 1, Utilization: math.NaN()},
		{Model: m, Context: 10, KVMemoryGiB: 1, ReserveGiB: math.Inf(1)},
		{Model: Shape{Layers: 2, Attn: AttnGQA, KVHeads: 0, HeadDim: 2, Params: 1}, Context: 10, KVMemoryGiB: 1},
	} {
		if _, err := Estimate(in); err == nil {
			t.Errorf("%+v accepted", in)
		}
	}
	if _, err := LookupModel("gpt-5"); err == nil {
		t.Error("an unknown model was found")
	}
	if _, err := LookupGPU("A100"); err == nil {
		t.Error("A100 is ambiguous (40G, 80G) but was found")
	}
}
