// Package suggest finds the name a user probably meant, for the "did you
// mean" of a mistyped flag, command or configuration key.
package suggest

import (
	"sort"
	"strings"
)

// Nearest returns the candidate closest to s by edit distance, when it is
// close enough to be a slip (at most a third of s's length, at least 1 and
// at most 3 edits), or one that s is a prefix of; "" otherwise.
func Nearest(s string, candidates []string) string {
	sort.Strings(candidates)
	best, bestD := "", -1
	limit := min(max(len(s)/3, 1), 3)
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if d <= limit && (bestD < 0 || d < bestD) {
			best, bestD = c, d
		}
	}
	if best != "" {
		return best
	}
	for _, c := range candidates {
		if len(s) >= 3 && strings.HasPrefix(c, s) {
			return c
		}
	}
	return ""
}

// editDistance is the Levenshtein distance, a transposition of two
// neighbours counting as one edit (the commonest typo).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
