package main

import (
	"fmt"

	"github.com/infergate/infergate/internal/yamlconf"
	"github.com/infergate/infergate/proxy"
)

// fileConfig is the whole configuration file. Each package owns its
// section; later sections (shaping, policy, tracing) join here.
type fileConfig struct {
	proxy.Config `yaml:",inline"`
}

// loadConfig reads and validates the file at path. Unknown keys are
// errors, so a typo does not silently fall back to a default.
func loadConfig(path string) (proxy.Config, error) {
	var fc fileConfig
	if err := yamlconf.Load(path, &fc); err != nil {
		return proxy.Config{}, err
	}
	cfg := fc.Config
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return proxy.Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// quickConfig routes every model to one backend: the configuration of
// `serve --upstream URL`.
func quickConfig(listen, upstream, healthPath string) proxy.Config {
	return quickPool(listen, []string{upstream}, healthPath, "")
}

// quickPool is quickConfig for a pool of several backends, chosen by
// selection ("" the default).
func quickPool(listen string, upstreams []string, healthPath, selection string) proxy.Config {
	pc := proxy.PoolConfig{Selection: selection, Health: proxy.HealthConfig{Path: healthPath}}
	for _, u := range upstreams {
		pc.Backends = append(pc.Backends, proxy.BackendConfig{URL: u})
	}
	return proxy.Config{
		Server:      proxy.ServerConfig{Listen: listen},
		Pools:       map[string]proxy.PoolConfig{"default": pc},
		DefaultPool: "default",
	}
}
