package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/infergate/infergate/proxy"
	"go.yaml.in/yaml/v3"
)

// fileConfig is the whole configuration file. Each package owns its
// section; later sections (shaping, policy, tracing) join here.
type fileConfig struct {
	proxy.Config `yaml:",inline"`
}

// loadConfig reads and validates the file at path. Unknown keys are
// errors, so a typo does not silently fall back to a default.
func loadConfig(path string) (proxy.Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return proxy.Config{}, fmt.Errorf("config: %w", err)
	}
	var fc fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
		return proxy.Config{}, fmt.Errorf("config %s: %s", path, nameFields(raw, err.Error()))
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
	cfg.Defaults()
	return cfg
}

var lineRe = regexp.MustCompile(`line (\d+): `)

// nameFields adds the dotted path of the field at each "line N:" of a YAML
// decoding error, which yaml.v3 reports by line only for type errors.
func nameFields(raw []byte, msg string) string {
	var root yaml.Node
	if yaml.Unmarshal(raw, &root) != nil {
		return msg
	}
	return lineRe.ReplaceAllStringFunc(msg, func(m string) string {
		n, _ := strconv.Atoi(lineRe.FindStringSubmatch(m)[1])
		if p := fieldAt(&root, n, nil); p != "" {
			return fmt.Sprintf("line %d, field %s: ", n, p)
		}
		return m
	})
}

// fieldAt returns the path of the mapping key whose value starts on line.
func fieldAt(n *yaml.Node, line int, path []string) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p := fieldAt(c, line, path); p != "" {
				return p
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := append(slices.Clone(path), k.Value)
			if v.Kind == yaml.ScalarNode && (v.Line == line || k.Line == line) {
				return strings.Join(p, ".")
			}
			if r := fieldAt(v, line, p); r != "" {
				return r
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := slices.Clone(path)
			if len(p) > 0 {
				p[len(p)-1] += "[" + strconv.Itoa(i) + "]"
			}
			if r := fieldAt(c, line, p); r != "" {
				return r
			}
		}
	}
	return ""
}
