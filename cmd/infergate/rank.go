package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/infergate/infergate/bench/rank"
	"github.com/infergate/infergate/internal/svgchart"
)

const rankSynopsis = `rank ENDPOINTS.yaml [workload flags] [--rounds N] [--dir DIR] [--history DIR] [--html FILE] [--csv FILE] [--json]
       rank --history DIR [--html FILE] [--json]

Ranks endpoints (hosted providers, relays, self-hosted servers) on your
workload, from your network: every endpoint gets the same prompts, output
length and concurrency, streaming, in interleaved rounds (a probe on new
connections, then a short bench; one endpoint at a time, the order turning
each round, so drift spreads over all). Failures are classified (auth, rate
limit, 5xx, timeout, broken stream, connect); a 429 or 503's Retry-After
holds that endpoint's requests until it has passed. Figures: TTFT p50/p90,
the output speed of a request, throughput at the concurrency, error rate
and availability, and cost from the usage each answer returned and the
file's prices: per request, per million output tokens at the measured mix,
blended 3:1, per hour at the concurrency. The order (workload.order,
default slo,errors,cost,ttft) calls two endpoints tied unless the verdict
package's tests tell them apart; a tie says, key by key, why (the
intervals and p-values within tolerance, or too few answers). Failed
requests weigh twice in the default: the SLO's attainment counts each as
a miss, and errors (two proportions, 2 points) ranks the endpoint that
fails more below before cost and TTFT, which are figures of answers only.
Before anything is sent the plan is printed: the most requests the run
sends, and for each key whether that many can tell endpoints apart (cost,
ttft and speed need 20 answers an endpoint, ttft_p90 36, slo at p90 35
requests, errors 10 to tell one failing a third from one failing none),
and if not, the --requests or --rounds that would.

The file lists endpoints:, each with name, url (the base URL, as an SDK's
base_url), model, api_key_env or api_key_file (a key is never in the file
or a record; it goes only to its own endpoint, and never over plain HTTP to
a host off this machine without --allow-plaintext-key), price (input,
cached_input, output per million tokens), and optionally api_key_header,
headers and overrides (request fields for that endpoint); and an optional
workload: section with the same names as the flags below.

Each run is a record (--dir DIR). --history DIR saves the run there too and
shows every endpoint's figures run by run, flagging a change beyond noise
between consecutive runs (TTFT, speed, error rate; price, URL or model in
the file).`

