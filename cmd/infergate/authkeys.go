package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/infergate/infergate/policy"
	"github.com/infergate/infergate/proxy"
)

// readAuthKeys reads --auth-keys: one key per line, as the key or as
// sha256:HEX, optionally after a tenant name ("team-a sk-..."); blank
// lines and lines starting with # are skipped. A key without a name is a
// tenant of its own, named "key-" and 12 hex digits of its SHA-256 (as the
// gateway names unknown keys), so each client queues fairly. Errors name
// the line, never the key.
func readAuthKeys(path string) (map[string]proxy.TenantConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--auth-keys: %w", err)
	}
	defer f.Close()
	return parseAuthKeys(path, f)
}

// parseAuthKeys reads the lines of an --auth-keys file named path.
func parseAuthKeys(path string, r io.Reader) (map[string]proxy.TenantConfig, error) {
	tenants := map[string]proxy.TenantConfig{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) > 2 {
			return nil, fmt.Errorf("--auth-keys %s:%d: want a key, or a tenant name and a key", path, n)
		}
		key := fields[len(fields)-1]
		d, err := policy.ParseKey(key)
		if err != nil {
			return nil, fmt.Errorf("--auth-keys %s:%d: %w", path, n, err)
		}
		name := "key-" + hex.EncodeToString(d[:6])
		if len(fields) == 2 {
			name = fields[0]
		}
		t := tenants[name]
		t.APIKeys = append(t.APIKeys, key)
		tenants[name] = t
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--auth-keys %s: %w", path, err)
	}
	if len(tenants) == 0 {
		return nil, fmt.Errorf("--auth-keys %s: no key in the file", path)
	}
	return tenants, nil
}
