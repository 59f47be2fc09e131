package ab

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/safehttp"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/verdict"
)

// Compare judges pairs (a pairs file's, or /admin/pairs'): the mirrored
// ones paired; when there are none, a canary's records as two
// independent arms.
func Compare(pairs []mirror.Pair, o verdict.Options) *Report {
	var mirrored []mirror.Pair
	var a, b []splitSample
	for _, p := range pairs {
		switch p.Split {
		case "":
			mirrored = append(mirrored, p)
		case "candidate":
			b = append(b, splitSample{Arm: p.Candidate, JSONAsked: p.JSONAsked, SchemaGiven: p.SchemaGiven, Time: p.Time})
		default:
			a = append(a, splitSample{Arm: p.Primary, JSONAsked: p.JSONAsked, SchemaGiven: p.SchemaGiven, Time: p.Time})
		}
	}
	if len(mirrored) == 0 && len(a)+len(b) > 0 {
		return splitArms(a, b, o)
	}
	return Paired(mirrored, o)
}

// ReadPairs reads JSONL pair files; a line that is not a pair is an
// error naming the file and line.
func ReadPairs(files []string) ([]mirror.Pair, error) {
	var pairs []mirror.Pair
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for n := 1; sc.Scan(); n++ {
			if len(strings.TrimSpace(sc.Text())) == 0 {
				continue
			}
			var p mirror.Pair
			if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s:%d: not a pair: %w", name, n, err)
			}
			pairs = append(pairs, p)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return pairs, nil
}

// FetchPairs reads a running gateway's recent pairs from its admin
// listener (admin: its base URL; key: server.admin_auth's, or empty).
func FetchPairs(ctx context.Context, client *http.Client, admin, key string) ([]mirror.Pair, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(admin, "/")+"/admin/pairs", nil)
	if err != nil {
		return nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := safehttp.Guard(client).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	var s mirror.Stats
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&s); err != nil {
		return nil, fmt.Errorf("GET %s: %w", req.URL, err)
	}
	return s.Pairs, nil
}

// Examples are the n pairs whose answers differ most (both answered,
// kept in full), for the report's page.
func Examples(pairs []mirror.Pair, n int) []Example {
	var ex []Example
	for _, p := range pairs {
		if p.Primary.OK() && p.Candidate.OK() && p.Primary.Output != "" && p.Similarity < 1 {
			ex = append(ex, Example{ID: p.ID, Similarity: p.Similarity, Primary: p.Primary.Output, Candidate: p.Candidate.Output})
		}
	}
	slices.SortStableFunc(ex, func(a, b Example) int { return cmp.Compare(a.Similarity, b.Similarity) })
	return ex[:min(len(ex), n)]
}
