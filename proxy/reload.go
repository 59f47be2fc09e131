package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"

	"github.com/infergate/infergate/shaping"
)

// Reload: a new configuration checked, built and swapped in all or
// nothing, its hash, and the history it joins (versions.go).

// Reload validates cfg and swaps it in, all or nothing: every check
// that can refuse the file (its validity, the settings that need a
// restart, the TLS files, the backends' settings) runs before anything of
// the running gateway changes, so a refused file changes nothing. The
// listen address and server limits take effect only at restart.
func (g *Gateway) Reload(cfg Config) error { return g.ReloadFrom("reload", cfg) }

// ReloadFrom is Reload, naming where the configuration came from in the
// kept history (ConfigVersions).
func (g *Gateway) ReloadFrom(source string, cfg Config) error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	old := g.state.Load()
	switch {
	case cfg.Server.Listen != old.cfg.Server.Listen:
		return fmt.Errorf("server.listen: changing %s to %s needs a restart", old.cfg.Server.Listen, cfg.Server.Listen)
	case (cfg.Server.TLS.CertFile == "") != (old.cfg.Server.TLS.CertFile == ""):
		return errors.New("server.tls: turning TLS on or off needs a restart")
	case cfg.Tracing != old.cfg.Tracing:
		return errors.New("tracing: changing it needs a restart")
	case cfg.Metrics != old.cfg.Metrics || cfg.Server.AdminListen != old.cfg.Server.AdminListen:
		return errors.New("metrics, server.admin_listen: changing them needs a restart")
	case cfg.RequestLog.Path != old.cfg.RequestLog.Path:
		return errors.New("request_log.path: changing it needs a restart")
	case cfg.Shaping.Redis != old.cfg.Shaping.Redis:
		return errors.New("shaping.redis: changing it needs a restart")
	case cfg.Mirror.Record.Path != old.cfg.Mirror.Record.Path:
		return errors.New("mirror.record.path: changing it needs a restart")
	case cfg.Share != old.cfg.Share:
		return errShareReload
	}
	cert, err := readCert(cfg.Server.TLS)
	if err != nil {
		return err
	}
	st, err := g.build(cfg, old)
	if err != nil {
		return err
	}
	// From here nothing refuses the file: the limiter first, as it is the
	// one change that could still fail.
	if err := g.lim.Reconfigure(cfg.Shaping); err != nil {
		st.closeExcept(old)
		return err
	}
	g.cert.Store(cert)
	if g.rlog != nil {
		g.rlog.SetSampleRate(cfg.RequestLog.SampleRate)
	}
	g.warnDeprecated(cfg)
	g.state.Store(st)
	g.startShare(&cfg)
	g.versions.add(cfg, st.configHash, source)
	// Requests in flight keep the old pools until they end; closing stops
	// the old health checks and drops idle connections of backends that
	// are gone. Unchanged backends carry on in the new pools.
	old.closeExcept(st)
	return nil
}

// warnDeprecated logs what the file says in a way that still works but
// will not for ever.
func (g *Gateway) warnDeprecated(cfg Config) {
	if cfg.LegacyTenants {
		g.log.Warn("shaping.tenants is deprecated: move the tenants to the top-level tenants section (same fields)")
	}
	for _, w := range cfg.Mirror.Deprecated() {
		g.log.Warn(w)
	}
}

// hashConfig is the first 16 hex digits of the SHA-256 of cfg as JSON,
// its secrets (backends' API keys and URL credentials, tenants' keys)
// left out: the hash is served on /healthz to anyone.
func hashConfig(cfg Config) string {
	b, err := json.Marshal(withoutSecrets(cfg))
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// withoutSecrets is a copy of cfg with every secret blanked; cfg's maps
// and slices are not touched.
func withoutSecrets(cfg Config) Config {
	pools := make(map[string]PoolConfig, len(cfg.Pools))
	for name, p := range cfg.Pools {
		bs := slices.Clone(p.Backends)
		for i := range bs {
			bs[i].APIKey = ""
			if u, err := url.Parse(bs[i].URL); err == nil && u.User != nil {
				u.User = nil
				bs[i].URL = u.String()
			}
		}
		p.Backends = bs
		pools[name] = p
	}
	cfg.Pools = pools
	tenants := make(map[string]shaping.Tenant, len(cfg.Shaping.Tenants))
	for name, t := range cfg.Shaping.Tenants {
		t.APIKeys = nil
		tenants[name] = t
	}
	cfg.Shaping.Tenants = tenants
	top := make(map[string]TenantConfig, len(cfg.Tenants))
	for name, t := range cfg.Tenants {
		t.APIKeys = nil
		top[name] = t
	}
	cfg.Tenants = top
	cfg.Policy.Tenants = nil // a copy of Tenants
	cfg.Server.AdminAuth = ""
	return cfg
}
