package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/infergate/infergate/diagnose"
)

const sizeSynopsis = `size --model NAME | --params 8B --layers L --kv-heads H --head-dim D  --gpu H100-80G [--gpus N] [--tp N] [--dtype bf16] [--kv-dtype fp8] --context 8192 --concurrency 64 [--json]

Sizes a deployment: the weights' memory, the KV cache per token and per
request (2 × layers × KV heads × head dim × bytes: GQA counts KV heads, not
query heads; DeepSeek's MLA its latent; sliding-window layers their
window), the KV cache that fits after the weights and a stated reserve for
activations, CUDA graphs and the runtime, the tokens that cache holds in
vLLM's 16-token blocks ("GPU KV cache size: N tokens", "Maximum concurrency
for L tokens per request: Nx", as vLLM prints them at start-up), how many
requests of --context tokens fit at once, and how many GPUs --concurrency
of them needs.

--kv-memory GiB takes the server's own "Available KV cache memory" instead
of the estimate. Built-in models and GPUs, each with its source: --list.`

func runSize(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("size", sizeSynopsis, stderr)
	model := fs.String("model", "", "a built-in model (see --list), e.g. llama-3.1-8b or Qwen/Qwen3-14B")
	params := fs.String("params", "", "parameters, e.g. 8B or 70.6B (without --model)")
	layers := fs.Int("layers", 0, "num_hidden_layers (without --model)")
	kvHeads := fs.Int("kv-heads", 0, "num_key_value_heads (without --model)")
	headDim := fs.Int("head-dim", 0, "head_dim (without --model; hidden_size / num_attention_heads)")
	dtype := fs.String("dtype", "bf16", "weights: bf16, fp16, fp8, int8, int4")
	kvDtype := fs.String("kv-dtype", "", "KV cache: bf16, fp8 (default: as the weights, at least one byte)")
	gpuName := fs.String("gpu", "", "a built-in GPU, e.g. H100-80G (see --list)")
	gpuMem := fs.Float64("gpu-memory", 0, "GPU memory (GiB), instead of --gpu")
	gpus := fs.Int("gpus", 0, "GPUs available (default --tp)")
	tp := fs.Int("tp", 1, "tensor-parallel size of one replica")
	ctxLen := fs.Int("context", 8192, "tokens per request, prompt plus output (vLLM's max_model_len)")
	conc := fs.Int("concurrency", 0, "requests to hold at once (0: skip the GPU count)")
	util := fs.Float64("gpu-memory-utilization", 0.9, "share of GPU memory the server takes (vLLM's default 0.9)")
	reserve := fs.Float64("reserve", 2, "GiB per GPU for activations, CUDA graphs and the runtime")
	kvMem := fs.Float64("kv-memory", 0, "KV cache memory per GPU (GiB) as the server printed it, instead of the estimate")
	block := fs.Int("block-size", 16, "KV cache block size (tokens)")
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	list := fs.Bool("list", false, "list the built-in models and GPUs with their sources")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *list {
		fmt.Fprintln(stdout, "models:")
		for _, n := range diagnose.Models() {
			m, _ := diagnose.LookupModel(n)
			fmt.Fprintf(stdout, "  %-16s %s\n", n, m.Source)
		}
		fmt.Fprintln(stdout, "gpus:")
		for _, n := range diagnose.GPUs() {
			g, _ := diagnose.LookupGPU(n)
			fmt.Fprintf(stdout, "  %-12s %.0f GiB  %s\n", n, g.MemoryGiB, g.Source)
		}
		return nil
	}
	var in diagnose.SizeInput
	switch {
	case *model != "" && (*params != "" || *layers != 0):
		return errors.New("size: give --model or the shape flags, not both")
	case *model != "":
		m, err := diagnose.LookupModel(*model)
		if err != nil {
			return err
		}
		in.Model = m
	default:
		p, err := parseParams(*params)
		if err != nil {
			return err
		}
		in.Model = diagnose.Shape{Name: "custom", Params: p, Layers: *layers, KVHeads: *kvHeads, HeadDim: *headDim, Attn: diagnose.AttnGQA, Source: "the flags"}
	}
	switch {
	case *gpuName != "":
		g, err := diagnose.LookupGPU(*gpuName)
		if err != nil {
			return err
		}
		in.GPU = g
	case *gpuMem > 0:
		in.GPU = diagnose.GPU{Name: fmt.Sprintf("%.0f GiB", *gpuMem), MemoryGiB: *gpuMem, Source: "--gpu-memory"}
	}
	in.Dtype, in.KVDtype, in.GPUs, in.TP, in.Context, in.Concurrency = *dtype, *kvDtype, *gpus, *tp, *ctxLen, *conc
	in.Utilization, in.ReserveGiB, in.KVMemoryGiB, in.BlockSize = *util, *reserve, *kvMem, *block
	if *reserve == 0 {
		in.ReserveGiB = 1e-9 // zero is a choice here, not "unset"
	}
	s, err := diagnose.Estimate(in)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, s)
	}
	s.Write(stdout)
	return nil
}

// parseParams reads "8B", "70.6b", "1240M" or a plain number of billions.
func parseParams(s string) (float64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	scale := 1.0
	switch {
	case strings.HasSuffix(t, "B"):
		t = strings.TrimSuffix(t, "B")
	case strings.HasSuffix(t, "M"):
		t, scale = strings.TrimSuffix(t, "M"), 1e-3
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v > 0 && v <= 1e5) { // NaN fails too
		return 0, fmt.Errorf("size: --params %q: want a size like 8B, 70.6B or 1240M (or --model)", s)
	}
	return v * scale, nil
}
