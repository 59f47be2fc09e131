package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/verdict"
)

// schema names the record format; a reader refuses any other.
const schema = "infergate.bench/v1"

// Record is what one bench run saves: the conditions it ran under, one
// summary per stage, and how each figure is computed.
type Record struct {
	Schema     string     `json:"schema"`
	Conditions Conditions `json:"conditions"`
	Stages     []*Summary `json:"stages"`
	// Knee is the index of the sweep's knee (see Knee), -1 when none.
	Knee int `json:"knee"`
	// StopReason says why a sweep stopped before its last level
	// (overSaturated), empty when it ran them all.
	StopReason  string `json:"stop_reason,omitempty"`
	Interrupted bool   `json:"interrupted,omitempty"`
	// Paired is the gateway's added latency against its backend, with
	// Config.DirectURL.
	Paired   *Paired           `json:"paired,omitempty"`
	Warnings []string          `json:"warnings,omitempty"`
	Formulas map[string]string `json:"formulas"`
}

// Conditions are what must agree for two runs to be compared.
type Conditions struct {
	URL      string       `json:"url"`
	Workload WorkloadSpec `json:"workload"`
	Load     LoadSpec     `json:"load"`
	// Cache is the server's cache state the run asked for: "cold" (a
	// fresh seed: prompts no earlier run sent), "warm" (each stage's
	// prompts sent once, unmeasured, before they were measured) or
	// "seeded" (a given seed's prompts, which the server may hold). What
	// the server did hold is each stage's CachedShare; empty in records
	// made before it was recorded.
	Cache string `json:"cache,omitempty"`
	// Sweep lists the stage levels of a sweep.
	Sweep []float64 `json:"sweep,omitempty"`
	// Headers are the names (never the values) of the extra headers sent.
	Headers []string `json:"headers,omitempty"`
	SLOs    SLOs     `json:"slos,omitempty"`
	// SLOPercentile is the share of requests that must meet each SLO
	// (0.9 when zero).
	SLOPercentile float64 `json:"slo_percentile,omitempty"`
	// GatewayConfigHash is what an infergate gateway reported of its
	// configuration, when the URL is one.
	GatewayConfigHash string `json:"gateway_config_hash,omitempty"`
	// GatewaySettings are that configuration's settings (YAML path →
	// value, no secrets), read from the gateway's admin listener when
	// Config.GatewayAdmin names it.
	GatewaySettings map[string]string `json:"gateway_settings,omitempty"`
	ToolVersion     string            `json:"tool_version"`
	Host            string            `json:"host"`
	CPUs            int               `json:"cpus"`
	Start           time.Time         `json:"start"`
}

// NewConditions fills in the tool and host fields.
func NewConditions() Conditions {
	host, _ := os.Hostname()
	v := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v += " " + s.Value
			}
		}
	}
	return Conditions{ToolVersion: v, Host: host, CPUs: runtime.NumCPU(), Start: time.Now().UTC()}
}

// Save writes r to path as indented JSON.
func (r *Record) Save(path string) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return fmt.Errorf("bench: record: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("bench: record: %w", err)
	}
	return nil
}

// LoadRecord reads a record written by Save.
func LoadRecord(path string) (*Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("bench: %s: %w", path, err)
	}
	if r.Schema != schema {
		return nil, fmt.Errorf("bench: %s: schema %q, want %q", path, r.Schema, schema)
	}
	if len(r.Stages) == 0 {
		return nil, fmt.Errorf("bench: %s: no stages", path)
	}
	return &r, nil
}

