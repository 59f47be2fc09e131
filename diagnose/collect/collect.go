// Package collect reads a deployment's metrics over HTTP for diagnose:
// it samples the gateway's and each backend's /metrics over a window, and
// runs a concurrency sweep with bench while it samples.
package collect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/diagnose"
	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/engine"
	"github.com/infergate/infergate/internal/httpurl"
	"github.com/infergate/infergate/internal/promtext"
	"github.com/infergate/infergate/internal/safehttp"
	"github.com/infergate/infergate/openai"
)

// Config says what to read and how often.
type Config struct {
	// Gateway is an infergate gateway's admin URL (serve --admin-listen);
	// its /metrics is read, and its backends are found in its live view
	// when Backends is empty.
	Gateway string
	// AdminKey is the gateway's server.admin_auth key, when it has one.
	AdminKey string
	// Backends are the backends' metrics URLs (a base URL gets /metrics).
	Backends []string
	// DCGM is the DCGM exporter's URL; its GPU utilisation stands for
	// every backend's. Without it, a backend's own DCGM_FI_DEV_GPU_UTIL
	// series (the simulator has one) is used where present.
	DCGM string
	// Interval between samples (default 1s) and Window, how long to
	// sample (default 15s).
	Interval, Window time.Duration
	// Client makes the requests; nil uses one with a 5 s timeout.
	Client *http.Client
}

func (c *Config) defaults() {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.Window <= 0 {
		c.Window = 15 * time.Second
	}
	if c.Client == nil {
		c.Client = safehttp.Client(5 * time.Second)
	}
}

// metricsURL appends /metrics to a base URL.
func metricsURL(raw string) (string, error) {
	u, err := httpurl.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("collect: %w", err)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/metrics"
	}
	return u.String(), nil
}

func (c *Config) get(ctx context.Context, u string, auth bool) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if auth && c.AdminKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.AdminKey)
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("collect: %s: status %d", u, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, promtext.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("collect: %s: %w", u, err)
	}
	if len(b) > promtext.MaxBytes {
		return nil, fmt.Errorf("collect: %s: more than %d bytes", u, promtext.MaxBytes)
	}
	return b, nil
}

func (c *Config) scrape(ctx context.Context, u string, auth bool) (*promtext.Scrape, error) {
	at := time.Now()
	b, err := c.get(ctx, u, auth)
	if err != nil {
		return nil, err
	}
	s, err := promtext.Parse(bytes.NewReader(b), at)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return s, nil
}

// admin is the gateway's admin listener.
func (c *Config) admin() *adminapi.Client {
	return &adminapi.Client{URL: c.Gateway, Key: c.AdminKey, HTTP: c.Client}
}

// Discover lists the gateway's backends' metrics URLs, from its live view
// (adminapi.Stats): every backend of every pool, at /metrics.
func Discover(ctx context.Context, cfg Config) ([]string, error) {
	cfg.defaults()
	snap, err := cfg.admin().Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("collect: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, be := range snap.Gateway.Backends {
		u, err := url.Parse(be.Name)
		if err != nil || u.Host == "" {
			continue
		}
		u.Path, u.RawQuery, u.User = "/metrics", "", nil
		if !seen[u.String()] {
			seen[u.String()] = true
			out = append(out, u.String())
		}
	}
	return out, nil
}

// attribution reads the gateway's account of where its recent requests'
// time went, from its live view; nil when it cannot be read.
func (c *Config) attribution(ctx context.Context) *openai.Timing {
	snap, err := c.admin().Stats(ctx)
	if err != nil {
		return nil
	}
	return snap.All.Attribution
}

// Windows are the summaries of one sampling window.
type Windows struct {
	Backends []diagnose.Backend
	Gateway  *diagnose.Gateway
	// Errors are the scrapes that failed (the window carries on without
	// them).
	Errors []string
}

