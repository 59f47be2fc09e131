package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/httpurl"
	"github.com/infergate/infergate/internal/safehttp"
)

// ListModels asks an OpenAI-compatible server at base (its base URL or
// an endpoint under it) for the models it serves (GET /v1/models).
func ListModels(ctx context.Context, base string, headers [][2]string) ([]string, error) {
	if _, err := httpurl.Parse(base); err != nil {
		return nil, fmt.Errorf("bench: models: %w", err)
	}
	u := strings.TrimRight(base, "/")
	for _, suffix := range []string{"/chat/completions", "/completions"} {
		u = strings.TrimSuffix(u, suffix)
	}
	if !strings.HasSuffix(u, "/v1") {
		u += "/v1"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/models", nil)
	if err != nil {
		return nil, fmt.Errorf("bench: models: %w", err)
	}
	for _, h := range headers {
		req.Header.Set(h[0], h[1])
	}
	resp, err := safehttp.Client(0).Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s/models: %w", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	ct := resp.Header.Get("Content-Type")
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/models: %s", u, DescribeAnswer(resp.StatusCode, ct, body, ""))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil || len(list.Data) == 0 {
		return nil, fmt.Errorf("GET %s/models: %s", u, DescribeAnswer(resp.StatusCode, ct, body, `JSON {"data":[{"id":MODEL}]} from an OpenAI-compatible server (or pass --model)`))
	}
	out := make([]string, 0, min(len(list.Data), 50))
	for _, m := range list.Data[:min(len(list.Data), 50)] {
		out = append(out, m.ID)
	}
	return out, nil
}

// failFastAfter is how many of a run's first requests must all fail
// alike for the run to stop: a wrong model name or key fails every
// request the same way, and measuring it would only time errors. Overload
// answers (429, 503) never stop it.
const failFastAfter = 8

// AllFailed is the error of a run stopped because its first requests
// all failed alike.
type AllFailed struct {
	N       int
	Class   string // http_404, connect, ...
	Message string // the first one's text
	// Models are the models the server lists, for a 404 (a model name
	// the server does not serve is the common cause).
	Models []string
}

func (e *AllFailed) Error() string {
	msg := fmt.Sprintf("bench: stopped: the first %d requests all failed alike (%s): %s", e.N, e.Class, e.Message)
	if len(e.Models) > 0 {
		msg += fmt.Sprintf("\nthe server lists these models at /v1/models: %s (pass one with --model)", strings.Join(e.Models, ", "))
	}
	return msg
}

// failFast watches a run's first finished requests (warm-up included).
// Its see is called under the collector's lock, one result at a time.
type failFast struct {
	seen  int
	class string
	msg   string
	done  bool
}

// see returns the run's stop error once the first failFastAfter requests
// all failed with one class, nil otherwise.
func (f *failFast) see(r *Result) error {
	if f.done || r.ErrClass == ErrCancelled {
		return nil
	}
	// A 429 or 503 is the server saying it is full, not that the run is
	// misconfigured: an overload run measures exactly those.
	if r.OK() || (f.seen > 0 && r.ErrClass != f.class) || r.ErrClass == "http_429" || r.ErrClass == "http_503" {
		f.done = true
		return nil
	}
	if f.seen == 0 {
		f.class, f.msg = r.ErrClass, r.Err
	}
	f.seen++
	if f.seen < failFastAfter {
		return nil
	}
	f.done = true
	return &AllFailed{N: f.seen, Class: f.class, Message: clip(f.msg, 300)}
}

// stoppedEarly returns the AllFailed that stopped the run, with the
// server's models when it was a 404, or nil.
func stoppedEarly(ctx context.Context, err error, base string, headers [][2]string) *AllFailed {
	var af *AllFailed
	if !errors.As(err, &af) {
		return nil
	}
	if af.Class == "http_404" {
		af.Models, _ = ListModels(context.WithoutCancel(ctx), base, headers)
	}
	return af
}
