// Package diagnose reads an inference deployment's metrics (the gateway's
// own and each backend's Prometheus exposition, under vLLM's, SGLang's,
// TGI's, llama.cpp's and the DCGM exporter's names), summarises them over
// a window, names the bottleneck (memory, batching, scheduling, compute or
// none) with the evidence, and sizes GPU memory and KV cache for a model.
//
// It knows no HTTP library: the readings come from the caller (a
// server's metrics in common terms are internal/engine's Reading, which
// the gateway's load routing reads too; diagnose/collect fetches them and
// reads the gateway's own), so the classifier is tested on hand-written
// exposition text and synthetic windows.
package diagnose
