package rank

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/infergate/infergate/verdict"
)

// Save writes r to path as indented JSON, readable only by its owner.
func (r *Record) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("rank: record: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("rank: record: %w", err)
	}
	return nil
}

// FileName is the name a run's record takes in a history folder.
func (r *Record) FileName() string {
	return "rank-" + r.Start.UTC().Format("20060102T150405.000Z") + ".json"
}

// maxRecordBytes bounds a record read back.
const maxRecordBytes = 256 << 20

// LoadRecord reads a record, refusing another schema.
func LoadRecord(path string) (*Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rank: %w", err)
	}
	defer f.Close()
	var r Record
	if err := json.NewDecoder(io.LimitReader(f, maxRecordBytes)).Decode(&r); err != nil {
		return nil, fmt.Errorf("rank: %s: %w", path, err)
	}
	if r.Schema != schema {
		return nil, fmt.Errorf("rank: %s: schema %q, want %q", path, r.Schema, schema)
	}
	return &r, nil
}

// LoadHistory reads every rank record in dir (files rank-*.json), oldest
// first. Files of another kind are left alone; a record that cannot be
// read is an error.
func LoadHistory(dir string) ([]*Record, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "rank-*.json"))
	if err != nil {
		return nil, fmt.Errorf("rank: --history: %w", err)
	}
	var out []*Record
	for _, p := range paths {
		r, err := LoadRecord(p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b *Record) int { return a.Start.Compare(b.Start) })
	return out, nil
}

// DriftOptions set what counts as a change between two runs.
type DriftOptions struct {
	// Tolerance is the relative change of TTFT or speed that is noise
	// (default 0.10); FloorMs the TTFT change that is noise whatever its
	// size (default 5 ms); ErrorTolerance the rise of the error rate, in
	// points, that is (default 0.05).
	Tolerance, FloorMs, ErrorTolerance float64
}

func (o *DriftOptions) defaults() {
	if o.Tolerance == 0 {
		o.Tolerance = 0.10
	}
	if o.FloorMs == 0 {
		o.FloorMs = 5
	}
	if o.ErrorTolerance == 0 {
		o.ErrorTolerance = 0.05
	}
}

