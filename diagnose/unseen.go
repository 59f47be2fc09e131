package diagnose

import (
	"fmt"
	"sort"
	"strings"

	"github.com/infergate/infergate/internal/engine"
)

// serverNames are the servers as a sentence names them.
var serverNames = map[string]string{
	engine.VLLM: "vLLM", engine.SGLang: "SGLang", engine.TGI: "TGI", engine.LlamaCpp: "llama.cpp", engine.Unknown: "an unknown server",
}

func serverName(s string) string {
	if n, ok := serverNames[s]; ok {
		return n
	}
	return s
}

// noUtilText is why GPU utilisation is unknown: it comes from the DCGM
// exporter, which diagnose reads only when told where.
const noUtilText = "no GPU utilisation was read (give --dcgm with the DCGM exporter's URL; a CPU server has none)"

// unseen says, for findings that cannot be measured, why the KV usage,
// the GPU utilisation, the backends' queue and the batch bound are
// unknown, naming the servers that do not report them.
func unseen(bs []Backend) (kv, util, queue, bound string) {
	var noKV, noQueue, noBound []string
	for _, b := range bs {
		if !b.KVUsage.Max.Known() {
			noKV = append(noKV, serverName(b.Server))
		}
		if !b.Waiting.Mean.Known() {
			noQueue = append(noQueue, serverName(b.Server))
		}
		if !b.MaxRunning.Known() {
			noBound = append(noBound, serverName(b.Server))
		}
	}
	kv, queue, bound = "no KV-cache usage was read", "no backend queue was read", "no batch bound was read or seen"
	if len(noKV) > 0 {
		kv = join(noKV) + " reports no KV-cache usage"
	}
	if len(noQueue) > 0 {
		queue = join(noQueue) + " reports no queue of waiting requests"
	}
	if len(noBound) > 0 {
		bound = join(noBound) + " reports no batch bound, and none was seen with requests waiting"
		for _, b := range bs {
			if b.Server == engine.LlamaCpp && !b.MaxRunning.Known() {
				bound = "llama.cpp's slot count (GET /props total_slots, or GET /slots) could not be read"
			}
		}
	}
	return kv, noUtilText, queue, bound
}

// join lists names once each, in order: "llama.cpp", "vLLM and TGI".
func join(names []string) string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	if len(out) == 1 {
		return out[0]
	}
	return strings.Join(out[:len(out)-1], ", ") + " and " + out[len(out)-1]
}

// notSeen lists what the backends did not report, each once: the
// report's "not seen" lines.
func notSeen(bs []Backend, gw *Gateway) []string {
	set := map[string]bool{}
	utilSeen := false
	for _, b := range bs {
		name := serverName(b.Server)
		if b.Samples == 0 {
			set[fmt.Sprintf("%s: no reading at all (its metrics could not be read)", b.Name)] = true
			continue
		}
		if b.Server == engine.Unknown {
			set[fmt.Sprintf("%s: no metrics of vLLM, SGLang, TGI or llama.cpp", b.Name)] = true
			continue
		}
		utilSeen = utilSeen || b.GPUUtil.Mean.Known()
		if !b.KVUsage.Max.Known() {
			what := name + " reports no KV-cache usage: memory pressure cannot be seen"
			if b.Server == engine.LlamaCpp {
				what = "llama.cpp reports no KV-cache usage (its /metrics has had no such gauge since kv_cache_usage_ratio was removed): memory pressure cannot be seen"
			}
			set[what] = true
		}
		if !b.Waiting.Mean.Known() {
			set[name+" reports no queue of waiting requests"] = true
		}
		if !b.PreemptionsPerS.Known() && b.Server != engine.LlamaCpp {
			// llama.cpp does not preempt: a request keeps its slot.
			set[name+" reports no preemptions"] = true
		}
		if b.Server == engine.LlamaCpp && !b.Slots.Known() {
			set["llama.cpp's slot count (GET /props total_slots, or GET /slots) could not be read: its batch bound is unknown"] = true
		}
		if !b.TTFT.Known() && !b.Queue.Known() && b.Server == engine.LlamaCpp {
			set["llama.cpp reports no latency histograms: TTFT and queue time come from the load generator only"] = true
		}
	}
	if len(bs) > 0 && !utilSeen {
		set[noUtilText] = true
	}
	if gw == nil || gw.Samples == 0 {
		set["no gateway figures (give --gateway): queueing in front of the backends cannot be seen"] = true
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
