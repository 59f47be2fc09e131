package proxy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/yamlconf"
)

// configHistory is how many applied configurations the gateway keeps for
// rollback: enough for a tuning walk (two versions a step, at most twelve
// steps) to return to where it began.
const configHistory = 32

// kept is one applied configuration: what the history lists, and the
// configuration itself, for a rollback.
type kept struct {
	v   adminapi.Version
	cfg Config
}

// versions is the gateway's history of applied configurations, newest
// last, at most configHistory long.
type versions struct {
	mu   sync.Mutex
	list []kept
	next int
}

func (v *versions) add(cfg Config, hash, source string) adminapi.Version {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.next++
	cv := kept{v: adminapi.Version{Version: v.next, Hash: hash, AppliedAt: time.Now().UTC(), Source: source, Settings: Settings(cfg)}, cfg: cfg}
	v.list = append(v.list, cv)
	if len(v.list) > configHistory {
		v.list = slices.Delete(v.list, 0, len(v.list)-configHistory)
	}
	return cv.v
}

// ConfigVersions lists the configurations the gateway keeps, newest
// first; the current one is marked.
func (g *Gateway) ConfigVersions() []adminapi.Version {
	g.versions.mu.Lock()
	defer g.versions.mu.Unlock()
	out := make([]adminapi.Version, len(g.versions.list))
	for i, k := range g.versions.list {
		k.v.Current = i == len(g.versions.list)-1
		out[len(out)-1-i] = k.v
	}
	return out
}

// Errors of Rollback.
var (
	ErrNoVersion  = errors.New("proxy: no such configuration version")
	ErrNoPrevious = errors.New("proxy: no earlier configuration to roll back to")
)

// Rollback applies a kept configuration again, as a reload does (it is
// validated, and refused the same way): the version numbered to, the one
// whose hash starts with hash, or with neither the one before the
// current. The file on disk is not touched: a later SIGHUP reads it
// again.
func (g *Gateway) Rollback(to int, hash string) (adminapi.Version, error) {
	g.versions.mu.Lock()
	var target *kept
	list := g.versions.list
	switch {
	case to > 0:
		for i := range list {
			if list[i].v.Version == to {
				target = &list[i]
			}
		}
	case hash != "":
		for i := range list {
			if strings.HasPrefix(list[i].v.Hash, hash) {
				target = &list[i]
			}
		}
	case len(list) >= 2:
		target = &list[len(list)-2]
	}
	var cv kept
	if target != nil {
		cv = *target
	}
	g.versions.mu.Unlock()
	switch {
	case target == nil && to == 0 && hash == "":
		return adminapi.Version{}, ErrNoPrevious
	case target == nil:
		return adminapi.Version{}, fmt.Errorf("%w: %s", ErrNoVersion, cmpOr(hash, strconv.Itoa(to)))
	}
	if err := g.ReloadFrom(fmt.Sprintf("rollback to version %d", cv.v.Version), cv.cfg); err != nil {
		return adminapi.Version{}, err
	}
	vs := g.ConfigVersions()
	g.log.Info("configuration rolled back", "to_version", cv.v.Version, "hash", cv.v.Hash, "version", vs[0].Version)
	return vs[0], nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Settings lists cfg's non-zero fields by their YAML paths
// ("shaping.global.max_requests": "24"), secrets left out: what a
// person compares between two configurations.
func Settings(cfg Config) map[string]string {
	return yamlconf.Flatten(withoutSecrets(cfg))
}

// Set applies settings (YAML path → value, as adminapi.Version.Settings
// names them) on top of the running configuration, as one reload kept
// in the history with the source "set: " + source, and returns the new
// version. Secrets and the sections only a restart changes are refused
// as a reload refuses them.
func (g *Gateway) Set(settings map[string]string, source string) (adminapi.Version, error) {
	cfg := g.Config()
	var err error
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		if cfg, err = yamlconf.Set(cfg, k, settings[k]); err != nil {
			return adminapi.Version{}, err
		}
	}
	if len(source) > 200 {
		source = source[:200]
	}
	if err := g.ReloadFrom("set: "+source, cfg); err != nil {
		return adminapi.Version{}, err
	}
	vs := g.ConfigVersions()
	return vs[0], nil
}
