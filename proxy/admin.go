package proxy

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/fastsrv"
	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/policy"
	"github.com/infergate/infergate/tracing"
	"github.com/valyala/fasthttp"
)

// handleAdmin serves the admin listener.
func (g *Gateway) handleAdmin(rc *fasthttp.RequestCtx) {
	switch p := string(rc.Path()); {
	case p == "/healthz" || p == "/readyz":
		// Probes stay open.
	case refusedDoubleAuthorization(rc):
		return
	case !g.adminAllowed(rc):
		if rc.IsPost() {
			g.log.Warn("admin call refused: no valid admin key", "path", p, "remote", rc.RemoteAddr().String())
		}
		rc.Response.Header.Set("WWW-Authenticate", `Bearer realm="infergate-admin"`)
		writeError(rc, http.StatusUnauthorized, openai.TypeInvalidRequest, "invalid_api_key", "the admin listener needs server.admin_auth's key as `Authorization: Bearer KEY`")
		return
	}
	switch string(rc.Path()) {
	case "/metrics", adminapi.PathStats:
		// Every request that ended before the scrape is in it.
		g.syncTelemetry()
	}
	switch string(rc.Path()) {
	case "/metrics":
		fastsrv.WriteMetrics(rc, g.m.mp.Registry, g.log)
	case adminapi.PathStats:
		writeJSON(rc, http.StatusOK, g.Stats(time.Now()))
	case adminapi.PathPairs:
		writeJSON(rc, http.StatusOK, g.Pairs())
	case adminapi.PathVersions:
		writeJSON(rc, http.StatusOK, adminapi.Versions{Versions: g.ConfigVersions()})
	case adminapi.PathRollback:
		g.handleRollback(rc)
	case adminapi.PathSet:
		g.handleSet(rc)
	case adminapi.PathReload:
		g.handleReload(rc)
	case "/healthz", "/readyz":
		g.handle(rc)
	default:
		writeError(rc, http.StatusNotFound, openai.TypeNotFound, "not_found", "no admin route for "+string(rc.Path()))
	}
}

// Pairs returns the recent mirrored pairs and the mirror's counts, every
// pair whose two answers have ended included.
func (g *Gateway) Pairs() adminapi.Pairs { return g.pairs.Stats() }

// MirrorsInFlight is the number of mirrored copies not yet answered.
func (g *Gateway) MirrorsInFlight() int {
	n := 0
	for _, m := range g.state.Load().mirrors {
		n += m.rule.InFlight()
	}
	return n
}

// adminCaller names who made an admin call, for the log: the remote
// address and the credential (a fingerprint of the admin key, never the
// key), or that the listener has none.
func (g *Gateway) adminCaller(rc *fasthttp.RequestCtx) []any {
	cred := "none (no server.admin_auth; loopback listener)"
	if k := g.state.Load().adminKey; k != nil {
		cred = "admin_auth sha256:" + hex.EncodeToString(k[:6])
	}
	return []any{"remote", rc.RemoteAddr().String(), "credential", cred}
}

// adminAllowed reports whether the request carries server.admin_auth's
// key, or none is configured.
func (g *Gateway) adminAllowed(rc *fasthttp.RequestCtx) bool {
	k := g.state.Load().adminKey
	return k == nil || policy.KeyMatches(*k, rc.Request.Header.Peek("Authorization"))
}

// Stats is the live view: the recent window's percentiles and attribution
// per model and backend, and what is in flight now.
func (g *Gateway) Stats(now time.Time) adminapi.Stats {
	snap := g.stats.Snapshot(now)
	ls := g.lim.Stats()
	snap.Gateway.Queued = ls.Waiting
	snap.Gateway.Classes = g.classStates(ls)
	snap.Gateway.Share = g.shareState()
	for _, p := range g.state.Load().pools {
		for _, b := range p.backends {
			n := b.Outstanding()
			snap.Gateway.InFlight += n
			bs := adminapi.BackendState{Pool: p.name, Name: b.name, InFlight: n, Breaker: b.BreakerState().String(), Up: b.Available(now)}
			if p.load != nil {
				last := p.load.state(b, now, &bs)
				if p.prefix != nil {
					p.prefix.state(b, last, &bs)
				}
			}
			bs.Routes = b.routes()
			snap.Gateway.Backends = append(snap.Gateway.Backends, bs)
		}
	}
	slices.SortFunc(snap.Gateway.Backends, func(a, b adminapi.BackendState) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Name, b.Name))
	})
	return snap
}

// record adds the finished request to the metrics and the live view.
func (x *exchange) record() {
	model := x.g.m.label(x.model)
	backend := ""
	if x.backend != nil {
		backend = x.backend.host
	}
	x.g.m.Record(&x.tl, tracing.RequestMetrics{Operation: x.operation(), Model: model, Backend: backend, Outcome: x.outcome,
		ClientGone: x.outcome == outcomeClientGone, Truncated: errors.Is(x.err, errEndedEarly)})
	if x.outcome != outcomeRejected {
		x.g.stats.Add(&x.tl, model, backend, x.outcome == outcomeOK)
	}
}

