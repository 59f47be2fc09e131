package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/infergate/infergate/internal/suggest"
)

// Exit statuses, the same for every command (docs/flags.md lists them).
// compare and ab report keep 0/1/2 for their verdicts and 3 for errors,
// usage errors included.
const (
	codeOK        = 0
	codeFailed    = 1
	codeUsage     = 2
	codeInterrupt = 130 // 128 + SIGINT, as shells report it
)

// flagErrorPrefixes are how the flag package starts the errors it reports
// for a command line it cannot parse.
var flagErrorPrefixes = []string{
	"flag provided but not defined: ",
	"invalid value ",
	"invalid boolean value ",
	"invalid boolean flag ",
	"bad flag syntax: ",
	"flag needs an argument: ",
}

// isUsageError reports whether err is the flag package's complaint about
// the command line (which the flag set's usage has already printed).
func isUsageError(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, p := range flagErrorPrefixes {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// flagOutput is a flag set's output. It holds back the flag package's own
// error line, so usage can print it once, with a suggestion, instead of
// the error followed by every flag the command has.
type flagOutput struct {
	w      io.Writer
	failed string
}

func (o *flagOutput) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	for _, prefix := range flagErrorPrefixes {
		if strings.HasPrefix(s, prefix) {
			o.failed = s
			return len(p), nil
		}
	}
	return o.w.Write(p)
}

// shortUsage is what a command prints for a command line it cannot parse:
// the error, the nearest flag when the name was mistyped, and where the
// help is.
func shortUsage(w io.Writer, name, failure string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "infergate %s: %s\n", name, failure)
	if bad, ok := strings.CutPrefix(failure, "flag provided but not defined: "); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if s := suggest.Nearest(strings.TrimLeft(bad, "-"), names); s != "" {
			fmt.Fprintf(w, "  did you mean --%s?\n", s)
		}
	}
	fmt.Fprintf(w, "Run 'infergate %s --help' for its flags.\n", name)
}

// wantsHelp reports whether a command line asks for help, which then goes
// to stdout (so `infergate bench --help | less` shows it).
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--h", "--help":
			return true
		}
	}
	return false
}

// interrupted reports whether ctx ended by Ctrl-C (SIGINT).
func interrupted(ctx context.Context) bool {
	cause := context.Cause(ctx)
	return cause != nil && strings.HasPrefix(cause.Error(), "interrupt")
}

// hiddenUsage marks a flag a command parses only to refuse it with a
// reason (demo's share of bench's flags): its help does not list it.
const hiddenUsage = "\x00hidden"

// printFlags is flag.PrintDefaults without the hidden flags.
func printFlags(fs *flag.FlagSet, w io.Writer) {
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	shown.SetOutput(w)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage == hiddenUsage {
			return
		}
		shown.Var(f.Value, f.Name, f.Usage)
		shown.Lookup(f.Name).DefValue = f.DefValue
	})
	shown.PrintDefaults()
}