func runRank(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rank", rankSynopsis, stderr)
	var w rank.Workload
	fs.StringVar(&w.API, "api", "", "chat, completions or responses (default chat)")
	fs.StringVar(&w.InputTokens, "input-tokens", "", "prompt length in tokens: N, uniform:MIN-MAX or normal:MEAN,SD (default 256)")
	fs.StringVar(&w.OutputTokens, "output-tokens", "", "max_tokens: N, uniform:MIN-MAX or normal:MEAN,SD (default 128)")
	fs.IntVar(&w.SharedPrefix, "shared-prefix", 0, "tokens every prompt shares (a prompt cache then shows as cached input)")
	fs.StringVar(&w.Dataset, "dataset", "", "JSONL of OpenAI requests or ShareGPT conversations instead of synthetic prompts")
	fs.Uint64Var(&w.Seed, "seed", 0, "seed of the prompts: the same prompts every round and run (default 0: fresh prompts for each endpoint's round)")
	fs.IntVar(&w.Concurrency, "concurrency", 0, "requests in flight during each endpoint's bench (default 4)")
	fs.IntVar(&w.Requests, "requests", 0, "measured requests per endpoint per round (default 16)")
	fs.IntVar(&w.Probes, "probes", 0, "one-at-a-time probe requests per endpoint per round (default 2)")
	fs.IntVar(&w.Rounds, "rounds", 0, "rounds (default 3)")
	fs.DurationVar(&w.Timeout, "timeout", 0, "bound on one request (default 60s)")
	fs.StringVar(&w.SLO, "slo", "", "objective, e.g. ttft=2s,tpot=50ms: an endpoint meets it when its share of requests meeting it is at or above --slo-percentile")
	fs.StringVar(&w.SLOPercentile, "slo-percentile", "", "with --slo: the share that must meet it (default p90)")
	fs.StringVar(&w.Order, "order", "", "ranking keys, first decides first: slo, errors, cost, ttft, ttft_p90, speed (default slo,errors,cost,ttft)")
	fs.Float64Var(&w.Rate, "rate", 0, "the load the cost per hour is of, requests/s (default: the rate measured at --concurrency)")
	out := fs.String("dir", "", "save the run's record (rank-TIME.json) and page (rank-TIME.html) in this folder, with an index.html of its runs")
	history := fs.String("history", "", "folder of earlier records: save this run there too (its record, its page and the folder's index.html), show each endpoint's figures over the runs and flag changes beyond noise")
	htmlOut := fs.String("html", "", "write a self-contained HTML page with a chart per figure here")
	csvOut := fs.String("csv", "", "write one CSV row per endpoint here")
	asJSON := fs.Bool("json", false, "print the record (and, with --history, the flags) as JSON instead of the table")
	tolerance := fs.Float64("drift-tolerance", 0.10, "with --history: the relative change of TTFT or speed that is noise")
	allowPlain := fs.Bool("allow-plaintext-key", false, "send an endpoint's key over plain HTTP to a host off this machine")
	insecure := fs.Bool("insecure", false, "accept any TLS certificate")
	quiet := fs.Bool("quiet", false, "no line per endpoint and round on stderr")
	var file string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		file, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if file == "" && fs.NArg() > 0 {
		file = fs.Arg(0)
	}
	if file == "" && *history == "" {
		fs.Usage()
		return errors.New("want an endpoints file, or --history DIR")
	}
	if file == "" {
		return rankHistory(*history, *htmlOut, *asJSON, *tolerance, stdout)
	}
	f, err := rank.Load(file)
	if err != nil {
		return err
	}
	fs.Visit(func(fl *flag.Flag) { overrideWorkload(&f.Workload, &w, fl.Name) })
	f.Workload.Defaults()
	if err := f.Validate(); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	keys, err := f.OSKeys()
	if err != nil {
		return err
	}
	for i, e := range f.Endpoints {
		if keys[i] != "" && !*allowPlain && plaintextOffHost(e.URL) {
			u, _ := url.Parse(e.URL)
			return fmt.Errorf("endpoint %q (endpoints[%d]): its key would go over plain HTTP to %s, off this machine: use https, or pass --allow-plaintext-key", e.Name, i, u.Host)
		}
	}
	o := rank.Options{Keys: keys, InsecureSkipVerify: *insecure, Plan: stderr}
	if !*quiet {
		o.Progress = stderr
	}
	rec, runErr := rank.Run(ctx, f, o)
	if rec == nil {
		return runErr
	}
	for _, dir := range []string{*out, *history} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("rank: %w", err)
		}
		if err := rec.Save(filepath.Join(dir, rec.FileName())); err != nil {
			return err
		}
	}
	var runs []*rank.Record
	var flags []rank.Flag
	if *history != "" {
		if runs, err = rank.LoadHistory(*history); err != nil {
			return err
		}
		flags = rank.Drift(runs, rank.DriftOptions{Tolerance: *tolerance})
	}
	if *asJSON {
		var v any = rec
		if *history != "" {
			v = struct {
				Record *rank.Record `json:"record"`
				Runs   int          `json:"runs"`
				Drift  []rank.Flag  `json:"drift"`
			}{rec, len(runs), flags}
		}
		if err := printJSON(stdout, v); err != nil {
			return err
		}
	} else {
		rec.Write(stdout)
		if *history != "" {
			fmt.Fprintln(stdout)
			rank.WriteHistory(stdout, runs, flags)
		}
	}
	if *csvOut != "" {
		if err := writeFileWith(*csvOut, rec.WriteCSV); err != nil {
			return fmt.Errorf("--csv: %w", err)
		}
	}
	if *htmlOut != "" {
		if err := writeFileWith(*htmlOut, func(w io.Writer) error { return rec.WriteHTML(w, runs, flags) }); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
	}
	if *out != "" && *out != *history {
		if err := rankPages(*out, rec, nil, nil); err != nil {
			return err
		}
	}
	if *history != "" {
		if err := rankPages(*history, rec, runs, flags); err != nil {
			return err
		}
	}
	return runErr
}

