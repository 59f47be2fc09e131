package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/httpurl"
	"github.com/infergate/infergate/internal/safehttp"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/mirror/ab"
	"github.com/infergate/infergate/verdict"
)

const abSynopsis = `ab report PAIRS.jsonl [MORE.jsonl ...] | --admin ADMIN_URL [--json] [flags]

Judges a candidate backend against the primary from mirrored pairs (serve
--mirror URL --mirror-record PAIRS.jsonl, or mirror: in the config): the
same requests answered by both. For each arm: TTFT, TPOT, end-to-end and
output speed (p50/p90/p99), the error rate and every quality rate. Then
the differences, paired: Wilcoxon's signed-rank test and a paired
bootstrap interval for latencies, McNemar's test and the paired
difference's interval for rates. The verdict, by the rule compare uses:

  KEEP          speed improved or held, and quality held         exit 0
  ROLL BACK     quality (or speed) regressed beyond its tolerance exit 1
  INCONCLUSIVE  too few pairs to tell; it says how many          exit 2

The arms' cache states are a condition: when the share of prompt tokens
their backends reported cached differs by more than --cache-tolerance
(a candidate that sees only the mirrored share of the traffic holds less
of it in its prefix cache), the report is refused with the reason, exit
3, unless --force. No pairs, or a file that cannot be read, exits 3.`

func runAB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ab report", abSynopsis, stderr)
	if len(args) == 0 || args[0] != "report" {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-h" || args[0] == "-help") {
			return fs.Parse(args)
		}
		fs.Usage()
		return exitError{3, errors.New("ab: the subcommand is report")}
	}
	args = args[1:]
	gateway := fs.String("admin", "", "read the recent pairs of a running gateway's admin listener (http://127.0.0.1:9464)")
	adminKey := fs.String("admin-key", "", "the gateway's server.admin_auth key, when it has one")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	judgeURL := fs.String("judge", "", "an OpenAI-compatible server whose model grades a sample of pairs blind (base URL)")
	judgeModel := fs.String("judge-model", "", "with --judge: the model")
	judgeKey := fs.String("judge-key", "", "with --judge: its API key (default $OPENAI_API_KEY)")
	judgeN := fs.Int("judge-sample", 50, "with --judge: how many pairs to grade")
	htmlOut := fs.String("html", "", "also write the report as one self-contained HTML page to this file")
	force := fs.Bool("force", false, "judge the arms although their backends' cached shares differ (--cache-tolerance)")
	tol := registerTolerances(fs)
	files, err := parseWithFiles(fs, args)
	if err != nil {
		return err
	}
	if (len(files) == 0) == (*gateway == "") {
		fs.Usage()
		return exitError{3, errors.New("ab report: name pair files or --admin, one of them")}
	}
	opts, err := tol.options()
	if err != nil {
		return exitError{3, err}
	}
	if *judgeURL != "" {
		if _, err := httpurl.Parse(*judgeURL); err != nil {
			return exitError{3, fmt.Errorf("--judge %w", err)}
		}
	}
	var pairs []mirror.Pair
	if *gateway != "" {
		admin := &adminapi.Client{URL: *gateway, Key: *adminKey, HTTP: safehttp.Client(30 * time.Second)}
		var ps adminapi.Pairs
		ps, err = admin.Pairs(ctx)
		pairs = ps.Pairs
	} else {
		pairs, err = ab.ReadPairs(files)
	}
	if err != nil {
		return exitError{3, err}
	}
	if len(pairs) == 0 {
		return exitError{3, errors.New("ab report: no pairs")}
	}
	ct, err := tol.cacheTolerance()
	if err != nil {
		return exitError{3, err}
	}
	r := ab.Compare(pairs, opts)
	switch reason, unknown := r.CacheConditions(ct); {
	case reason != "" && !*force:
		return exitError{3, fmt.Errorf("ab report: the arms were measured under different conditions: %s\n(--force judges them anyway)", reason)}
	case reason != "":
		fmt.Fprintf(stderr, "warning: judged under --force although %s\n", reason)
	case unknown:
		fmt.Fprintln(stderr, "warning: a backend reported no cached tokens, so the arms' cache states could not be matched")
	}
	if *judgeURL != "" {
		if *judgeModel == "" {
			return exitError{3, errors.New("--judge needs --judge-model")}
		}

		key := *judgeKey
		if key == "" {
			key = os.Getenv("OPENAI_API_KEY")
		}
		j := &ab.Judge{URL: *judgeURL, Model: *judgeModel, Key: key}
		t, err := j.Grade(ctx, pairs, *judgeN, 1)
		if err != nil {
			return exitError{3, fmt.Errorf("judge: %w", err)}
		}
		r.Judge = &t
	}
	if *asJSON {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return exitError{3, err}
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		r.Write(stdout)
	}
	if *htmlOut != "" {
		err := writeFileWith(*htmlOut, func(w io.Writer) error { return r.WriteHTML(w, "infergate ab report", ab.Examples(pairs, 5)) })
		if err != nil {
			return exitError{3, err}
		}
	}
	if code := verdict.ExitCode(r.Verdict); code != 0 {
		return exitError{code, nil}
	}
	return nil
}
