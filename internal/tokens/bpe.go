package tokens

import (
	"container/heap"
	"math"
)

// bpe counts the tokens of one piece by tiktoken's byte-pair merge: start
// from single bytes and merge, again and again, the adjacent pair whose
// joined bytes have the lowest rank in the vocabulary (the leftmost on a
// tie), until no adjacent pair is in it. A heap keeps each merge
// O(log n), so a long piece (a run of one character, a page of CJK text
// without spaces) costs O(n log n), not the library's O(n²).
type bpe struct {
	ranks map[string]int
	// noShortcut: a piece that is itself a token is merged like any
	// other (Hugging Face models without ignore_merges), rather than
	// taken whole (tiktoken).
	noShortcut bool
}

// count returns the number of tokens of piece.
func (b *bpe) count(piece string) int {
	if len(piece) <= 1 {
		return len(piece)
	}
	if _, ok := b.ranks[piece]; ok && !b.noShortcut {
		return 1
	}
	if len(piece) <= 16 {
		return b.countSmall(piece)
	}
	return b.countHeap(piece)
}

// countSmall is the plain quadratic merge, cheaper for short pieces.
func (b *bpe) countSmall(piece string) int {
	var buf [17]int
	bounds := buf[:0]
	for i := 0; i <= len(piece); i++ {
		bounds = append(bounds, i)
	}
	for len(bounds) > 2 {
		best, at := math.MaxInt, -1
		for i := 0; i+2 < len(bounds); i++ {
			if r, ok := b.ranks[piece[bounds[i]:bounds[i+2]]]; ok && r < best {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		bounds = append(bounds[:at+1], bounds[at+2:]...)
	}
	return len(bounds) - 1
}

// merge is a candidate: joining the part that starts at start with the
// next one, of rank rank; stale when either part has changed since.
type merge struct {
	rank, start, ver int
}

type mergeHeap []merge

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].start < h[j].start
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(merge)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (b *bpe) countHeap(piece string) int {
	n := len(piece)
	// Parts are linked by their start offsets: next[s] is the start of
	// the part after the one at s (n at the end), prev[s] the one before
	// (-1 at the start); ver[s] changes whenever the part at s does.
	next := make([]int, n)
	prev := make([]int, n)
	ver := make([]int, n)
	for i := range n {
		next[i], prev[i] = i+1, i-1
	}
	h := make(mergeHeap, 0, n)
	push := func(s int) {
		e := next[s]
		if e >= n {
			return
		}
		if r, ok := b.ranks[piece[s:next[e]]]; ok {
			h = append(h, merge{rank: r, start: s, ver: ver[s]*(n+1) + ver[e]})
		}
	}
	for i := 0; i+1 < n; i++ {
		push(i)
	}
	heap.Init(&h)
	parts := n
	for h.Len() > 0 {
		m := heap.Pop(&h).(merge)
		s := m.start
		e := next[s]
		if e >= n || m.ver != ver[s]*(n+1)+ver[e] {
			continue // stale
		}
		// Join s and e.
		next[s] = next[e]
		if next[e] < n {
			prev[next[e]] = s
		}
		ver[s]++
		ver[e]++
		parts--
		before := len(h)
		if p := prev[s]; p >= 0 {
			push(p)
		}
		push(s)
		for i := before; i < len(h); i++ {
			heap.Fix(&h, i)
		}
	}
	return parts
}
