package sim

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Bucket bounds as vLLM defines them (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	e2eBuckets  = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// metrics are the simulator's Prometheus series, under vLLM's names and
// meanings, labelled with model_name, plus DCGM's GPU utilisation gauge.
type metrics struct {
	reg *prometheus.Registry

	running, waiting, kvUsage prometheus.Gauge
	preemptions               prometheus.Counter
	prefixQueries, prefixHits prometheus.Counter
	prompt, generation        prometheus.Counter
	ttft, itl, e2e, queue     prometheus.Observer
	success, rejected         *prometheus.CounterVec

	util utilisation
}

func newMetrics(model string, e EngineConfig) *metrics {
	reg := prometheus.NewRegistry()
	l := prometheus.Labels{"model_name": model}
	g := func(name, help string) prometheus.Gauge {
		v := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: l})
		reg.MustRegister(v)
		return v
	}
	c := func(name, help string) prometheus.Counter {
		v := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: l})
		reg.MustRegister(v)
		return v
	}
	h := func(name, help string, b []float64) prometheus.Observer {
		v := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b, ConstLabels: l})
		reg.MustRegister(v)
		return v
	}
	m := &metrics{reg: reg}
	m.running = g("vllm:num_requests_running", "Number of requests in model execution batches.")
	m.waiting = g("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
	m.kvUsage = g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
	m.preemptions = c("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.")
	m.prefixQueries = c("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")
	m.prefixHits = c("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")
	m.prompt = c("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
	m.generation = c("vllm:generation_tokens_total", "Number of generation tokens processed.")
	m.ttft = h("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	m.itl = h("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	m.e2e = h("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2eBuckets)
	m.queue = h("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", e2eBuckets)
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: l,
	}, []string{"finished_reason"})
	reg.MustRegister(m.success)
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:admission_rejections_total", Help: "Requests refused at admission (max_num_queued_reqs, max_num_queued_tokens), by reason.", ConstLabels: l,
	}, []string{"reason"})
	reg.MustRegister(m.rejected)
	// vLLM's cache_config_info: a constant 1 whose labels carry the cache
	// configuration (a subset of vLLM's labels, same names).
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig",
		ConstLabels: prometheus.Labels{"model_name": model, "block_size": strconv.Itoa(e.BlockSize),
			"num_gpu_blocks": strconv.Itoa(e.KVCacheTokens / e.BlockSize), "cache_dtype": "auto", "enable_prefix_caching": pyBool(e.PrefixCaching)}})
	info.Set(1)
	reg.MustRegister(info)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "DCGM_FI_DEV_GPU_UTIL",
		Help:        "Simulated GPU utilization (in %): step time weighted by how full each step's batch is.",
		ConstLabels: prometheus.Labels{"gpu": "0", "modelName": "infergate-sim"},
	}, func() float64 { return m.util.value(time.Now()) * 100 }))
	return m
}

// step records the engine's state after a step.
func (m *metrics) step(st engineStats) {
	m.running.Set(float64(st.running))
	m.waiting.Set(float64(st.waiting))
	m.kvUsage.Set(st.kvUsage)
}

// utilisation is an exponentially weighted average of step load over time
// (time constant one second); idle time counts as zero load. A step is
// recorded when it starts, so a long step (a big prefill) reads as busy
// while it runs rather than decaying as if idle.
type utilisation struct {
	mu   sync.Mutex
	v    float64
	last time.Time // end of the last recorded step
}

const utilTau = float64(time.Second)

func (u *utilisation) decayed(now time.Time) float64 {
	if u.last.IsZero() || !now.After(u.last) {
		return u.v
	}
	return u.v * math.Exp(-float64(now.Sub(u.last))/utilTau)
}

// add records a step from start lasting dur with load in [0,1].
func (u *utilisation) add(start time.Time, dur time.Duration, load float64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	v := u.decayed(start)
	a := 1 - math.Exp(-float64(dur)/utilTau)
	u.v = v*(1-a) + load*a
	u.last = start.Add(dur)
}

func (u *utilisation) value(now time.Time) float64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.decayed(now)
}

// pyBool spells b as vLLM's labels do, in Python.
func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}
