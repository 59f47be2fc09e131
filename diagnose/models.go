package diagnose

import (
	"fmt"
	"sort"
	"strings"
)

// Attention kinds: how a model's KV cache grows.
const (
	// GQA (and MHA, MQA): keys and values per KV head per layer.
	AttnGQA = "gqa"
	// MLA (DeepSeek): one compressed latent plus a rotary key per layer,
	// kv_lora_rank + qk_rope_head_dim elements, the same on every
	// tensor-parallel rank.
	AttnMLA = "mla"
)

// Shape is what sizing needs of a model, as its config.json gives it.
type Shape struct {
	Name string `json:"name"`
	// Params is the parameter count in billions; Active the count used
	// per token by a mixture of experts (informational).
	Params float64 `json:"params_b"`
	Active float64 `json:"active_params_b,omitempty"`
	// WeightGiB overrides Params × dtype: the checkpoint's size on the
	// GPU, for mixed-precision releases (gpt-oss's MXFP4 experts).
	WeightGiB float64 `json:"weight_gib,omitempty"`
	Layers    int     `json:"num_hidden_layers"`
	// KVHeads (num_key_value_heads) and HeadDim (head_dim, or
	// hidden_size / num_attention_heads) size GQA's cache.
	KVHeads int    `json:"num_key_value_heads,omitempty"`
	HeadDim int    `json:"head_dim,omitempty"`
	Attn    string `json:"attention"`
	// KVLoraRank and RopeDim size MLA's cache.
	KVLoraRank int `json:"kv_lora_rank,omitempty"`
	RopeDim    int `json:"qk_rope_head_dim,omitempty"`
	// SlidingLayers of Layers attend within SlidingWindow tokens only
	// (gpt-oss alternates sliding and full layers).
	SlidingLayers int `json:"sliding_layers,omitempty"`
	SlidingWindow int `json:"sliding_window,omitempty"`
	// MaxContext is max_position_embeddings.
	MaxContext int    `json:"max_position_embeddings"`
	Source     string `json:"source"`
}

func hf(repo string) string { return "https://huggingface.co/" + repo + "/blob/main/config.json" }

// models is the built-in table of common shapes, each from its
// config.json on Hugging Face (parameter counts from the model card).
var models = []Shape{
	{Name: "llama-3.2-1b", Params: 1.24, Layers: 16, KVHeads: 8, HeadDim: 64, Attn: AttnGQA, MaxContext: 131072, Source: hf("meta-llama/Llama-3.2-1B-Instruct")},
	{Name: "llama-3.2-3b", Params: 3.21, Layers: 28, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 131072, Source: hf("meta-llama/Llama-3.2-3B-Instruct")},
	{Name: "llama-3.1-8b", Params: 8.03, Layers: 32, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 131072, Source: hf("meta-llama/Llama-3.1-8B-Instruct")},
	{Name: "llama-3.1-70b", Params: 70.6, Layers: 80, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 131072, Source: hf("meta-llama/Llama-3.1-70B-Instruct")},
	{Name: "llama-3.3-70b", Params: 70.6, Layers: 80, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 131072, Source: hf("meta-llama/Llama-3.3-70B-Instruct")},
	{Name: "llama-3.1-405b", Params: 405.9, Layers: 126, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 131072, Source: hf("meta-llama/Llama-3.1-405B-Instruct")},
	{Name: "qwen2.5-7b", Params: 7.62, Layers: 28, KVHeads: 4, HeadDim: 128, Attn: AttnGQA, MaxContext: 32768, Source: hf("Qwen/Qwen2.5-7B-Instruct")},
	{Name: "qwen2.5-14b", Params: 14.7, Layers: 48, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 32768, Source: hf("Qwen/Qwen2.5-14B-Instruct")},
	{Name: "qwen2.5-32b", Params: 32.8, Layers: 64, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 32768, Source: hf("Qwen/Qwen2.5-32B-Instruct")},
	{Name: "qwen2.5-72b", Params: 72.7, Layers: 80, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 32768, Source: hf("Qwen/Qwen2.5-72B-Instruct")},
	{Name: "qwen3-8b", Params: 8.19, Layers: 36, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 40960, Source: hf("Qwen/Qwen3-8B")},
	{Name: "qwen3-14b", Params: 14.8, Layers: 40, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 40960, Source: hf("Qwen/Qwen3-14B")},
	{Name: "qwen3-32b", Params: 32.8, Layers: 64, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 40960, Source: hf("Qwen/Qwen3-32B")},
	{Name: "qwen3-30b-a3b", Params: 30.5, Active: 3.3, Layers: 48, KVHeads: 4, HeadDim: 128, Attn: AttnGQA, MaxContext: 40960, Source: hf("Qwen/Qwen3-30B-A3B")},
	{Name: "qwen3-235b-a22b", Params: 235, Active: 22, Layers: 94, KVHeads: 4, HeadDim: 128, Attn: AttnGQA, MaxContext: 40960, Source: hf("Qwen/Qwen3-235B-A22B")},
	{Name: "mistral-7b", Params: 7.25, Layers: 32, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 32768, Source: hf("mistralai/Mistral-7B-Instruct-v0.3")},
	{Name: "mixtral-8x7b", Params: 46.7, Active: 12.9, Layers: 32, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 32768, Source: hf("mistralai/Mixtral-8x7B-Instruct-v0.1")},
	{Name: "mixtral-8x22b", Params: 141, Active: 39, Layers: 56, KVHeads: 8, HeadDim: 128, Attn: AttnGQA, MaxContext: 65536, Source: hf("mistralai/Mixtral-8x22B-Instruct-v0.1")},
	{Name: "deepseek-v3", Params: 671, Active: 37, Layers: 61, Attn: AttnMLA, KVLoraRank: 512, RopeDim: 64, MaxContext: 163840, Source: hf("deepseek-ai/DeepSeek-V3")},
	{Name: "gpt-oss-20b", Params: 20.9, Active: 3.6, WeightGiB: 12.8, Layers: 24, KVHeads: 8, HeadDim: 64, Attn: AttnGQA, SlidingLayers: 12, SlidingWindow: 128, MaxContext: 131072, Source: hf("openai/gpt-oss-20b")},
	{Name: "gpt-oss-120b", Params: 116.8, Active: 5.1, WeightGiB: 60.8, Layers: 36, KVHeads: 8, HeadDim: 64, Attn: AttnGQA, SlidingLayers: 18, SlidingWindow: 128, MaxContext: 131072, Source: hf("openai/gpt-oss-120b")},
}

