package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/infergate/infergate/internal/promtext"
	"github.com/infergate/infergate/internal/safehttp"
)

// The admin listener's paths (proxy's route table serves these).
const (
	PathStats    = "/admin/stats"
	PathPairs    = "/admin/pairs"
	PathVersions = "/admin/config/versions"
	PathSet      = "/admin/config/set"
	PathRollback = "/admin/config/rollback"
	PathReload   = "/admin/config/reload"
)

// Bounds of an answer read: a hostile or broken listener cannot make a
// caller hold more. The pairs keep up to mirror.record.recent answers of
// max_output_bytes each, twice (primary and candidate) plus the prompt.
const (
	MaxAnswer      = 16 << 20
	MaxPairsAnswer = 256 << 20
)

// Client calls one gateway's admin listener. Its zero value is not
// usable: URL is needed.
type Client struct {
	// URL is the admin listener's base URL (serve --admin-listen); a
	// bare host:port is taken as http. Key is its server.admin_auth key,
	// when it has one, sent as `Authorization: Bearer KEY`.
	URL, Key string
	// HTTP does the calls (http.DefaultClient when nil); redirects are
	// refused, so the key never reaches another host (safehttp.Guard).
	// Its timeout, or the context's, bounds a call.
	HTTP *http.Client
}

// Stats reads the live view: the last minute per model and backend, and
// what is in flight now.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	return s, c.do(ctx, http.MethodGet, PathStats, nil, &s, MaxAnswer)
}

// Pairs reads the recent mirrored pairs and the mirror's counts.
func (c *Client) Pairs(ctx context.Context) (Pairs, error) {
	var p Pairs
	return p, c.do(ctx, http.MethodGet, PathPairs, nil, &p, MaxPairsAnswer)
}

// Versions lists the configurations the gateway keeps, newest first.
func (c *Client) Versions(ctx context.Context) (Versions, error) {
	var vs Versions
	return vs, c.do(ctx, http.MethodGet, PathVersions, nil, &vs, MaxAnswer)
}

// Set applies settings on top of the running configuration as one
// reload and returns the new version; a refused change changes nothing
// and is an error carrying the gateway's reason.
func (c *Client) Set(ctx context.Context, req SetRequest) (Version, error) {
	var v Version
	return v, c.do(ctx, http.MethodPost, PathSet, req, &v, MaxAnswer)
}

// Rollback applies a kept configuration again (req's zero value: the one
// before the current) and returns the new version.
func (c *Client) Rollback(ctx context.Context, req RollbackRequest) (Version, error) {
	var v Version
	return v, c.do(ctx, http.MethodPost, PathRollback, req, &v, MaxAnswer)
}

// Reload makes the gateway re-read its --config file, as SIGHUP does,
// and returns the new version; a file that does not validate is refused
// (the running configuration stays) and is an error carrying the reason.
func (c *Client) Reload(ctx context.Context) (Version, error) {
	var v Version
	return v, c.do(ctx, http.MethodPost, PathReload, nil, &v, MaxAnswer)
}

// do sends body (JSON, none when nil) to path and decodes a 200's answer
// into out, reading at most limit bytes. Any other status is an error
// carrying the gateway's own message when its body has one.
func (c *Client) do(ctx context.Context, method, path string, body, out any, limit int64) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("adminapi: %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	base := strings.TrimRight(c.URL, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u := base + path
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("adminapi: %w", err)
	}
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := safehttp.Guard(c.HTTP).Do(req)
	if err != nil {
		return fmt.Errorf("adminapi: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("adminapi: %s %s: %w", method, u, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("adminapi: %s %s: %s: %s", method, u, resp.Status, e.Error.Message)
		}
		return fmt.Errorf("adminapi: %s %s: %s", method, u, resp.Status)
	}
	if int64(len(b)) > limit {
		return fmt.Errorf("adminapi: %s %s: the answer is larger than %d bytes", method, u, limit)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("adminapi: %s %s: the answer is not the expected JSON: %w", method, u, err)
	}
	return nil
}

// Metrics reads the gateway's Prometheus exposition (/metrics on the admin
// listener), at most promtext.MaxBytes of it.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	base := strings.TrimRight(c.URL, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("adminapi: %w", err)
	}
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	resp, err := safehttp.Guard(c.HTTP).Do(req)
	if err != nil {
		return nil, fmt.Errorf("adminapi: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("adminapi: GET %s/metrics: %s", base, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, promtext.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("adminapi: GET %s/metrics: %w", base, err)
	}
	if len(b) > promtext.MaxBytes {
		return nil, fmt.Errorf("adminapi: GET %s/metrics: larger than %d bytes", base, promtext.MaxBytes)
	}
	return b, nil
}
