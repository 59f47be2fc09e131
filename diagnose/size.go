package diagnose

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

const gib = 1 << 30

// DtypeBytes is the bytes per element of the dtypes sizing knows.
func DtypeBytes(dtype string) (float64, error) {
	switch strings.ToLower(dtype) {
	case "fp32", "float32":
		return 4, nil
	case "bf16", "fp16", "float16", "bfloat16", "auto", "":
		return 2, nil
	case "fp8", "fp8_e4m3", "fp8_e5m2", "int8":
		return 1, nil
	case "int4", "awq", "gptq", "fp4", "nvfp4", "mxfp4":
		return 0.5, nil
	}
	return 0, fmt.Errorf("diagnose: unknown dtype %q (have fp32, bf16, fp16, fp8, int8, int4)", dtype)
}

// SizeInput is one sizing question.
type SizeInput struct {
	Model Shape
	// Dtype is the weights' dtype, KVDtype the cache's (default: as the
	// weights, at least 1 byte).
	Dtype, KVDtype string
	GPU            GPU
	// GPUs is how many GPUs there are to use (default TP); TP the
	// tensor-parallel size of one replica (default 1).
	GPUs, TP int
	// Context is the tokens per request (prompt plus output) and
	// Concurrency the requests to hold at once.
	Context, Concurrency int
	// Utilization is the share of GPU memory the server may take
	// (vLLM's --gpu-memory-utilization, default 0.9); ReserveGiB what
	// activations, CUDA graphs and the runtime take besides weights and
	// cache (default 2 GiB per GPU, a typical vLLM profile).
	Utilization, ReserveGiB float64
	// KVMemoryGiB, when set, is the KV cache memory per GPU as the server
	// printed it ("Available KV cache memory: N GiB"), used instead of the
	// estimate.
	KVMemoryGiB float64
	// BlockSize is the KV cache block, in tokens (default 16).
	BlockSize int
}

// Size is the answer.
type Size struct {
	Model           string  `json:"model"`
	Source          string  `json:"source"`
	GPU             string  `json:"gpu"`
	GPUSource       string  `json:"gpu_source"`
	TP              int     `json:"tp"`
	WeightGiB       float64 `json:"weight_gib"`
	WeightGiBPerGPU float64 `json:"weight_gib_per_gpu"`
	// KVBytesPerToken is per token across the replica; per GPU, what
	// one rank holds.
	KVBytesPerToken       float64 `json:"kv_bytes_per_token"`
	KVBytesPerTokenPerGPU float64 `json:"kv_bytes_per_token_per_gpu"`
	// KVBytesPerSequence is one request of Context tokens (sliding-window
	// layers hold only their window).
	KVBytesPerSequence float64 `json:"kv_bytes_per_sequence"`
	KVMemoryGiBPerGPU  float64 `json:"kv_memory_gib_per_gpu"`
	KVMemoryFrom       string  `json:"kv_memory_from"`
	// KVTokens is what vLLM prints as "GPU KV cache size: N tokens";
	// MaxConcurrency its "Maximum concurrency for Context tokens per
	// request: Nx".
	KVTokens       int     `json:"kv_cache_tokens"`
	MaxConcurrency float64 `json:"max_concurrency"`
	// Sequences of Context tokens one replica holds at once; Replicas
	// and GPUsNeeded for Concurrency of them.
	Context     int `json:"context"`
	Sequences   int `json:"sequences_per_replica"`
	Concurrency int `json:"concurrency"`
	Replicas    int `json:"replicas_needed"`
	GPUsNeeded  int `json:"gpus_needed"`
	// Fits is false when the weights leave no memory for the cache.
	Fits  bool     `json:"fits"`
	Notes []string `json:"notes"`
}

