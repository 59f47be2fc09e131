package tokens

import (
	"unicode"
	"unicode/utf8"
)

// The encodings' pre-tokenizers, written out. tiktoken splits text into
// pieces with a regular expression before the byte-pair merge; the
// library runs it on a backtracking engine that costs microseconds a
// piece. These functions find the same pieces by hand: each returns the
// end of the piece that starts at s[i:]. The patterns, alternatives tried
// in order:
//
//	cl100k_base: (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ |
//	  \p{N}{1,3} | ' '?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
//	o200k_base: [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+C? |
//	  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*C? |
//	  \p{N}{1,3} | ' '?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ | \s+(?!\S) | \s+
//	  where C is (?i:'s|'t|'re|'ve|'m|'ll|'d)
//
// TestSplitMatchesLibrary and FuzzCount hold them to the library.

func at(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

func isL(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r)
}

func isN(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

func isS(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || '\t' <= r && r <= '\r'
	}
	return r >= 0 && unicode.IsSpace(r)
}

func isNL(r rune) bool { return r == '\r' || r == '\n' }

// isP is [^\r\n\p{L}\p{N}]; isPunct is [^\s\p{L}\p{N}].
func isP(r rune) bool     { return r >= 0 && !isNL(r) && !isL(r) && !isN(r) }
func isPunct(r rune) bool { return r >= 0 && !isS(r) && !isL(r) && !isN(r) }

// o200k's case classes: upper is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], lower
// is [\p{Ll}\p{Lm}\p{Lo}\p{M}].
func isUpper(r rune) bool {
	if r < utf8.RuneSelf {
		return 'A' <= r && r <= 'Z'
	}
	return r >= 0 && (unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M))
}

func isLower(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z'
	}
	return r >= 0 && (unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M))
}

// run returns the end of the run of runes satisfying f from i.
func run(s string, i int, f func(rune) bool) int {
	for i < len(s) {
		r, n := at(s, i)
		if !f(r) {
			break
		}
		i += n
	}
	return i
}

// contraction returns the end of 's 't 're 've 'm 'll 'd (any case) at i,
// or -1.
func contraction(s string, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return -1
	}
	lower := func(c byte) byte {
		if 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	switch lower(s[i+1]) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && lower(s[i+2]) == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && lower(s[i+2]) == 'l' {
			return i + 3
		}
	}
	return -1
}

// spaces ends the whitespace alternatives at i (s[i] is whitespace):
// \s*[\r\n]+ | \s+(?!\S) | \s+.
func spaces(s string, i int) int {
	e := run(s, i, isS)
	// \s*[\r\n]+ ends after the run's last newline.
	for p := e - 1; p >= i; p-- {
		if isNL(rune(s[p])) {
			return p + 1
		}
	}
	return spaceRun(s, i, e)
}

// spaceRun ends the whitespace run s[i:e] as \s+(?!\S) | \s+ do: the whole
// run at the end of the text; else all but its last rune (which goes with
// what follows), when that leaves one.
func spaceRun(s string, i, e int) int {
	if e == len(s) {
		return e
	}
	_, last := utf8.DecodeLastRuneInString(s[i:e])
	if e-last > i {
		return e - last
	}
	return e
}

// punct is ' '?[^\s\p{L}\p{N}]+ followed by a run of tail; -1 when there
// is no such piece at i.
func punct(s string, i int, tail func(rune) bool) int {
	j := i
	if s[i] == ' ' {
		if r, _ := at(s, i+1); isPunct(r) {
			j = i + 1
		}
	}
	if r, _ := at(s, j); !isPunct(r) {
		return -1
	}
	return run(s, run(s, j, isPunct), tail)
}

func digits(s string, i int) int {
	for k := 0; k < 3 && i < len(s); k++ {
		r, n := at(s, i)
		if !isN(r) {
			break
		}
		i += n
	}
	return i
}

// pieceCL100K returns the end of cl100k_base's piece at i.
func pieceCL100K(s string, i int) int {
	if e := contraction(s, i); e > 0 {
		return e
	}
	r, n := at(s, i)
	if isL(r) {
		return run(s, i, isL)
	}
	if isP(r) {
		if r2, _ := at(s, i+n); isL(r2) {
			return run(s, i+n, isL)
		}
	}
	if isN(r) {
		return digits(s, i)
	}
	if e := punct(s, i, isNL); e > 0 {
		return e
	}
	return spaces(s, i)
}

// caseWord is [upper]*[lower]+ at j, with the backtracking of the
// regular expression: the word ends after the last lower-class rune of the
// upper run when no lower-class rune follows it. -1 when there is none.
func caseWord(s string, j int) int {
	k := run(s, j, isUpper)
	if r, _ := at(s, k); isLower(r) {
		return run(s, k, isLower)
	}
	for p := k; p > j; {
		r, n := utf8.DecodeLastRuneInString(s[j:p])
		if isLower(r) {
			return p
		}
		p -= n
	}
	return -1
}

func withContraction(s string, e int) int {
	if c := contraction(s, e); c > 0 {
		return c
	}
	return e
}

// pieceO200K returns the end of o200k_base's piece at i.
func pieceO200K(s string, i int) int {
	r, n := at(s, i)
	// [P]?[upper]*[lower]+C?, the optional P first taken, then not.
	if isP(r) {
		if e := caseWord(s, i+n); e > 0 {
			return withContraction(s, e)
		}
	}
	if e := caseWord(s, i); e > 0 {
		return withContraction(s, e)
	}
	// [P]?[upper]+[lower]*C?
	if isP(r) {
		if k := run(s, i+n, isUpper); k > i+n {
			return withContraction(s, run(s, k, isLower))
		}
	}
	if k := run(s, i, isUpper); k > i {
		return withContraction(s, run(s, k, isLower))
	}
	if isN(r) {
		return digits(s, i)
	}
	if e := punct(s, i, func(r rune) bool { return isNL(r) || r == '/' }); e > 0 {
		return e
	}
	return spaces(s, i)
}