// Sample reads every target every Interval until Window has passed or
// ctx ends, and summarises what it read. It fails only when nothing at
// all could be read.
func Sample(ctx context.Context, cfg Config) (Windows, error) {
	cfg.defaults()
	var targets []string
	for _, b := range cfg.Backends {
		u, err := metricsURL(b)
		if err != nil {
			return Windows{}, err
		}
		targets = append(targets, u)
	}
	gwURL, dcgmURL := "", ""
	var err error
	if cfg.Gateway != "" {
		if gwURL, err = metricsURL(strings.TrimSuffix(cfg.Gateway, "/") + "/metrics"); err != nil {
			return Windows{}, err
		}
	}
	if cfg.DCGM != "" {
		if dcgmURL, err = metricsURL(cfg.DCGM); err != nil {
			return Windows{}, err
		}
	}
	if len(targets) == 0 && gwURL == "" {
		return Windows{}, errors.New("collect: nothing to read: give a gateway or backends")
	}
	readings := make([][]engine.Reading, len(targets))
	slots := make([]slotReader, len(targets))
	utils := make([][]float64, len(targets))
	var gw []diagnose.GatewayReading
	errs := map[string]int{}
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		errs[err.Error()]++
		mu.Unlock()
	}
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	end := time.Now().Add(cfg.Window)
	for {
		util := math.NaN()
		if dcgmURL != "" {
			if s, err := cfg.scrape(ctx, dcgmURL, false); err == nil {
				util = GPUUtil(s)
			} else {
				fail(err)
			}
		}
		var wg sync.WaitGroup
		for i, u := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := cfg.scrape(ctx, u, false)
				if err != nil {
					fail(err)
					return
				}
				u := util
				if math.IsNaN(u) {
					u = GPUUtil(s)
				}
				r := engine.Read(s)
				if r.Server == engine.LlamaCpp {
					slots[i].read(ctx, &cfg, targets[i], fail)
					slots[i].got.Apply(&r)
				}
				readings[i] = append(readings[i], r)
				utils[i] = append(utils[i], u)
			}()
		}
		if gwURL != "" {
			if s, err := cfg.scrape(ctx, gwURL, true); err != nil {
				fail(err)
			} else if g, ok := ReadGateway(s); ok {
				gw = append(gw, g)
			} else {
				fail(fmt.Errorf("collect: %s is not an infergate gateway's metrics", gwURL))
			}
		}
		wg.Wait()
		if !time.Now().Before(end) {
			break
		}
		select {
		case <-ctx.Done():
			end = time.Time{}
		case <-tick.C:
		}
		if end.IsZero() {
			break
		}
	}
	var w Windows
	for i, u := range targets {
		w.Backends = append(w.Backends, diagnose.Summarise(u, readings[i], utils[i]))
	}
	if len(gw) > 0 {
		g := diagnose.SummariseGateway(gw)
		g.Attribution = cfg.attribution(ctx)
		w.Gateway = &g
	}
	for e, n := range errs {
		w.Errors = append(w.Errors, fmt.Sprintf("%s (%d×)", e, n))
	}
	sort.Strings(w.Errors)
	read := len(gw)
	for _, r := range readings {
		read += len(r)
	}
	if read == 0 {
		return w, fmt.Errorf("collect: no target could be read: %s", strings.Join(w.Errors, "; "))
	}
	return w, ctx.Err()
}

// slotReader fetches a llama.cpp server's slot count once per window
// (engine.FetchSlots); it gives up after a few failures, each reported,
// and the window goes on without it.
type slotReader struct {
	got   engine.Slots
	tries int
}

const slotTries = 3

func (sr *slotReader) read(ctx context.Context, cfg *Config, metrics string, fail func(error)) {
	if sr.got.Total > 0 || sr.tries >= slotTries {
		return
	}
	sr.tries++
	u, err := url.Parse(metrics)
	if err != nil {
		fail(err)
		return
	}
	sl, err := engine.FetchSlots(u.Path, func(path string) ([]byte, error) {
		v := *u
		v.Path, v.RawPath = path, ""
		return cfg.get(ctx, v.String(), false)
	})
	if err != nil {
		fail(fmt.Errorf("collect: %s: %w", u.Host, err))
		return
	}
	sr.got = sl
}
