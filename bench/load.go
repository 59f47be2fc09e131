package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/infergate/infergate/openai"
)

// Target is what every request of a run sends.
type Target struct {
	// URL is the full endpoint, e.g. http://127.0.0.1:8080/v1/chat/completions.
	URL string
	// Body is the JSON request body.
	Body []byte
	// Stream reads the answer as server-sent events.
	Stream bool
}

// Options shape a closed-loop run: Concurrency workers, each sending its
// next request when the previous one ends, until Duration or MaxRequests.
type Options struct {
	Concurrency int
	Duration    time.Duration
	// MaxRequests stops the run after this many requests; 0 is no limit.
	MaxRequests int
	// Timeout bounds one request. Default 60s.
	Timeout time.Duration
	// RampUp spreads the workers' first requests evenly over this span, so
	// a closed loop does not send its whole concurrency in one burst.
	RampUp time.Duration
}

// Sample is one finished request.
type Sample struct {
	Start    time.Time
	TTFT     time.Duration // to the first content event; the whole body when not streaming
	Duration time.Duration
	Events   int // content events
	Err      error
}

// Run is the outcome of a run: its samples and every gap between two
// content events of a stream, in arrival order per request.
type Run struct {
	Samples []Sample
	Gaps    []time.Duration
	Elapsed time.Duration
}

// NewClient returns an HTTP client that keeps one connection per worker.
func NewClient(concurrency int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        concurrency * 2,
		MaxIdleConnsPerHost: concurrency * 2,
		MaxConnsPerHost:     0,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false,
	}}
}

// Load runs t with o on client. It returns when the run is over or ctx ends.
func Load(ctx context.Context, client *http.Client, t Target, o Options) (*Run, error) {
	if o.Concurrency < 1 || (o.Duration <= 0 && o.MaxRequests <= 0) {
		return nil, errors.New("bench: need concurrency ≥ 1 and a duration or a request count")
	}
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	var (
		mu     sync.Mutex
		run    = &Run{}
		issued int
		wg     sync.WaitGroup
	)
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil || (o.MaxRequests > 0 && issued >= o.MaxRequests) {
			return false
		}
		issued++
		return true
	}
	start := time.Now()
	for i := range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if o.RampUp > 0 {
				select {
				case <-time.After(o.RampUp * time.Duration(i) / time.Duration(o.Concurrency)):
				case <-ctx.Done():
					return
				}
			}
			w := worker{client: client, t: t, timeout: o.Timeout, er: openai.NewEventReader(nil, nil, 1<<20)}
			var samples []Sample
			for take() {
				// A request in flight when the run ends is finished, not cut:
				// its figures are as valid as any other's.
				samples = append(samples, w.do(context.WithoutCancel(ctx)))
			}
			mu.Lock()
			run.Samples = append(run.Samples, samples...)
			run.Gaps = append(run.Gaps, w.gaps...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	run.Elapsed = time.Since(start)
	return run, nil
}

type worker struct {
	client  *http.Client
	t       Target
	timeout time.Duration
	er      *openai.EventReader
	gaps    []time.Duration
}

func (w *worker) do(ctx context.Context) Sample {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.t.URL, bytes.NewReader(w.t.Body))
	if err != nil {
		return Sample{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	s := Sample{Start: time.Now()}
	resp, err := w.client.Do(req)
	if err != nil {
		s.Err = err
		return s
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		s.Err = fmt.Errorf("status %d", resp.StatusCode)
		s.Duration = time.Since(s.Start)
		return s
	}
	if !w.t.Stream {
		_, err = io.Copy(io.Discard, resp.Body)
		s.Duration = time.Since(s.Start)
		s.TTFT, s.Err = s.Duration, err
		return s
	}
	w.er.Reset(resp.Body, nil, 1<<20)
	var last time.Time
	done := false
	for {
		ev, err := w.er.Next()
		if err != nil {
			if err != io.EOF {
				s.Err = err
			} else if !done {
				s.Err = errors.New("stream ended without [DONE]")
			}
			break
		}
		now := time.Now()
		if openai.IsDone(ev) {
			done = true
			continue
		}
		data := openai.EventData(ev)
		if openai.IsErrorChunk(data) {
			s.Err = fmt.Errorf("error event: %s", data)
			continue
		}
		if !openai.HasContent(data) {
			continue
		}
		if s.Events == 0 {
			s.TTFT = now.Sub(s.Start)
		} else {
			w.gaps = append(w.gaps, now.Sub(last))
		}
		last = now
		s.Events++
	}
	s.Duration = time.Since(s.Start)
	return s
}