// GPU is a GPU's memory, from its vendor's datasheet.
type GPU struct {
	Name      string  `json:"name"`
	MemoryGiB float64 `json:"memory_gib"`
	Source    string  `json:"source"`
}

// gpus is the built-in table. Vendors state memory in GB; the cards
// report (nvidia-smi) close to that figure in GiB, which is what the
// sizing uses.
var gpus = []GPU{
	{"T4-16G", 16, "NVIDIA T4 datasheet: 16 GB GDDR6"},
	{"L4-24G", 24, "NVIDIA L4 datasheet: 24 GB GDDR6"},
	{"A10G-24G", 24, "AWS G5 / NVIDIA A10G: 24 GB GDDR6"},
	{"RTX4090-24G", 24, "NVIDIA GeForce RTX 4090 specifications: 24 GB GDDR6X"},
	{"L40S-48G", 48, "NVIDIA L40S datasheet: 48 GB GDDR6"},
	{"A100-40G", 40, "NVIDIA A100 datasheet: 40 GB HBM2"},
	{"A100-80G", 80, "NVIDIA A100 datasheet: 80 GB HBM2e"},
	{"H100-80G", 80, "NVIDIA H100 datasheet: 80 GB HBM3 (SXM and PCIe)"},
	{"H200-141G", 141, "NVIDIA H200 datasheet: 141 GB HBM3e"},
	{"B200-180G", 180, "NVIDIA DGX B200 datasheet: 1,440 GB over 8 GPUs"},
	{"MI300X-192G", 192, "AMD Instinct MI300X datasheet: 192 GB HBM3"},
}

// Models lists the built-in model names.
func Models() []string {
	out := make([]string, len(models))
	for i, m := range models {
		out[i] = m.Name
	}
	return out
}

// GPUs lists the built-in GPU names.
func GPUs() []string {
	out := make([]string, len(gpus))
	for i, g := range gpus {
		out[i] = g.Name
	}
	sort.Strings(out)
	return out
}

// norm folds case and drops an organisation prefix and "-instruct".
func norm(s string) string {
	s = strings.ToLower(s)
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
	}
	s = strings.TrimSuffix(s, "-instruct")
	return strings.ReplaceAll(s, "meta-", "")
}

// LookupModel finds a built-in model by name ("Qwen/Qwen3-14B" and
// "qwen3-14b" both work).
func LookupModel(name string) (Shape, error) {
	n := norm(name)
	for _, m := range models {
		if m.Name == n {
			return m, nil
		}
	}
	return Shape{}, fmt.Errorf("diagnose: unknown model %q (built in: %s; or give --params, --layers, --kv-heads, --head-dim)", name, strings.Join(Models(), ", "))
}

// LookupGPU finds a built-in GPU by name, case-insensitively; "H100" is
// H100-80G when only one size is built in.
func LookupGPU(name string) (GPU, error) {
	n := strings.ToUpper(name)
	var hits []GPU
	for _, g := range gpus {
		u := strings.ToUpper(g.Name)
		if u == n {
			return g, nil
		}
		if strings.HasPrefix(u, n+"-") {
			hits = append(hits, g)
		}
	}
	if len(hits) == 1 {
		return hits[0], nil
	}
	return GPU{}, fmt.Errorf("diagnose: unknown GPU %q (built in: %s; or give --gpu-memory GiB)", name, strings.Join(GPUs(), ", "))
}
