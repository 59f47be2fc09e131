package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// renamedFlags are the flag names retired so that one concept has one name
// across commands: --admin (and --admin-key) for a gateway's admin
// listener, --json for printing JSON (--json-workload asks the model for
// JSON), --dir for an output folder, --output-tokens for the answer's
// length. The old names keep working for a release, with a line on stderr.
var renamedFlags = map[string]map[string]string{
	"bench":    {"gateway-admin": "admin", "gateway-admin-key": "admin-key", "json": "json-workload"},
	"tune":     {"gateway": "admin", "gateway-admin": "admin", "gateway-admin-key": "admin-key", "json": "json-workload"},
	"demo":     {"json": "json-workload"},
	"diagnose": {"gateway": "admin"},
	"ab":       {"gateway": "admin"},
	"config":   {"gateway": "admin"},
	"rank":     {"out": "dir"},
	"probe":    {"max-tokens": "output-tokens"},
}

// renameFlags rewrites a command line's retired flag names to the current
// ones, saying so on w. It stops at "--", after which nothing is a flag.
func renameFlags(command string, args []string, w io.Writer) []string {
	names := renamedFlags[command]
	if len(names) == 0 {
		return args
	}
	out := make([]string, len(args))
	copy(out, args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		dashes := "-"
		if strings.HasPrefix(a, "--") {
			dashes = "--"
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, dashes), "=")
		to, ok := names[name]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "infergate %s: --%s is now --%s (the old name goes in the next release)\n", command, name, to)
		out[i] = dashes + to
		if hasValue {
			out[i] += "=" + value
		}
	}
	return out
}

// renamedFlagsDoc is the table of retired names for docs/flags.md.
func renamedFlagsDoc(w io.Writer) {
	fmt.Fprint(w, "\n## Renamed flags\n\nThe old names still work for a release, with a line on stderr.\n\n| command | old | now |\n|---|---|---|\n")
	for _, c := range commands() {
		names := renamedFlags[c.name]
		var olds []string
		for old := range names {
			olds = append(olds, old)
		}
		sort.Strings(olds)
		for _, old := range olds {
			fmt.Fprintf(w, "| %s | `--%s` | `--%s` |\n", c.name, old, names[old])
		}
	}
}
