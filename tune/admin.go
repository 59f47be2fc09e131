package tune

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// admin is a client of a gateway's admin listener: its configuration
// history, a change of settings, a rollback.
type admin struct {
	url, key string
	hc       *http.Client
}

// Version is one of the gateway's kept configurations, as
// /admin/config/versions lists it.
type Version struct {
	Version  int               `json:"version"`
	Hash     string            `json:"hash"`
	Source   string            `json:"source"`
	Current  bool              `json:"current"`
	Settings map[string]string `json:"settings"`
}

func (a *admin) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(a.url, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("tune: gateway admin: %w", err)
	}
	if a.key != "" {
		req.Header.Set("Authorization", "Bearer "+a.key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("tune: gateway admin %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("tune: gateway admin %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("tune: gateway admin %s: %d: %s", path, resp.StatusCode, e.Error.Message)
		}
		return fmt.Errorf("tune: gateway admin %s: status %d", path, resp.StatusCode)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("tune: gateway admin %s: %w", path, err)
		}
	}
	return nil
}

// current is the configuration the gateway runs now.
func (a *admin) current(ctx context.Context) (Version, error) {
	var vs struct {
		Versions []Version `json:"versions"`
	}
	if err := a.do(ctx, http.MethodGet, "/admin/config/versions", nil, &vs); err != nil {
		return Version{}, err
	}
	for _, v := range vs.Versions {
		if v.Current {
			return v, nil
		}
	}
	return Version{}, fmt.Errorf("tune: the gateway at %s names no current configuration", a.url)
}

// set changes settings on the running gateway.
func (a *admin) set(ctx context.Context, settings map[string]string, source string) (Version, error) {
	var v Version
	err := a.do(ctx, http.MethodPost, "/admin/config/set", map[string]any{"settings": settings, "source": source}, &v)
	return v, err
}

// restore applies the kept configuration with this hash again.
func (a *admin) restore(ctx context.Context, hash string) (Version, error) {
	var v Version
	err := a.do(ctx, http.MethodPost, "/admin/config/rollback", map[string]any{"hash": hash}, &v)
	return v, err
}
