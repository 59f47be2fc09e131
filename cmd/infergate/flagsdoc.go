package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
)

//go:generate sh -c "go run . help flags > ../../docs/flags.md"

// helpCommands are the invocations whose flags the reference lists: every
// command, and the subcommands that parse flags of their own.
func helpCommands() [][]string {
	var out [][]string
	for _, c := range commands() {
		switch c.name {
		case "ab":
			out = append(out, []string{"ab", "report"})
		case "config":
			out = append(out, []string{"config", "versions"}, []string{"config", "rollback"}, []string{"config", "check"})
		default:
			out = append(out, []string{c.name})
		}
	}
	return out
}

// writeFlagsDoc writes docs/flags.md: each command's synopsis and flags
// exactly as its --help prints them, so the reference is made from the
// flag definitions themselves and a test can hold the file to them.
func writeFlagsDoc(ctx context.Context, w io.Writer) error {
	fmt.Fprint(w, "# Flags\n\n"+
		"Every command's flags, as `infergate COMMAND --help` prints them. Generated\n"+
		"from the commands' own flag definitions (`go generate ./cmd/infergate`, or\n"+
		"`infergate help flags`); a test fails when this file and the flags disagree.\n"+
		"Flags take one dash or two (`-n 5`, `--duration 30s`). Help goes to stdout;\n"+
		"`infergate help COMMAND` is `infergate COMMAND --help`.\n\n"+
		"## Exit status\n\n"+
		"| status | meaning |\n"+
		"|---|---|\n"+
		"| 0 | done; or `--help` |\n"+
		"| 1 | the command failed (what failed is on stderr) |\n"+
		"| 2 | usage: an unknown command or flag (with the nearest name), a bad value, no command |\n"+
		"| 130 | interrupted (Ctrl-C); `serve` and `sim` drain and exit 0 |\n"+
		"| `compare`, `ab report` | 0 KEEP, 1 ROLL BACK, 2 INCONCLUSIVE, 3 not comparable, an error or a usage error |\n"+
		"| `tune` | 0 walked, 3 an error (as before) |\n")
	renamedFlagsDoc(w)
	var prevName, prevHelp string
	for _, words := range helpCommands() {
		var buf bytes.Buffer
		if code := run(ctx, append(words, "--help"), &buf, &buf); code != 0 {
			return fmt.Errorf("infergate %s --help: exit %d: %s", strings.Join(words, " "), code, buf.String())
		}
		name := strings.Join(words, " ")
		fmt.Fprintf(w, "\n## infergate %s\n\n", name)
		synopsis, flags := splitHelp(buf.String())
		if synopsis+flags == prevHelp {
			fmt.Fprintf(w, "As `infergate %s`.\n", prevName)
			continue
		}
		prevName, prevHelp = name, synopsis+flags
		if synopsis != "" {
			fmt.Fprintf(w, "```text\n%s\n```\n\n", synopsis)
		}
		if flags == "" {
			fmt.Fprint(w, "No flags.\n")
			continue
		}
		fmt.Fprintf(w, "```text\n%s\n```\n", flags)
	}
	return nil
}

// splitHelp takes a command's --help text apart: the synopsis (its first
// paragraph after the usage line) and what follows "Flags:".
func splitHelp(help string) (synopsis, flags string) {
	body := help
	if i := strings.Index(body, "\n\n"); i >= 0 && strings.HasPrefix(body, "Usage:") {
		body = body[i+2:]
	}
	if i := strings.Index(body, "\n\n"); i >= 0 {
		synopsis = body[:i]
	} else {
		synopsis = body
	}
	if i := strings.LastIndex(help, "\nFlags:\n"); i >= 0 {
		flags = strings.TrimRight(help[i+len("\nFlags:\n"):], "\n")
		if strings.HasPrefix(synopsis, "Flags:") {
			synopsis = ""
		}
	}
	return strings.TrimSpace(synopsis), flags
}
