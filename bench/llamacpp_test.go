package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/infergate/infergate/internal/llamatest"
	"github.com/infergate/infergate/verdict"
)

// Against llama.cpp's own server (its prompt cache on, as by default):
// the cached share comes from its answers, two cold runs are not
// refused, a seeded rerun finds its prompts cached and is refused, and
// --cache warm shows its prompts cached; the prompts' length by the
// server's count (Llama's vocabulary and a ChatML template) is reported
// beside the cl100k_base length asked, and the usage check stays quiet.
func TestCacheStateOnLlamaCpp(t *testing.T) {
	t.Parallel()
	srv := llamatest.Start(t, llamatest.Options{Parallel: 2})
	cfg := func(seed uint64, cache string) Config {
		c := cacheConfig(srv.URL, seed, cache)
		c.Workload.Model, c.Workload.InputTokens, c.Workload.OutputTokens = "", "48", "2"
		c.Load.Concurrency, c.Load.Requests, c.Load.WarmupRequests = 2, 4, 0
		return c
	}
	run := func(c Config) *Record {
		t.Helper()
		rec, err := Run(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		// Every request answers: llama-server closes a connection after
		// each stream, and the client must retry on a new one (issue 40).
		if s := rec.Stages[0]; s.OK != c.Load.Requests || s.CachedShare == nil {
			t.Fatalf("ok %d of %d, cached share %v (errors %v)", s.OK, c.Load.Requests, s.CachedShare, s.ErrorSamples)
		}
		t.Logf("seed %d, cache %s: cached share %.3f, input %.1f asked, %.1f by the server", rec.Conditions.Workload.Seed, rec.Conditions.Cache, share(rec), rec.Stages[0].InputTokensAsked, rec.Stages[0].InputTokensServer)
		return rec
	}
	a, b := run(cfg(0, "")), run(cfg(0, ""))
	for _, r := range []*Record{a, b} {
		s := r.Stages[0]
		// Only the chat template's opening is shared between prompts.
		if share(r) > 0.2 || s.InputTokensServer <= 48 || s.UsageMismatch > 0 {
			t.Errorf("cold run: cached share %.3f, input %.1f by the server, usage mismatches %d: want under 0.2, above the 48 asked, none", share(r), s.InputTokensServer, s.UsageMismatch)
		}
		// The length asked is missed (Llama's vocabulary, the template)
		// and said so; the server's usage is not called wrong.
		w := strings.Join(r.Warnings, "\n")
		if !strings.Contains(w, "by the server's own count") || strings.Contains(w, "usage is wrong") || strings.Contains(w, "cl100k_base's count") {
			t.Errorf("warnings %q", r.Warnings)
		}
	}
	if d, _ := CacheDifferences(a, b, verdict.DefaultCacheTolerance); len(d) > 0 {
		t.Errorf("two cold runs refused: %v", d)
	}
	s1, s2 := run(cfg(41, "")), run(cfg(41, ""))
	if share(s2) < 0.5 {
		t.Errorf("seeded rerun's cached share %.3f, want most of its prompts cached", share(s2))
	}
	if d, _ := CacheDifferences(s1, s2, verdict.DefaultCacheTolerance); len(d) != 1 {
		t.Errorf("seeded pair (shares %.3f, %.3f): differences %v, want one", share(s1), share(s2), d)
	}
	if w := run(cfg(0, CacheWarm)); share(w) < 0.5 {
		t.Errorf("warm run's cached share %.3f, want most of its prompts cached", share(w))
	}
}
