package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/promtext"
	"github.com/infergate/infergate/internal/safehttp"
	"github.com/infergate/infergate/proxy"
	"golang.org/x/term"
)

const topSynopsis = `top [--admin URL] [--admin-key KEY] [--interval 2s] [--count N]

Shows a running gateway's live view in the terminal, read from its admin
listener's /admin/stats: requests in flight and queued, then per model and
backend over the last minute the request rate, errors, TTFT, TPOT, output
speed and end-to-end percentiles, and where the time went (the mean of each
part of the gateway's attribution; the means add up to the mean total);
with service classes, per class since the previous frame (from /metrics):
admitted, shed, preempted and timed-out counts, what waits and runs now,
queue wait and TTFT percentiles, and the share that met the class's
slo_ttft.
On a terminal the screen is redrawn; otherwise one frame is printed per
interval. Ctrl-C stops it.`

func runTop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("top", topSynopsis, stderr)
	admin := fs.String("admin", "http://"+proxy.DefaultAdminListen, "the gateway's admin listener (serve --admin-listen)")
	adminKey := fs.String("admin-key", "", "the gateway's server.admin_auth key, when it has one")
	interval := fs.Duration("interval", 2*time.Second, "time between refreshes")
	count := fs.Int("count", 0, "stop after this many frames (0: until Ctrl-C)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *interval <= 0 {
		return fmt.Errorf("--interval must be positive")
	}
	base := strings.TrimSuffix(withScheme(*admin), "/")
	f, isFile := stdout.(*os.File)
	redraw := isFile && term.IsTerminal(int(f.Fd()))
	client := &adminapi.Client{URL: base, Key: *adminKey, HTTP: safehttp.Client(5 * time.Second)}
	var classes classView
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for frame := 1; ; frame++ {
		snap, err := client.Stats(ctx)
		if err != nil {
			return fmt.Errorf("top: %w", err)
		}
		if redraw {
			fmt.Fprint(stdout, "\x1b[H\x1b[2J")
		}
		renderStats(stdout, base, snap)
		// The per-class rows come from /metrics; a gateway that does not
		// serve them (an older one, or one whose key is refused) shows none.
		if text, err := client.Metrics(ctx); err == nil {
			if sc, err := promtext.Parse(bytes.NewReader(text), time.Now()); err == nil {
				classes.render(stdout, sc)
			}
		}
		if *count > 0 && frame >= *count {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// renderStats writes one frame of the live view.
func renderStats(w io.Writer, from string, s adminapi.Stats) {
	g := s.Gateway
	fmt.Fprintf(w, "infergate top — %s — %s — last %.0f s\n", from, s.Time.Local().Format("15:04:05"), s.Window)
	errPct := 0.0
	if s.All.Requests > 0 {
		errPct = 100 * float64(s.All.Errors) / float64(s.All.Requests)
	}
	fmt.Fprintf(w, "in flight %d   queued %d   requests %d (%.1f/s)   errors %.1f%%\n\n", g.InFlight, g.Queued, s.All.Requests, s.All.RPS, errPct)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tbackend\treq/s\terr%\tTTFT p50\tp90\tp99\tTPOT p50\ttok/s p50\te2e p50\tp99\t")
	rows := append([]adminapi.GroupStats{}, s.Groups...)
	if len(rows) > 1 {
		all := s.All
		all.Model, all.Backend = "all", ""
		rows = append(rows, all)
	}
	for _, r := range rows {
		ep := 0.0
		if r.Requests > 0 {
			ep = 100 * float64(r.Errors) / float64(r.Requests)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Model, r.Backend, r.RPS, ep,
			q(r.TTFT, 50), q(r.TTFT, 90), q(r.TTFT, 99), q(r.TPOT, 50), q(r.Speed, 50), q(r.Total, 50), q(r.Total, 99))
	}
	tw.Flush()

	fmt.Fprintln(w, "\nwhere the time went (mean ms per request):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tbackend\tqueue\tgateway\tconnect\tnetwork\tmodel TTFT\tdecode\ttotal\t")
	for _, r := range rows {
		a := r.Attribution
		if a == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t\n", r.Model, r.Backend, a.Queue, a.Gateway, a.Connect, a.Network, a.ModelTTFT, a.Decode, a.Total)
	}
	tw.Flush()

	if len(g.Backends) > 0 {
		fmt.Fprintln(w, "\nbackends:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "pool\tbackend\tin flight\tbreaker\tavailable\t")
		for _, b := range g.Backends {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\t\n", b.Pool, b.Name, b.InFlight, b.Breaker, b.Up)
		}
		tw.Flush()
	}
}

// q formats one percentile of a figure, or "-" when there is none (or
// too few requests to carry it).
func q(v *adminapi.Quantiles, p int) string {
	if v == nil {
		return "-"
	}
	xp := map[int]*float64{50: &v.P50, 90: v.P90, 99: v.P99}[p]
	if xp == nil {
		return "-"
	}
	x := *xp
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}