// Flag is one change of an endpoint's figures between two runs.
type Flag struct {
	Endpoint string    `json:"endpoint"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	// Figure is ttft, speed, error_rate, price, url or model; or
	// workload, with no endpoint, when the two runs measured different
	// workloads and were not compared.
	Figure string `json:"figure"`
	What   string `json:"what"`
}

// Drift compares each run with the one before it, endpoint by endpoint
// (by name), when both ran the same workload (Workload.Comparable; a
// workload flag says when not), and flags what moved beyond noise: TTFT p50 or the speed of
// a request (the verdict package's Mann-Whitney test with a bootstrap
// interval, beyond the tolerance either way), the error rate (two
// proportions), and any change of price, URL or model in the file. Each
// flag is a 95% test: over many endpoints and runs one may be noise; a
// change that persists is not.
func Drift(runs []*Record, o DriftOptions) []Flag {
	o.defaults()
	var out []Flag
	for i := 1; i < len(runs); i++ {
		prev, cur := runs[i-1], runs[i]
		if ok, why := prev.Workload.Comparable(&cur.Workload); !ok {
			// Another workload moves every figure: nothing to flag.
			out = append(out, Flag{From: prev.Start, To: cur.Start, Figure: "workload", What: "not compared: " + why})
			continue
		}
		for _, b := range cur.Endpoints {
			a := find(prev, b.Name)
			if a == nil {
				continue
			}
			flag := func(fig, what string) {
				out = append(out, Flag{Endpoint: b.Name, From: prev.Start, To: cur.Start, Figure: fig, What: what})
			}
			if !a.Price.Equal(b.Price) {
				flag("price", fmt.Sprintf("price changed: %s → %s", a.Price, b.Price))
			}
			if a.URL != b.URL {
				flag("url", fmt.Sprintf("url changed: %s → %s", a.URL, b.URL))
			}
			if a.Model != b.Model {
				flag("model", fmt.Sprintf("model changed: %s → %s", a.Model, b.Model))
			}
			if what, ok := drifted(ttfts(a), ttfts(b), func(x, y []float64) (verdict.Change, bool) {
				return verdict.Samples(0, "ttft", "lower", x, y, o.Tolerance, o.FloorMs, rand.New(rand.NewPCG(uint64(i), 7)))
			}); ok {
				flag("ttft", "TTFT p50 "+what)
			}
			if what, ok := drifted(speeds(a), speeds(b), func(x, y []float64) (verdict.Change, bool) {
				return verdict.Samples(0, "speed", "higher", x, y, o.Tolerance, 0, rand.New(rand.NewPCG(uint64(i), 7)))
			}); ok {
				flag("speed", "speed p50 "+what)
			}
			if c, ch := tellErrors(&a.Figures, &b.Figures, o.ErrorTolerance); c != 0 {
				flag("error_rate", "error rate "+verdict.FormatDelta(ch))
			}
		}
	}
	return out
}

// drifted says how a figure moved when it moved beyond tolerance either
// way (tell).
func drifted(a, b []float64, judge func(x, y []float64) (verdict.Change, bool)) (string, bool) {
	c, ch := tell(a, b, judge)
	if c == 0 {
		return "", false
	}
	dir := map[int]string{-1: "worse", 1: "better"}[c]
	base, next, d, ci, p := ch.Cells()
	return fmt.Sprintf("%s → %s (%s %s, p %s): %s", base, next, d, ci, p, dir), true
}

func find(r *Record, name string) *Result {
	for _, e := range r.Endpoints {
		if e.Name == name {
			return e
		}
	}
	return nil
}

// WriteHistory prints each endpoint's headline figures run by run, then
// the flags.
func WriteHistory(w io.Writer, runs []*Record, flags []Flag) {
	var names []string
	for _, r := range runs {
		for _, e := range r.Endpoints {
			if !slices.Contains(names, e.Name) {
				names = append(names, e.Name)
			}
		}
	}
	fmt.Fprintf(w, "history: %d runs\n", len(runs))
	for _, n := range names {
		fmt.Fprintf(w, "\n%s\n  %-20s %5s %12s %12s %10s %10s %12s\n", n, "run", "rank", "TTFT p50 ms", "speed tok/s", "errors", "avail", "$/request")
		for _, r := range runs {
			e := find(r, n)
			if e == nil {
				continue
			}
			f := e.Figures
			fmt.Fprintf(w, "  %-20s %5s %12.1f %12.1f %9.1f%% %9.1f%% %12.6f\n", r.Start.UTC().Format("2006-01-02 15:04:05"), rankOf(r, n),
				f.TTFTP50.Value, f.SpeedP50.Value, f.ErrorRate.Value*100, f.Availability*100, f.CostPerRequest.Value)
		}
	}
	fmt.Fprintf(w, "\n")
	if len(flags) == 0 {
		fmt.Fprintf(w, "no change beyond noise between consecutive runs\n")
		return
	}
	fmt.Fprintf(w, "changes beyond noise:\n")
	for _, f := range flags {
		if f.Endpoint == "" {
			f.Endpoint = "(all)"
		}
		fmt.Fprintf(w, "  %s  %s → %s  %s\n", f.Endpoint, f.From.UTC().Format("01-02 15:04:05"), f.To.UTC().Format("01-02 15:04:05"), f.What)
	}
}

func rankOf(r *Record, name string) string {
	for _, p := range r.Ranking {
		if p.Name == name {
			s := fmt.Sprint(p.Rank)
			if p.Tied {
				s += "="
			}
			return s
		}
	}
	return "-"
}