// handleRollback serves POST /admin/config/rollback: a body of
// {"version": N} or {"hash": "PREFIX"} (adminapi.RollbackRequest), or none
// for the previous configuration.
func (g *Gateway) handleRollback(rc *fasthttp.RequestCtx) {
	if !rc.IsPost() {
		rc.Response.Header.Set("Allow", "POST")
		writeError(rc, http.StatusMethodNotAllowed, openai.TypeInvalidRequest, "method_not_allowed", "POST {\"version\": N}, {\"hash\": \"PREFIX\"} or nothing (the previous configuration)")
		return
	}
	var req adminapi.RollbackRequest
	if body := rc.PostBody(); len(body) > 0 {
		if len(body) > 4096 || json.Unmarshal(body, &req) != nil || req.Version < 0 {
			writeError(rc, http.StatusBadRequest, openai.TypeInvalidRequest, "invalid_request", "want {\"version\": N} or {\"hash\": \"PREFIX\"}")
			return
		}
	}
	cv, err := g.Rollback(req.Version, req.Hash)
	who := g.adminCaller(rc)
	switch {
	case errors.Is(err, ErrNoVersion) || errors.Is(err, ErrNoPrevious):
		g.log.Warn("rollback refused", append(who, "err", err)...)
		writeError(rc, http.StatusNotFound, openai.TypeNotFound, "no_such_version", err.Error())
	case err != nil:
		g.log.Error("rollback refused; the running configuration stays", append(who, "err", err)...)
		writeError(rc, http.StatusConflict, openai.TypeInvalidRequest, "rollback_refused", "rollback refused, the running configuration stays: "+err.Error())
	default:
		g.log.Info("config rolled back", append(who, "version", cv.Version, "hash", cv.Hash, "source", cv.Source)...)
		writeJSON(rc, http.StatusOK, cv)
	}
}

// Bounds of POST /admin/config/set.
const (
	maxSetBody     = 16 << 10
	maxSetSettings = 32
)

// handleSet serves POST /admin/config/set: {"settings": {"YAML.path":
// "value", ...}, "source": "why"} applied on top of the running
// configuration as one reload (validated like one; a refused change
// changes nothing), kept in the history as "set: why". It answers the
// new version.
func (g *Gateway) handleSet(rc *fasthttp.RequestCtx) {
	if !rc.IsPost() {
		rc.Response.Header.Set("Allow", "POST")
		writeError(rc, http.StatusMethodNotAllowed, openai.TypeInvalidRequest, "method_not_allowed", `POST {"settings": {"shaping.global.max_requests": "24"}, "source": "why"}`)
		return
	}
	var req adminapi.SetRequest
	body := rc.PostBody()
	if len(body) > maxSetBody || json.Unmarshal(body, &req) != nil || len(req.Settings) == 0 || len(req.Settings) > maxSetSettings {
		writeError(rc, http.StatusBadRequest, openai.TypeInvalidRequest, "invalid_request",
			fmt.Sprintf(`want {"settings": {"YAML.path": "value"}, "source": "why"}: 1 to %d settings, at most %d bytes`, maxSetSettings, maxSetBody))
		return
	}
	cv, err := g.Set(req.Settings, req.Source)
	who := g.adminCaller(rc)
	if err != nil {
		g.log.Warn("config set refused; the running configuration stays", append(who, "err", err, "source", req.Source)...)
		writeError(rc, http.StatusConflict, openai.TypeInvalidRequest, "set_refused", "refused, the running configuration stays: "+err.Error())
		return
	}
	g.log.Info("config set", append(who, "version", cv.Version, "hash", cv.Hash, "source", cv.Source, "settings", slices.Sorted(maps.Keys(req.Settings)))...)
	writeJSON(rc, http.StatusOK, cv)
}

// handleReload serves POST /admin/config/reload: the file the gateway
// was started with read again, as SIGHUP does (SetFileReload), so a
// person reloads this gateway without finding its process. It answers
// the new version.
func (g *Gateway) handleReload(rc *fasthttp.RequestCtx) {
	if !rc.IsPost() {
		rc.Response.Header.Set("Allow", "POST")
		writeError(rc, http.StatusMethodNotAllowed, openai.TypeInvalidRequest, "method_not_allowed", "POST, no body: re-read the configuration file")
		return
	}
	reload := g.fileReload.Load()
	if reload == nil {
		writeError(rc, http.StatusConflict, openai.TypeInvalidRequest, "no_config_file", "this gateway was started without a configuration file (serve --config): there is nothing to re-read")
		return
	}
	who := g.adminCaller(rc)
	if err := (*reload)("admin"); err != nil {
		g.log.Error("reload refused; the running configuration stays", append(who, "err", err)...)
		writeError(rc, http.StatusConflict, openai.TypeInvalidRequest, "reload_refused", "reload refused, the running configuration stays: "+err.Error())
		return
	}
	cv := g.ConfigVersions()[0]
	g.log.Info("configuration reloaded", append(who, "version", cv.Version, "hash", cv.Hash, "source", cv.Source)...)
	writeJSON(rc, http.StatusOK, cv)
}

// SetFileReload gives the admin route POST /admin/config/reload what
// re-reads the configuration file (serve's SIGHUP handler; by names the
// caller, "admin"). Without it the route answers 409: the gateway knows
// its configuration, not where it came from.
func (g *Gateway) SetFileReload(reload func(by string) error) {
	g.fileReload.Store(&reload)
}

func writeJSON(rc *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(rc, http.StatusInternalServerError, openai.TypeServer, "internal_error", "cannot render the answer")
		return
	}
	rc.SetStatusCode(status)
	rc.SetContentType("application/json")
	rc.SetBody(b)
}
