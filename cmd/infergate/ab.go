package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/proxy"
	"github.com/infergate/infergate/verdict"
)

const abSynopsis = `ab report PAIRS.jsonl [MORE.jsonl ...] | --gateway ADMIN_URL [--json] [flags]

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

No pairs, or a file that cannot be read, exits 3.`

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
	gateway := fs.String("gateway", "", "read the recent pairs of a running gateway's admin listener (http://127.0.0.1:9464)")
	adminKey := fs.String("admin-key", "", "the gateway's server.admin_auth key, when it has one")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	judgeURL := fs.String("judge", "", "an OpenAI-compatible server whose model grades a sample of pairs blind (base URL)")
	judgeModel := fs.String("judge-model", "", "with --judge: the model")
	judgeKey := fs.String("judge-key", "", "with --judge: its API key (default $OPENAI_API_KEY)")
	judgeN := fs.Int("judge-sample", 50, "with --judge: how many pairs to grade")
	htmlOut := fs.String("html", "", "also write the report as one self-contained HTML page to this file")
	tol := registerTolerances(fs)
	files, err := parseWithFiles(fs, args)
	if err != nil {
		return err
	}
	if (len(files) == 0) == (*gateway == "") {
		fs.Usage()
		return exitError{3, errors.New("ab report: name pair files or --gateway, one of them")}
	}
	opts, err := tol.options()
	if err != nil {
		return exitError{3, err}
	}
	var pairs []proxy.Pair
	if *gateway != "" {
		pairs, err = gatewayPairs(ctx, *gateway, *adminKey)
	} else {
		pairs, err = readPairs(files)
	}
	if err != nil {
		return exitError{3, err}
	}
	if len(pairs) == 0 {
		return exitError{3, errors.New("ab report: no pairs")}
	}
	r := abReport(pairs, opts)
	if *judgeURL != "" {
		if *judgeModel == "" {
			return exitError{3, errors.New("--judge needs --judge-model")}
		}
		key := *judgeKey
		if key == "" {
			key = os.Getenv("OPENAI_API_KEY")
		}
		t, err := judgePairs(ctx, &judge{url: *judgeURL, model: *judgeModel, key: key, client: &http.Client{}}, pairs, *judgeN, 1)
		if err != nil {
			return exitError{3, fmt.Errorf("judge: %w", err)}
		}
		t.Settle()
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
		if err := writeABHTML(*htmlOut, r, pairs); err != nil {
			return exitError{3, err}
		}
	}
	if code := verdict.ExitCode(r.Verdict); code != 0 {
		return exitError{code, nil}
	}
	return nil
}

// writeABHTML writes the report page with the five pairs whose answers
// differ most (both answered, kept in full).
func writeABHTML(path string, r *verdict.ABReport, pairs []proxy.Pair) error {
	var ex []verdict.Example
	for _, p := range pairs {
		if p.Primary.OK() && p.Candidate.OK() && p.Primary.Output != "" && p.Similarity < 1 {
			ex = append(ex, verdict.Example{ID: p.ID, Similarity: p.Similarity, Primary: p.Primary.Output, Candidate: p.Candidate.Output})
		}
	}
	slices.SortStableFunc(ex, func(a, b verdict.Example) int { return cmp.Compare(a.Similarity, b.Similarity) })
	return writeFileWith(path, func(w io.Writer) error { return r.WriteHTML(w, "infergate ab report", ex[:min(len(ex), 5)]) })
}

// abReport judges the gateway's pairs: the mirrored ones paired; when
// there are none, a canary's records as two independent arms.
func abReport(pairs []proxy.Pair, o verdict.Options) *verdict.ABReport {
	var mirrored []proxy.Pair
	var a, b []verdict.SplitSample
	for _, p := range pairs {
		switch p.Split {
		case "":
			mirrored = append(mirrored, p)
		case "candidate":
			b = append(b, verdict.SplitSample{Arm: armSample(p.Candidate), JSONAsked: p.JSONAsked, SchemaGiven: p.SchemaGiven, At: seconds(p.Time)})
		default:
			a = append(a, verdict.SplitSample{Arm: armSample(p.Primary), JSONAsked: p.JSONAsked, SchemaGiven: p.SchemaGiven, At: seconds(p.Time)})
		}
	}
	if len(mirrored) == 0 && len(a)+len(b) > 0 {
		return verdict.Split(a, b, o)
	}
	pairs = mirrored
	samples := make([]verdict.PairSample, len(pairs))
	for i, p := range pairs {
		samples[i] = verdict.PairSample{Primary: armSample(p.Primary), Candidate: armSample(p.Candidate), JSONAsked: p.JSONAsked, SchemaGiven: p.SchemaGiven,
			Similarity: p.Similarity, LengthRatio: p.LengthRatio, At: seconds(p.Time)}
		if p.Noise != nil {
			n := armSample(*p.Noise)
			samples[i].Noise = &n
		}
	}
	return verdict.AB(samples, o)
}

// seconds is t as Unix seconds, 0 for the zero time.
func seconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

func armSample(a proxy.Arm) verdict.ArmSample {
	return verdict.ArmSample{OK: a.OK(), TTFT: a.TTFTms, TPOT: a.TPOTms, E2E: a.E2Ems, OutputTokens: a.OutputTokens,
		InvalidJSON: a.InvalidJSON, SchemaInvalid: a.SchemaInvalid, Refusal: a.Refusal, Empty: a.Empty, Truncated: a.Truncated, LengthByPolicy: a.LengthByPolicy}
}

// readPairs reads JSONL pair files; a line that is not a pair is an error
// naming the file and line.
func readPairs(files []string) ([]proxy.Pair, error) {
	var pairs []proxy.Pair
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
			var p proxy.Pair
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

func gatewayPairs(ctx context.Context, admin, key string) ([]proxy.Pair, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(admin, "/")+"/admin/pairs", nil)
	if err != nil {
		return nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	var s proxy.PairStats
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&s); err != nil {
		return nil, fmt.Errorf("GET %s: %w", req.URL, err)
	}
	return s.Pairs, nil
}
