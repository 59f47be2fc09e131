package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestSizeCLI prints vLLM's figures for the published Qwen3-14B start-up
// (see diagnose.TestSizeMatchesVLLM) and refuses an unknown model.
func TestSizeCLI(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(binary, "size", "--model", "Qwen/Qwen3-14B", "--kv-memory", "6.51", "--context", "32768").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "GPU KV cache size:     42656 tokens") ||
		!strings.Contains(string(out), "Maximum concurrency for 32768 tokens per request: 1.30x") {
		t.Fatalf("size: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "size", "--model", "llama-3.1-8b", "--gpu", "H100-80G", "--concurrency", "500", "--json").Output()
	var s struct {
		KVBytesPerToken float64 `json:"kv_bytes_per_token"`
		GPUsNeeded      int     `json:"gpus_needed"`
	}
	if err != nil || json.Unmarshal(out, &s) != nil || s.KVBytesPerToken != 131072 || s.GPUsNeeded < 2 {
		t.Fatalf("size --json: %v %+v\n%s", err, s, out)
	}
	if out, err := exec.Command(binary, "size", "--model", "gpt-7").CombinedOutput(); err == nil || !strings.Contains(string(out), "unknown model") {
		t.Fatalf("unknown model: %v\n%s", err, out)
	}
	if out, err := exec.Command(binary, "size", "--list").CombinedOutput(); err != nil || !strings.Contains(string(out), "huggingface.co/deepseek-ai/DeepSeek-V3") {
		t.Fatalf("size --list: %v\n%s", err, out)
	}
}

// TestDiagnoseCLI reads an idle simulator's real metrics endpoint: no
// traffic is "none", in JSON with the top-level bottleneck field.
func TestDiagnoseCLI(t *testing.T) {
	t.Parallel()
	url := start(t, "sim", "--listen", "127.0.0.1:0").url(t)
	out, err := exec.Command(binary, "diagnose", "--backend-metrics", url+"/metrics", "--window", "1500ms", "--interval", "300ms", "--json").Output()
	var rep struct {
		Bottleneck string `json:"bottleneck"`
		Backends   []struct {
			Server  string `json:"server"`
			Samples int    `json:"samples"`
		} `json:"backends"`
	}
	if err != nil || json.Unmarshal(out, &rep) != nil {
		t.Fatalf("diagnose: %v\n%s", err, out)
	}
	if rep.Bottleneck != "none" || len(rep.Backends) != 1 || rep.Backends[0].Server != "vllm" || rep.Backends[0].Samples < 3 {
		t.Fatalf("diagnose of an idle sim: %s", out)
	}
	if out, err := exec.Command(binary, "diagnose").CombinedOutput(); err == nil || !strings.Contains(string(out), "--admin") {
		t.Fatalf("diagnose with nothing to read: %v\n%s", err, out)
	}
}

// FuzzParseParams: any --params text gives a positive count or an error,
// never a panic, NaN or infinity.
func FuzzParseParams(f *testing.F) {
	for _, s := range []string{"8B", "70.6b", "1240M", "0.5", "", "NaN", "Inf", "-3B", "1e400", "8BB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseParams(s)
		if err == nil && !(v > 0 && v <= 1e5) {
			t.Fatalf("%q → %v", s, v)
		}
	})
}