// rankPages writes the run's page beside its record in dir and rewrites
// dir's index.html: a link to every run's page there, newest first, with
// who ranked first.
func rankPages(dir string, rec *rank.Record, runs []*rank.Record, flags []rank.Flag) error {
	page := func(r *rank.Record) string { return strings.TrimSuffix(r.FileName(), ".json") + ".html" }
	if err := writeFileWith(filepath.Join(dir, page(rec)), func(w io.Writer) error { return rec.WriteHTML(w, runs, flags) }); err != nil {
		return fmt.Errorf("rank: %w", err)
	}
	all, err := rank.LoadHistory(dir)
	if err != nil {
		return err
	}
	var entries []svgchart.IndexEntry
	for _, r := range slices.Backward(all) {
		if _, err := os.Stat(filepath.Join(dir, page(r))); err != nil {
			continue // a record saved before its runs had pages
		}
		entries = append(entries, svgchart.IndexEntry{File: page(r), Title: "run of " + r.Start.UTC().Format("2006-01-02 15:04:05 UTC"), Verdict: r.Headline()})
	}
	return writeFileWith(filepath.Join(dir, "index.html"), func(w io.Writer) error { return svgchart.WriteIndex(w, "infergate rank: "+dir, entries) })
}

// overrideWorkload copies the flag name's value from flags to w.
func overrideWorkload(w, flags *rank.Workload, name string) {
	switch name {
	case "api":
		w.API = flags.API
	case "input-tokens":
		w.InputTokens = flags.InputTokens
	case "output-tokens":
		w.OutputTokens = flags.OutputTokens
	case "shared-prefix":
		w.SharedPrefix = flags.SharedPrefix
	case "dataset":
		w.Dataset = flags.Dataset
	case "seed":
		w.Seed = flags.Seed
	case "concurrency":
		w.Concurrency = flags.Concurrency
	case "requests":
		w.Requests = flags.Requests
	case "probes":
		w.Probes = flags.Probes
	case "rounds":
		w.Rounds = flags.Rounds
	case "timeout":
		w.Timeout = flags.Timeout
	case "slo":
		w.SLO = flags.SLO
	case "slo-percentile":
		w.SLOPercentile = flags.SLOPercentile
	case "order":
		w.Order = flags.Order
	case "rate":
		w.Rate = flags.Rate
	}
}

// rankHistory shows a history folder without running.
func rankHistory(dir, htmlOut string, asJSON bool, tolerance float64, stdout io.Writer) error {
	runs, err := rank.LoadHistory(dir)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("--history %s: no rank-*.json records", dir)
	}
	flags := rank.Drift(runs, rank.DriftOptions{Tolerance: tolerance})
	if asJSON {
		if err := printJSON(stdout, struct {
			Runs  int         `json:"runs"`
			Drift []rank.Flag `json:"drift"`
		}{len(runs), flags}); err != nil {
			return err
		}
	} else {
		rank.WriteHistory(stdout, runs, flags)
	}
	if htmlOut != "" {
		last := runs[len(runs)-1]
		return writeFileWith(htmlOut, func(w io.Writer) error { return last.WriteHTML(w, runs, flags) })
	}
	return nil
}
