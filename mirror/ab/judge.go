package ab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/safehttp"
	"github.com/infergate/infergate/mirror"
)

// The judge: an OpenAI-compatible model grades a sample of pairs blind.
// Each pair is shown as answers A and B in a random order, with the
// request; the model answers A, B or TIE. The candidate's preference rate
// (its wins over the decided pairs) and its interval join the report.

const judgeSystem = `You compare two answers to the same request. Judge which answer serves the request better: correct, complete, well-formed, on point. Reply with exactly one word: A, B, or TIE.`

// Judge is an OpenAI-compatible server whose model grades pairs blind.
type Judge struct {
	// URL is the server's base URL (…/v1/chat/completions is added);
	// Model the model; Key its API key, or empty.
	URL, Model, Key string
	// Client makes the calls (nil: a default one); redirects are not
	// followed with the key.
	Client *http.Client
}

// grade asks the judge about one pair; it returns +1 when the candidate
// is preferred, -1 the primary, 0 a tie, and an error when the reply is
// not one of the three.
func (j *Judge) grade(ctx context.Context, p mirror.Pair, rng *rand.Rand) (int, error) {
	a, b, flip := p.Primary.Output, p.Candidate.Output, rng.IntN(2) == 1
	if flip {
		a, b = b, a
	}
	user := fmt.Sprintf("Request:\n%s\n\nAnswer A:\n%s\n\nAnswer B:\n%s", p.Prompt, a, b)
	body, _ := json.Marshal(map[string]any{"model": j.Model, "temperature": 0, "max_tokens": 4,
		"messages": []map[string]string{{"role": "system", "content": judgeSystem}, {"role": "user", "content": user}}})
	req, err := http.NewRequestWithContext(ctx, "POST", strings.TrimSuffix(j.URL, "/")+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	// A judge on llama.cpp's server closes the kept connection after its
	// answers; a verdict is safe to ask twice on another.
	safehttp.Resendable(req)
	if j.Key != "" {
		req.Header.Set("Authorization", "Bearer "+j.Key)
	}
	resp, err := safehttp.Guard(j.Client).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("judge: %s: %.200s", resp.Status, raw)
	}
	var r struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || len(r.Choices) == 0 {
		return 0, fmt.Errorf("judge: not a chat completion: %.200s", raw)
	}
	word := strings.ToUpper(strings.Trim(strings.TrimSpace(r.Choices[0].Message.Content), ".!\"' "))
	var pick int
	switch {
	case strings.HasPrefix(word, "TIE"):
		return 0, nil
	case strings.HasPrefix(word, "A"):
		pick = -1 // the first shown
	case strings.HasPrefix(word, "B"):
		pick = 1
	default:
		return 0, fmt.Errorf("judge: answered %q, not A, B or TIE", word)
	}
	if flip {
		pick = -pick
	}
	return pick, nil
}

// Grade grades up to n pairs that both arms answered with text, chosen
// at random (seed), and returns the tally, settled.
func (j *Judge) Grade(ctx context.Context, pairs []mirror.Pair, n int, seed uint64) (Judged, error) {
	var usable []mirror.Pair
	for _, p := range pairs {
		if p.Split == "" && p.Primary.OK() && p.Candidate.OK() && p.Primary.Output != "" && p.Candidate.Output != "" {
			usable = append(usable, p)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 17))
	rng.Shuffle(len(usable), func(a, b int) { usable[a], usable[b] = usable[b], usable[a] })
	var t Judged
	for _, p := range usable[:min(n, len(usable))] {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		g, err := j.grade(ctx, p, rng)
		cancel()
		switch {
		case err != nil:
			t.Failed++
			if t.Failed > 5 && t.Failed > t.Wins+t.Losses+t.Ties {
				return t, err
			}
		case g > 0:
			t.Wins++
		case g < 0:
			t.Losses++
		default:
			t.Ties++
		}
	}
	t.Settle()
	return t, nil
}
