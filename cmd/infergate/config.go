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
	cfg := proxy.Config{
		Server:      proxy.ServerConfig{Listen: listen},
		Pools:       map[string]proxy.PoolConfig{"default": {Backends: []proxy.BackendConfig{{URL: upstream}}, Health: proxy.HealthConfig{Path: healthPath}}},
		DefaultPool: "default",
	}
	return cfg
}
