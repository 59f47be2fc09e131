package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/safehttp"
	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/verdict"
)

// ProbeConfig is a probe: N requests, one at a time.
type ProbeConfig struct {
	// URL is the full endpoint.
	URL     string
	Body    []byte
	Stream  bool
	N       int
	Headers [][2]string
	// Reuse keeps the connection between requests; by default each
	// request opens its own, so DNS, connect and TLS are measured each time.
	Reuse              bool
	InsecureSkipVerify bool
	Timeout            time.Duration
}

// ProbeResult splits one request's time, each phase from the end of the
// previous one, as curl's -w timings do cumulatively.
type ProbeResult struct {
	DNS, Connect, TLS time.Duration
	// Wait is request written → first response byte: the server's time
	// plus one network round trip.
	Wait time.Duration
	// FirstToken is first byte → first content event.
	FirstToken time.Duration
	// Rest is first content → end of the response.
	Rest  time.Duration
	TTFB  time.Duration // from start
	TTFT  time.Duration // from start
	Total time.Duration
	// Status is the response's status (0 when none came); RetryAfter
	// what a 429 or 503 asked for (at most MaxRetryAfter).
	Status     int
	RetryAfter time.Duration
	Err        error
}

// Probe runs the probe.
func Probe(ctx context.Context, c ProbeConfig) ([]ProbeResult, error) {
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Minute
	}
	tr := &http.Transport{DisableKeepAlives: !c.Reuse, DisableCompression: true, ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: c.InsecureSkipVerify}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: c.Timeout, CheckRedirect: safehttp.CheckRedirect}
	out := make([]ProbeResult, 0, c.N)
	for range c.N {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		out = append(out, probeOne(ctx, client, c))
	}
	return out, nil
}

func probeOne(ctx context.Context, client *http.Client, c ProbeConfig) ProbeResult {
	var r ProbeResult
	var start, dnsStart, dnsDone, connStart, connDone, tlsStart, tlsDone, wrote, firstByte time.Time
	trace := &httptrace.ClientTrace{
		DNSStart:             func(httptrace.DNSStartInfo) { dnsStart = time.Now() },
		DNSDone:              func(httptrace.DNSDoneInfo) { dnsDone = time.Now() },
		ConnectStart:         func(string, string) { connStart = time.Now() },
		ConnectDone:          func(string, string, error) { connDone = time.Now() },
		TLSHandshakeStart:    func() { tlsStart = time.Now() },
		TLSHandshakeDone:     func(tls.ConnectionState, error) { tlsDone = time.Now() },
		WroteRequest:         func(httptrace.WroteRequestInfo) { wrote = time.Now() },
		GotFirstResponseByte: func() { firstByte = time.Now() },
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, c.URL, bytes.NewReader(c.Body))
	if err != nil {
		r.Err = err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	// With --reuse, a kept connection the server closed just as the
	// request left fails before anything came back; a completion is safe
	// to ask twice on another.
	safehttp.Resendable(req)
	for _, h := range c.Headers {
		req.Header.Set(h[0], h[1])
	}
	start = time.Now()
	resp, err := client.Do(req)
	if err != nil {
		r.Err = err
		return r
	}
	defer resp.Body.Close()
	r.Status = resp.StatusCode
	if r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable {
		r.RetryAfter = retryAfter([]byte(resp.Header.Get("Retry-After")), time.Now())
	}
	var firstToken time.Time
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		r.Err = errors.New(DescribeAnswer(resp.StatusCode, resp.Header.Get("Content-Type"), b, ""))
	} else if c.Stream {
		er := openai.NewEventReader(resp.Body, nil, 4<<20)
		for {
			ev, err := er.Next()
			if err != nil {
				if err != io.EOF {
					r.Err = err
				}
				break
			}
			if firstToken.IsZero() && openai.HasContent(openai.EventData(ev)) {
				firstToken = time.Now()
			}
		}
	} else {
		_, r.Err = io.Copy(io.Discard, resp.Body)
		firstToken = time.Now()
	}
	end := time.Now()
	span := func(a, b time.Time) time.Duration {
		if a.IsZero() || b.IsZero() {
			return 0
		}
		return b.Sub(a)
	}
	r.DNS, r.Connect, r.TLS = span(dnsStart, dnsDone), span(connStart, connDone), span(tlsStart, tlsDone)
	r.Wait = span(wrote, firstByte)
	r.FirstToken = span(firstByte, firstToken)
	r.Rest = span(firstToken, end)
	r.TTFB, r.TTFT, r.Total = span(start, firstByte), span(start, firstToken), end.Sub(start)
	return r
}

// WriteProbe prints each result and the medians.
func WriteProbe(w io.Writer, url string, rs []ProbeResult) {
	fmt.Fprintf(w, "probe %s: %d requests, one at a time\n\n", url, len(rs))
	fmt.Fprintf(w, "%4s %9s %9s %9s %11s %12s %9s | %9s %9s %9s\n", "#", "dns", "connect", "tls", "wait(srv)", "→1st token", "rest", "ttfb", "ttft", "total")
	cols := make([][]float64, 9)
	for i, r := range rs {
		if r.Err != nil {
			// One line per failure, whatever the error's text holds.
			fmt.Fprintf(w, "%4d error: %s\n", i+1, strings.Join(strings.Fields(r.Err.Error()), " "))
			continue
		}
		v := []time.Duration{r.DNS, r.Connect, r.TLS, r.Wait, r.FirstToken, r.Rest, r.TTFB, r.TTFT, r.Total}
		for k, d := range v {
			cols[k] = append(cols[k], float64(d)/1e6)
		}
		fmt.Fprintf(w, "%4d %9s %9s %9s %11s %12s %9s | %9s %9s %9s\n", i+1, pms(r.DNS), pms(r.Connect), pms(r.TLS), pms(r.Wait), pms(r.FirstToken), pms(r.Rest), pms(r.TTFB), pms(r.TTFT), pms(r.Total))
	}
	if len(cols[0]) == 0 {
		return
	}
	m := make([]time.Duration, len(cols))
	for k := range cols {
		m[k] = time.Duration(verdict.Median(cols[k]) * 1e6)
	}
	fmt.Fprintf(w, "%4s %9s %9s %9s %11s %12s %9s | %9s %9s %9s\n", "p50", pms(m[0]), pms(m[1]), pms(m[2]), pms(m[3]), pms(m[4]), pms(m[5]), pms(m[6]), pms(m[7]), pms(m[8]))
	outside := m[0] + m[1] + m[2]
	fmt.Fprintf(w, "\nmedian: %.1f%% of the time to first token is DNS, connect and TLS; the server's wait (with one round trip) is %s.\n",
		100*float64(outside)/float64(max(m[7], 1)), pms(m[3]))
}

func pms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/1e6) }
