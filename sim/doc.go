// Package sim is a simulated continuous-batching inference server that
// speaks the OpenAI HTTP API and behaves like vLLM under load: requests
// queue for a running batch bounded by max_num_seqs and a paged KV cache;
// prefill costs time in proportion to prompt tokens; every decode step costs
// a base time plus a share per running sequence and emits one token to each;
// a full KV cache preempts the newest sequence. So TTFT grows with the
// queue, inter-token latency with the batch, throughput saturates, and
// memory pressure shows as preemptions. It exports vLLM's metric names,
// injects faults per process or per request, and can pose as a cheaper
// candidate build (faster, with more malformed output).
package sim
