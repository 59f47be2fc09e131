package ab

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

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
