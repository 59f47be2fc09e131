package verdict

import "fmt"

// A server with a prefix cache answers prompts it has seen faster, so the
// share of prompt tokens it found cached is a condition of a measurement,
// like the load: compare (a stage of two runs) and ab (the two arms) both
// count it with CacheTally and refuse to judge across shares too far
// apart with CacheRefusal.

// DefaultCacheTolerance is how far, in points of prompt tokens, two
// cached shares may differ for what was measured under them to be
// compared.
const DefaultCacheTolerance = 0.10

// CacheTally counts the prompt tokens of answers and those their server
// reported cached (usage.prompt_tokens_details.cached_tokens, the
// Responses API's input_tokens_details, llama.cpp's timings.cache_n).
// The zero value counts nothing.
type CacheTally struct {
	cached, prompt float64
	answers        int
}

// Add counts one answer of prompt tokens, cached of them cached. An
// answer whose server said nothing (cached < 0) or that has no prompt
// count is left out; a cached count above the prompt's counts as the
// prompt (a server that counts its chat template twice, say).
func (c *CacheTally) Add(prompt, cached int) {
	if prompt <= 0 || cached < 0 {
		return
	}
	c.cached += float64(min(cached, prompt))
	c.prompt += float64(prompt)
	c.answers++
}

// Answers is the count of answers that reported a cached count.
func (c *CacheTally) Answers() int { return c.answers }

// Share is Σ cached / Σ prompt tokens over the answers counted, from 0
// to 1; nil when none reported it.
func (c *CacheTally) Share() *float64 {
	if c.prompt <= 0 {
		return nil
	}
	s := c.cached / c.prompt
	return &s
}

// Cached is one side of a comparison as its cache condition is told.
type Cached struct {
	// Name is the side's ("base", "primary"); Note follows the share in
	// brackets (a run's cache mode), "" for none.
	Name, Note string
	// Share is the side's cached share, nil when its server reported
	// none.
	Share *float64
}

// String is the side as the reports print it: "base 12.5% (cold)".
func (c Cached) String() string {
	s := ShareText(c.Share)
	if c.Name != "" {
		s = c.Name + " " + s
	}
	if c.Note != "" {
		s += " (" + c.Note + ")"
	}
	return s
}

// ShareText is a cached share as the reports print it: "12.5%", or "not
// reported" for nil.
func ShareText(share *float64) string {
	if share == nil {
		return "not reported"
	}
	return fmt.Sprintf("%.1f%%", *share*100)
}

// CacheRefusal says why a and b cannot be compared, "" when they can:
// their servers found shares of the prompt tokens cached more than tol
// apart, so a TTFT difference measures the cache, not the change. A side
// whose server reported no cached tokens cannot be checked: unknown is
// then set.
func CacheRefusal(a, b Cached, tol float64) (reason string, unknown bool) {
	switch {
	case a.Share == nil || b.Share == nil:
		return "", true
	case max(*a.Share-*b.Share, *b.Share-*a.Share) > tol:
		return fmt.Sprintf("cached shares of prompt tokens more than %.0f points apart: %s, %s: one side's server held more of its prompts, so TTFT measures the cache, not the change", tol*100, a, b), false
	}
	return "", false
}
