package proxy

import (
	"crypto/tls"
	"encoding/json"
	"fmt"

	"github.com/infergate/infergate/policy"

	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/openai"
)

// A configuration made live: the pools, routes, rules and keys a request
// reads, built whole from a validated Config and swapped in at once.

// state is one configuration made live: what a request reads, atomically,
// when it starts. A reload builds a new one and swaps it in.
type state struct {
	cfg       Config
	pools     map[string]*pool
	models    map[string]*route
	def       *route // default_pool, or nil
	modelList []byte // GET /v1/models, rendered; nil means pass through
	budget    *retryBudget
	// pol is the compiled policy; tokenCaps is set when admission caps
	// tokens, so every chat request's prompt is counted.
	pol       *policy.Policy
	tokenCaps bool
	// adminKey is the SHA-256 of server.admin_auth, nil when unset.
	adminKey *[32]byte
	// mirrors are the mirror rules, in order; split the canary, or nil.
	mirrors []tapRule
	split   *tapSplit
	// configHash identifies the configuration (header
	// X-Infergate-Config-Hash on /healthz), so a benchmark record can say
	// which gateway settings it measured.
	configHash string
}

// route is where a model's requests go.
type route struct {
	pool          *pool
	upstreamModel string // empty: keep the client's name
}

// build makes a state from a validated config, taking over the unchanged
// backends of old (nil at start).
func (g *Gateway) build(cfg Config, old *state) (*state, error) {
	reuse := map[string]*backend{}
	if old != nil {
		for _, p := range old.pools {
			for _, b := range p.backends {
				reuse[b.key] = b
			}
		}
	}
	var prev *policy.Policy
	if old != nil {
		prev = old.pol
	}
	// The policy first: a tokenizer that cannot be loaded refuses the
	// file before any pool is built.
	pol, err := policy.Compile(cfg.Policy, prev)
	if err != nil {
		return nil, err
	}
	st := &state{cfg: cfg, pools: map[string]*pool{}, models: map[string]*route{}, pol: pol, tokenCaps: cfg.Shaping.HasTokenCaps(),
		budget: newRetryBudget(cfg.Retries.BudgetRatio, cfg.Retries.BudgetMinPerSecond), configHash: hashConfig(cfg)}
	switch k, err := cfg.Server.adminKey(); {
	case err != nil:
		return nil, fmt.Errorf("server.admin_auth_file: %w", err)
	case k != "":
		d, err := policy.ParseKey(k)
		if err != nil {
			return nil, fmt.Errorf("server.admin_auth: %w", err)
		}
		st.adminKey = &d
	}
	for name, pc := range cfg.Pools {
		p, err := newPool(name, pc, cfg.Timeouts.Connect, g.log, reuse)
		if err != nil {
			st.closeExcept(old)
			return nil, err
		}
		if p.prefix != nil {
			p.prefix.bus = &g.bus
		}
		st.pools[name] = p
	}
	for _, m := range cfg.Models {
		st.models[m.Name] = &route{pool: st.pools[m.Pool], upstreamModel: m.UpstreamModel}
	}
	for _, r := range cfg.Mirror.Rules {
		st.mirrors = append(st.mirrors, tapRule{rule: mirror.Live(r), pool: st.pools[r.Pool]})
	}
	if sp := cfg.Mirror.Split; sp != nil {
		st.split = &tapSplit{split: mirror.LiveSplitOf(sp), pool: st.pools[sp.Pool]}
	}
	if cfg.DefaultPool != "" {
		st.def = &route{pool: st.pools[cfg.DefaultPool]}
	}
	if len(cfg.Models) > 0 {
		list := openai.ModelList{Object: "list"}
		for _, m := range cfg.Models {
			list.Data = append(list.Data, openai.Model{ID: m.Name, Object: "model", Created: g.started.Unix(), OwnedBy: "infergate"})
		}
		b, err := json.Marshal(list)
		if err != nil {
			return nil, fmt.Errorf("render models: %w", err)
		}
		st.modelList = b
	}
	return st, nil
}

func (st *state) close() { st.closeExcept(nil) }

// closeExcept closes st's pools but leaves the backends that next took
// over alone.
func (st *state) closeExcept(next *state) {
	kept := map[*backend]bool{}
	if next != nil {
		for _, p := range next.pools {
			for _, b := range p.backends {
				kept[b] = true
			}
		}
	}
	for _, p := range st.pools {
		p.closeExcept(kept)
	}
}

// lookup returns the route of a model, or the default route, or nil.
func (st *state) lookup(model string) *route {
	if r, ok := st.models[model]; ok {
		return r
	}
	return st.def
}

func (g *Gateway) loadCert(t ServerTLS) error {
	cert, err := readCert(t)
	if err != nil {
		return err
	}
	g.cert.Store(cert)
	return nil
}

// readCert reads the certificate and key t names; nil when TLS is off.
func readCert(t ServerTLS) (*tls.Certificate, error) {
	if t.CertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("server.tls: %w", err)
	}
	return &cert, nil
}