// Estimate answers a sizing question.
func Estimate(in SizeInput) (Size, error) {
	m := in.Model
	if in.TP == 0 {
		in.TP = 1
	}
	if in.GPUs == 0 {
		in.GPUs = in.TP
	}
	if in.BlockSize == 0 {
		in.BlockSize = 16
	}
	if in.Utilization == 0 {
		in.Utilization = 0.9
	}
	if in.ReserveGiB == 0 {
		in.ReserveGiB = 2
	}
	for _, v := range []float64{in.Utilization, in.ReserveGiB, in.KVMemoryGiB, in.GPU.MemoryGiB, m.Params, m.WeightGiB} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Size{}, errors.New("diagnose: size: every figure must be a finite number")
		}
	}
	switch {
	case m.Layers <= 0:
		return Size{}, errors.New("diagnose: size: --layers must be positive")
	case m.Attn == AttnGQA && (m.KVHeads <= 0 || m.HeadDim <= 0):
		return Size{}, errors.New("diagnose: size: --kv-heads and --head-dim must be positive")
	case m.Attn == AttnMLA && m.KVLoraRank+m.RopeDim <= 0:
		return Size{}, errors.New("diagnose: size: an MLA model needs kv_lora_rank and qk_rope_head_dim")
	case m.Params <= 0 && m.WeightGiB <= 0:
		return Size{}, errors.New("diagnose: size: --params must be positive")
	case in.TP < 1 || in.GPUs < in.TP:
		return Size{}, errors.New("diagnose: size: --tp must be at least 1 and --gpus at least --tp")
	case in.Context < 1:
		return Size{}, errors.New("diagnose: size: --context must be at least 1")
	case in.Concurrency < 0:
		return Size{}, errors.New("diagnose: size: --concurrency must not be negative")
	case in.Utilization <= 0 || in.Utilization > 1:
		return Size{}, errors.New("diagnose: size: --gpu-memory-utilization must be in (0,1]")
	case in.GPU.MemoryGiB <= 0 && in.KVMemoryGiB <= 0:
		return Size{}, errors.New("diagnose: size: give --gpu (or --gpu-memory), or --kv-memory")
	case in.BlockSize < 1:
		return Size{}, errors.New("diagnose: size: --block-size must be at least 1")
	case in.ReserveGiB < 0 || in.KVMemoryGiB < 0:
		return Size{}, errors.New("diagnose: size: --reserve and --kv-memory must not be negative")
	}
	wb, err := DtypeBytes(in.Dtype)
	if err != nil {
		return Size{}, err
	}
	kvDtype := in.KVDtype
	if kvDtype == "" {
		kvDtype = in.Dtype
	}
	kb, err := DtypeBytes(kvDtype)
	if err != nil {
		return Size{}, err
	}
	if kb < 1 { // caches are not stored in 4 bits by the servers sized here
		kb = 1
	}
	s := Size{Model: m.Name, Source: m.Source, GPU: in.GPU.Name, GPUSource: in.GPU.Source, TP: in.TP, Context: in.Context, Concurrency: in.Concurrency}
	s.WeightGiB = m.Params * 1e9 * wb / gib
	if m.WeightGiB > 0 {
		s.WeightGiB = m.WeightGiB
		s.Notes = append(s.Notes, "weights: the checkpoint's own size (mixed precision), whatever --dtype says")
	}
	s.WeightGiBPerGPU = s.WeightGiB / float64(in.TP)

	// Per token and layer, what one rank stores.
	var perLayer, perLayerGPU float64
	switch m.Attn {
	case AttnMLA:
		perLayer = float64(m.KVLoraRank+m.RopeDim) * kb
		perLayerGPU = perLayer // the latent is replicated on every rank
		s.Notes = append(s.Notes, fmt.Sprintf("MLA: one latent of %d + %d elements per layer, replicated on each tensor-parallel rank", m.KVLoraRank, m.RopeDim))
	default:
		perLayer = 2 * float64(m.KVHeads*m.HeadDim) * kb
		heads := math.Ceil(float64(m.KVHeads) / float64(in.TP))
		perLayerGPU = 2 * heads * float64(m.HeadDim) * kb
		if in.TP > m.KVHeads {
			s.Notes = append(s.Notes, fmt.Sprintf("tp %d exceeds the %d KV heads: each rank keeps a whole head (replicated)", in.TP, m.KVHeads))
		}
	}
	full := m.Layers - m.SlidingLayers
	s.KVBytesPerToken = perLayer * float64(m.Layers)
	s.KVBytesPerTokenPerGPU = perLayerGPU * float64(m.Layers)
	s.KVBytesPerSequence = perLayer * (float64(full)*float64(in.Context) + float64(m.SlidingLayers)*math.Min(float64(in.Context), float64(m.SlidingWindow)))
	if m.SlidingLayers > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%d of %d layers attend within a %d-token window and hold only that much; the token count below assumes every layer holds every token, as a cache sized for full layers does",
			m.SlidingLayers, m.Layers, m.SlidingWindow))
	}
	if in.Context > m.MaxContext && m.MaxContext > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("--context %d is beyond the model's %d tokens", in.Context, m.MaxContext))
	}

	if in.KVMemoryGiB > 0 {
		s.KVMemoryGiBPerGPU, s.KVMemoryFrom = in.KVMemoryGiB, "given (the server's \"Available KV cache memory\")"
	} else {
		s.KVMemoryGiBPerGPU = in.GPU.MemoryGiB*in.Utilization - s.WeightGiBPerGPU - in.ReserveGiB
		s.KVMemoryFrom = fmt.Sprintf("%.0f GiB × %.2f utilisation − %.1f GiB weights − %.1f GiB reserve (activations, CUDA graphs, runtime)",
			in.GPU.MemoryGiB, in.Utilization, s.WeightGiBPerGPU, in.ReserveGiB)
	}
	if s.KVMemoryGiBPerGPU <= 0 {
		s.KVMemoryGiBPerGPU = 0
		s.Notes = append(s.Notes, fmt.Sprintf("the weights (%.1f GiB per GPU) leave no memory for the cache: raise --tp or use a smaller dtype", s.WeightGiBPerGPU))
		return s, nil
	}
	// vLLM: whole blocks of BlockSize tokens, each holding every layer.
	block := float64(in.BlockSize) * s.KVBytesPerTokenPerGPU
	blocks := math.Floor(s.KVMemoryGiBPerGPU * gib / block)
	s.KVTokens = int(blocks) * in.BlockSize
	s.MaxConcurrency = float64(s.KVTokens) / float64(in.Context)
	s.Sequences = s.KVTokens / in.Context
	s.Fits = s.Sequences >= 1
	if in.Concurrency > 0 && s.Sequences > 0 {
		s.Replicas = (in.Concurrency + s.Sequences - 1) / s.Sequences
		s.GPUsNeeded = s.Replicas * in.TP
		if s.GPUsNeeded > in.GPUs {
			s.Notes = append(s.Notes, fmt.Sprintf("%d GPUs are needed for %d requests of %d tokens at once; %d are given", s.GPUsNeeded, in.Concurrency, in.Context, in.GPUs))
		}
	}
	if !s.Fits {
		s.Notes = append(s.Notes, fmt.Sprintf("not one request of %d tokens fits the cache (%d tokens): raise --tp, shorten the context or store the cache in fp8", in.Context, s.KVTokens))
	}
	return s, nil
}

