// Package adminapi is the client side of a gateway's admin listener:
// one JSON call with the admin key, and the gateway's error message
// when it refuses. The config command and the tuning loop use it.
package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/infergate/infergate/internal/safehttp"
)

// Client calls one gateway's admin listener.
type Client struct {
	// URL is the admin listener's base URL; Key its server.admin_auth
	// key, when it has one.
	URL, Key string
	// HTTP does the calls (http.DefaultClient when nil).
	HTTP *http.Client
}

// maxAnswer bounds an answer read (the versions list is the largest).
const maxAnswer = 16 << 20

// Do sends body (JSON, none when nil) to path and decodes a 200's answer
// into out (when not nil). Any other status is an error carrying the
// gateway's own message when its body has one.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	u := strings.TrimRight(c.URL, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := safehttp.Guard(c.HTTP).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("%s: %d: %s", path, resp.StatusCode, e.Error.Message)
		}
		return fmt.Errorf("%s: status %d", u, resp.StatusCode)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	return nil
}
