// Package doctest runs the shell blocks of README.md and docs/*.md as a
// user would paste them, so a renamed flag or a changed default fails the
// build instead of the reader.
//
// A block fenced as ```sh runs; ```shell (needs a GPU, a key, another
// machine or minutes) and ```text (output) are shown only. Each logical
// line (backslash continuations joined) runs in one bash process, in
// order, so variables and background jobs carry from line to line.
package doctest

import (
	"fmt"
	"regexp"
	"strings"
)

// Block is one runnable block of a page.
type Block struct {
	Line  int    // the line of its opening fence, 1-based
	Lines []Line // its logical lines: continuations joined, comments and blanks dropped
}

// Line is one command line of a block.
type Line struct {
	N    int // where it starts in the page, 1-based
	Text string
}

// Extract returns the runnable (```sh) blocks of a Markdown page.
func Extract(page string) []Block {
	var blocks []Block
	var cur *Block
	var cont string
	contFrom := 0
	inFence := false
	for i, l := range strings.Split(page, "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "```") {
			switch {
			case !inFence:
				inFence = true
				if trimmed == "```sh" {
					cur = &Block{Line: i + 1}
				}
			case cur != nil:
				blocks = append(blocks, *cur)
				cur, inFence = nil, false
			default:
				inFence = false
			}
			continue
		}
		if cur == nil {
			continue
		}
		if cont == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cont == "" {
			contFrom = i + 1
		}
		if strings.HasSuffix(l, `\`) {
			cont += strings.TrimSuffix(l, `\`)
			continue
		}
		cur.Lines = append(cur.Lines, Line{N: contFrom, Text: strings.Join(strings.Fields(cont+l), " ")})
		cont = ""
	}
	return blocks
}

// shorter bounds the run time of a documented command: durations that set
// how long a measurement runs become short ones, answers shorter, and a
// simulator decodes eight times as fast. The figures change; the flags,
// the arguments and the exit status are what the test holds.
var shorter = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`--(duration|window|step) [0-9][0-9a-z.]*`), "--$1 1s"},
	{regexp.MustCompile(`--ramp-up [0-9][0-9a-z.]*`), "--ramp-up 200ms"},
	{regexp.MustCompile(`--think-time [0-9][0-9a-z.]*`), "--think-time 100ms"},
	{regexp.MustCompile(`--pairs [0-9]+`), "--pairs 3"},
	{regexp.MustCompile(`--output-tokens [0-9]+`), "--output-tokens 16"},
	{regexp.MustCompile(`^infergate sim `), "infergate sim --decode-speedup 8 "},
}

// Shorten applies the bounded durations to one line.
func Shorten(line string) string {
	for _, s := range shorter {
		line = s.re.ReplaceAllString(line, s.with)
	}
	return line
}

// installLine is the tour's own build step; the test provides the binary.
var installLine = regexp.MustCompile(`^go build -o bin/infergate \./cmd/infergate( && export PATH=.*)?$`)

// Marker lines the script prints: one before each documented line, and
// one when a line failed.
const (
	markLine = "@@doctest line "
	markFail = "@@doctest failed "
)

// Script turns blocks into one bash script: each line announced, run,
// and its exit status checked, the first failure ending the script with
// the line's number in the page. With shorten, durations and lengths are
// bounded (Shorten); without, the lines run as written.
func Script(blocks []Block, shorten bool) string {
	var b strings.Builder
	b.WriteString("set +e\n")
	for _, bl := range blocks {
		for _, l := range bl.Lines {
			if installLine.MatchString(l.Text) {
				continue
			}
			text := l.Text
			if shorten {
				text = Shorten(text)
			}
			fmt.Fprintf(&b, "echo %s%d %s\n", markLine, l.N, quote(text))
			fmt.Fprintf(&b, "%s\n", text)
			fmt.Fprintf(&b, "__rc=$?; if [ $__rc -ne 0 ]; then echo \"%s%d exit $__rc\"; exit 97; fi\n", markFail, l.N)
		}
	}
	return b.String()
}

// quote makes s one single-quoted bash word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