// Differences lists the conditions of a and b that make them not
// comparable: anything about the workload or the load, and the SLOs.
// The URL, host, tool version, time and gateway configuration may differ:
// those are what a comparison is for. So may the seed: two seeds draw
// two samples of one workload (and a fresh one per run is what keeps
// the server's cache out of the comparison). The cache state the
// server showed is compared by CacheDifferences.
func Differences(a, b *Conditions) []string {
	var out []string
	diff := func(name string, x, y any) {
		if !reflect.DeepEqual(x, y) {
			out = append(out, fmt.Sprintf("%s: %v ≠ %v", name, x, y))
		}
	}
	wa, wb := a.Workload, b.Workload
	diff("workload.endpoint", wa.Endpoint, wb.Endpoint)
	diff("workload.model", wa.Model, wb.Model)
	diff("workload.stream", wa.Stream, wb.Stream)
	diff("workload.input_tokens", wa.InputTokens, wb.InputTokens)
	diff("workload.output_tokens", wa.OutputTokens, wb.OutputTokens)
	diff("workload.shared_prefix", wa.SharedPrefix, wb.SharedPrefix)
	diff("workload.prefix_groups", wa.PrefixGroups, wb.PrefixGroups)
	diff("workload.prefix_tokens", wa.PrefixTokens, wb.PrefixTokens)
	diff("workload.force_output_length", wa.ForceOutputLength, wb.ForceOutputLength)
	diff("workload.json", wa.JSON, wb.JSON)
	diff("workload.dataset_sha256", wa.DatasetSHA256, wb.DatasetSHA256)
	diff("workload.replay_sha256", wa.ReplaySHA256, wb.ReplaySHA256)
	diff("workload.trace_sha256", wa.TraceSHA256, wb.TraceSHA256)
	diff("workload.turns", wa.Turns, wb.Turns)
	diff("workload.tools", wa.Tools, wb.Tools)
	// The session key is not a condition: a keyed run against an unkeyed
	// one is the question "does pinning sessions help", with the same
	// prompts. Nor is the class mix, for the same reason: with classes
	// against without is "do classes help" (per class in each report).
	diff("workload.trace_window", wa.TraceWindow, wb.TraceWindow)
	diff("workload.speedup", wa.Speedup, wb.Speedup)
	la, lb := a.Load, b.Load
	diff("load.mode", la.Mode, lb.Mode)
	diff("load.think_time", la.ThinkTime, lb.ThinkTime)
	diff("load.concurrency", la.Concurrency, lb.Concurrency)
	diff("load.rate", la.Rate, lb.Rate)
	diff("load.arrival", la.Arrival, lb.Arrival)
	diff("load.burstiness", la.Burstiness, lb.Burstiness)
	diff("load.max_concurrency", la.MaxConcurrency, lb.MaxConcurrency)
	diff("load.warmup_requests", la.WarmupRequests, lb.WarmupRequests)
	diff("load.warmup_time", la.WarmupTime, lb.WarmupTime)
	diff("load.warmup_per_user", la.WarmupPerUser, lb.WarmupPerUser)
	if !slices.Equal(a.Sweep, b.Sweep) {
		diff("sweep", a.Sweep, b.Sweep)
	}
	diff("slos", a.SLOs, b.SLOs)
	diff("slo_percentile", a.SLOPercentile, b.SLOPercentile)
	return out
}

// CacheDifferences lists the stages of a and b whose cached shares (the
// share of prompt tokens their server reported cached) are further apart
// than tol (verdict.CacheRefusal): their servers held different shares of
// their prompts, so their TTFTs measure the cache, not the change. A
// stage whose server reported no cached tokens in one run or both (or a
// record made before the share was recorded) cannot be checked: unknown
// lists those stages, for a note.
func CacheDifferences(a, b *Record, tol float64) (diffs []string, unknown []int) {
	for i := range min(len(a.Stages), len(b.Stages)) {
		reason, unk := verdict.CacheRefusal(StageCached(a, i, "base"), StageCached(b, i, "new"), tol)
		switch {
		case unk:
			unknown = append(unknown, i)
		case reason != "":
			diffs = append(diffs, fmt.Sprintf("stage %d: %s; run both cold (the default: a fresh seed per run) or both with --cache warm", i, reason))
		}
	}
	return diffs, unknown
}

// StageCached is stage i's cached share of r, named name, with the run's
// cache mode.
func StageCached(r *Record, i int, name string) verdict.Cached {
	return verdict.Cached{Name: name, Share: r.Stages[i].CachedShare, Note: r.Conditions.Cache}
}

// ConfigChanges lists what changed between the runs a and b besides the
// workload: the URL and the gateway's settings, one line each. known is
// false when the gateway's configuration changed (its hash) but the
// records do not carry its settings.
func ConfigChanges(a, b *Conditions) (changes []string, known bool) {
	if a.URL != b.URL {
		changes = append(changes, fmt.Sprintf("url: %s → %s", a.URL, b.URL))
	}
	switch {
	case a.GatewaySettings != nil && b.GatewaySettings != nil:
		changes = append(changes, SettingsDiff(a.GatewaySettings, b.GatewaySettings)...)
	case a.GatewayConfigHash != b.GatewayConfigHash:
		changes = append(changes, fmt.Sprintf("gateway configuration: %s → %s", cmp.Or(a.GatewayConfigHash, "none"), cmp.Or(b.GatewayConfigHash, "none")))
		return changes, false
	}
	return changes, true
}

// SettingsDiff lists what changed from a to b, one line per setting:
// "key: old → new", "+key: new" (added), "-key: old" (removed).
func SettingsDiff(a, b map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if bv, ok := b[k]; !ok {
			out = append(out, fmt.Sprintf("-%s: %s", k, a[k]))
		} else if bv != a[k] {
			out = append(out, fmt.Sprintf("%s: %s → %s", k, a[k], bv))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("+%s: %s", k, b[k]))
		}
	}
	slices.SortStableFunc(out, func(x, y string) int { return strings.Compare(strings.TrimLeft(x, "+-"), strings.TrimLeft(y, "+-")) })
	return out
}