// Write prints the answer for a terminal.
func (s *Size) Write(w io.Writer) {
	fmt.Fprintf(w, "model %s (%s)\n", s.Model, s.Source)
	if s.GPU != "" {
		fmt.Fprintf(w, "gpu %s (%s), tensor parallel %d\n\n", s.GPU, s.GPUSource, s.TP)
	}
	fmt.Fprintf(w, "weights:               %.1f GiB (%.1f GiB per GPU)\n", s.WeightGiB, s.WeightGiBPerGPU)
	fmt.Fprintf(w, "KV cache per token:    %s (%s per GPU)\n", bytesText(s.KVBytesPerToken), bytesText(s.KVBytesPerTokenPerGPU))
	fmt.Fprintf(w, "KV cache per request:  %s at %d tokens\n", bytesText(s.KVBytesPerSequence), s.Context)
	fmt.Fprintf(w, "KV cache memory:       %.2f GiB per GPU (%s)\n", s.KVMemoryGiBPerGPU, s.KVMemoryFrom)
	fmt.Fprintf(w, "GPU KV cache size:     %d tokens\n", s.KVTokens)
	fmt.Fprintf(w, "Maximum concurrency for %d tokens per request: %.2fx\n", s.Context, s.MaxConcurrency)
	if s.Concurrency > 0 && s.Sequences > 0 {
		fmt.Fprintf(w, "for %d requests at once: %d replica(s) of %d GPU(s) = %d GPUs\n", s.Concurrency, s.Replicas, s.TP, s.GPUsNeeded)
	}
	for _, n := range s.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func bytesText(b float64) string {
	switch {
	case b >= gib:
		return fmt.Sprintf("%.2f GiB", b/gib)
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
