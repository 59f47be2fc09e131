package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/infergate/infergate/internal/httpurl"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/policy"
	"github.com/infergate/infergate/proxy"
	"github.com/infergate/infergate/sim"
	"go.opentelemetry.io/otel"
)

const serveSynopsis = `serve [--config FILE | --upstream URL [--upstream URL ...] [--selection POLICY]] [--listen ADDR] [--max-concurrency N [--max-queue M --queue-timeout D] [--redis ADDR]] [flags]

Runs the gateway. With --config it reads one YAML file (see
infergate.example.yaml); SIGHUP re-reads it, and so do infergate config
reload (through the admin listener) and a change of its contents, checked
every --watch-config; a file that does not validate is refused while the
running configuration stays. --pid-file FILE names this process for kill:
kill -HUP "$(cat FILE)". With --upstream
every model goes to that backend; repeated, to one pool of them, picked by
--selection: least_outstanding (the default), load (each backend's own
queue and KV usage, scraped from its /metrics) or prefix (the backend
expected to hold the prompt's prefix in its KV cache, unless it is
saturated; then by load). With neither, a built-in simulator
(infergate sim, balanced preset) starts on a free localhost port and serves
every model: try it with

  curl -N localhost:8080/v1/chat/completions -d '{"model":"sim-model","stream":true,"messages":[{"role":"user","content":"hi"}]}'

Metrics (Prometheus text at /metrics) and the live view (/admin/stats,
read by infergate top) are on the admin listener, --admin-listen. Its
routes also roll back and set the configuration: on an address other
machines reach (:9464, 0.0.0.0) it needs a key of its own,
--admin-auth-file FILE (server.admin_auth or admin_auth_file), or serve
refuses to start.

--max-concurrency caps the requests in flight; the rest wait in a queue
(--max-queue, --queue-timeout) and, past it, get 503 with Retry-After. The
flags override the file's shaping section, at start and at every reload.
With --redis the caps hold across every replica that names the same Redis.

--auth-keys FILE requires a key of the file (401 invalid_api_key
otherwise). --max-input-tokens N counts each chat request's messages (with
--tokenizer) and, above N, rejects it with 400 context_length_exceeded or
trims it (--trim drop_oldest: whole older turns go, system messages stay;
--trim truncate_middle: the longest message loses its middle).
--max-output-tokens N clamps max_tokens.

--mirror URL copies each request (or --mirror-sample of them, by request
id) to a candidate backend after the primary was admitted, on its own
connections; both answers are timed and judged, and each pair goes to
--mirror-record FILE and /admin/pairs. infergate ab report FILE gives
the verdict. The client is told in
X-Infergate-Trimmed-Tokens and X-Infergate-Max-Tokens-Clamped. Like the
shaping flags, these override the file at start and at every reload.

SIGTERM or SIGINT drains: /readyz answers 503 and responses close their
connections at once; new connections are still served for
server.drain_delay (so load balancers notice); then no new connections, and
in-flight streams finish until server.drain_timeout, then are cancelled;
the exit status is 0. A second signal exits at once, status 1.`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", serveSynopsis, stderr)
	file := fs.String("config", "", "YAML configuration file")
	listen := fs.String("listen", "", "address to listen on (default 127.0.0.1:8080; overrides the file)")
	adminAuthFile := fs.String("admin-auth-file", "", "the admin listener's key (Authorization: Bearer KEY), read from this file at start and at every reload; no tenant's key (overrides server.admin_auth_file)")
	adminListen := fs.String("admin-listen", "", "address of the admin listener: /metrics, /admin/stats (default "+proxy.DefaultAdminListen+"; off: none; overrides server.admin_listen)")
	var upstreams stringList
	fs.Var(&upstreams, "upstream", "send every model to this backend URL (no config file needed); repeat for a pool of backends")
	selection := fs.String("selection", "", "with --upstream: least_outstanding (default), weighted_round_robin, power_of_two, load or prefix")
	health := fs.String("health-path", "", "with --upstream: active health check path, e.g. /health (default off)")
	level := fs.String("log-level", "info", "debug, info (one line per request), warn or error")
	format := fs.String("log-format", "text", "text or json")
	maxConc := fs.Int64("max-concurrency", 0, "cap on requests in flight through the gateway (shaping.global.max_requests; 0: none)")
	maxQueue := fs.Int("max-queue", 0, "requests that may wait for a slot (shaping.queue.max_waiting; default 1024, -1: none)")
	queueTimeout := fs.Duration("queue-timeout", 0, "longest wait for a slot (shaping.queue.timeout; default 30s)")
	redisAddr := fs.String("redis", "", "share the caps, and where prefix selection placed prompts and sessions, with other replicas through the Redis at host:port (shaping.redis.addr)")
	authKeys := fs.String("auth-keys", "", "require an API key from this file: one key or sha256:HEX per line, optionally after a tenant name (auth.required; the keys join the tenants section; re-read on SIGHUP)")
	maxInput := fs.Int("max-input-tokens", 0, "cap a chat request's messages at this many tokens (policy.max_input_tokens; 0: none)")
	trim := fs.String("trim", "", "above --max-input-tokens: reject (default), drop_oldest or truncate_middle (policy.trim)")
	maxOutput := fs.Int("max-output-tokens", 0, "clamp max_tokens to this, and set it when a request has none (policy.max_output_tokens; 0: none)")
	tokenizer := fs.String("tokenizer", "", "count tokens with cl100k_base, o200k_base, hf:PATH (a tokenizer.json), backend (the backend's own count: vLLM's /tokenize, llama.cpp's input_tokens) or estimate (policy.tokenizer; default estimate)")
	mirrorURL := fs.String("mirror", "", "copy requests to this candidate backend URL and record each pair of answers (mirror.rules)")
	mirrorSample := fs.Float64("mirror-sample", 0, "with --mirror: the share of requests copied, by request id (default 1)")
	mirrorAA := fs.Bool("mirror-aa", false, "with --mirror: also send each copied request once more to the primary (the A/A noise floor ab report shows)")
	mirrorRecord := fs.String("mirror-record", "", "with --mirror: write the pairs to this JSONL file (mirror.record.path); infergate ab report reads it")
	watchEvery := fs.Duration("watch-config", 0, "with --config: also reload when the file's (or --auth-keys file's) contents change, checked this often, e.g. 10s (a Kubernetes ConfigMap or Secret update); 0: on SIGHUP only")
	addrFile := fs.String("addr-file", "", addrFileHelp)
	pidFile := fs.String("pid-file", "", "write the process id to this file once the listeners are bound (kill -HUP \"$(cat FILE)\"); removed at exit; serve refuses to start while it names a running infergate")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile (pprof) to this file until exit")
	memprofile := fs.String("memprofile", "", "write an allocation profile (pprof) to this file at exit")
	traceFile := fs.String("trace", "", "write a runtime execution trace (go tool trace: GC pauses, scheduling latency, goroutine hand-offs) to this file until exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	stopProfiles, err := startProfiles(*cpuprofile, *memprofile, stderr)
	if err != nil {
		return err
	}
	defer stopProfiles()
	stopTrace, err := startTrace(*traceFile)
	if err != nil {
		return err
	}
	defer stopTrace()
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	log, err := newLogger(stderr, *level, *format)
	if err != nil {
		return err
	}
	// OpenTelemetry reports export failures through its own process-wide
	// handler: a process setting, so it is set here, not by the gateway.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "err", err) }))
	if *file != "" && len(upstreams) > 0 {
		return fmt.Errorf("--config and --upstream are exclusive")
	}
	if *selection != "" && len(upstreams) == 0 {
		return fmt.Errorf("--selection needs --upstream (a file sets pools.NAME.selection)")
	}
	for _, u := range upstreams {
		if _, err := httpurl.Parse(u); err != nil {
			return fmt.Errorf("--upstream %w", err)
		}
	}
	if *mirrorURL != "" {
		if _, err := httpurl.Parse(*mirrorURL); err != nil {
			return fmt.Errorf("--mirror %w", err)
		}
	}
	var cfg proxy.Config
	switch {
	case *file != "":
		if cfg, err = loadConfig(*file); err != nil {
			return err
		}
	case len(upstreams) > 0:
		cfg = quickPool(*listen, upstreams, *health, *selection)
	default:
		stopSim, url, err := startBuiltinSim(log)
		if err != nil {
			return err
		}
		defer stopSim()
		cfg = quickConfig(*listen, url, "/health")
		cfg.Server.ForwardSimFault = true // the built-in sim's faults are for trying the gateway out
		log.Info("built-in simulator listening (no --config or --upstream)", "addr", url)
	}
	if *listen != "" {
		cfg.Server.Listen = *listen
	}
	overrides := func(c *proxy.Config) error {
		if *authKeys != "" {
			keys, err := readAuthKeys(*authKeys)
			if err != nil {
				return err
			}
			if c.Tenants == nil {
				c.Tenants = map[string]proxy.TenantConfig{}
			}
			for name, t := range keys {
				ct := c.Tenants[name]
				ct.APIKeys = append(ct.APIKeys, t.APIKeys...)
				c.Tenants[name] = ct
			}
			c.Auth.Required = true
		}
		if *maxInput != 0 {
			c.Policy.MaxInputTokens = *maxInput
		}
		if *trim != "" {
			c.Policy.Trim = policy.Strategy(*trim)
		}
		if *maxOutput != 0 {
			c.Policy.MaxOutputTokens = *maxOutput
		}
		if *tokenizer != "" {
			c.Policy.Tokenizer = *tokenizer
		}
		if *mirrorURL != "" {
			if c.Pools == nil {
				c.Pools = map[string]proxy.PoolConfig{}
			}
			c.Pools["mirror"] = proxy.PoolConfig{Backends: []proxy.BackendConfig{{URL: *mirrorURL}}}
			c.Mirror.Rules = append(c.Mirror.Rules, mirror.Rule{Name: "mirror", Pool: "mirror", Sample: *mirrorSample, AA: *mirrorAA})
		}
		if *mirrorRecord != "" {
			c.Mirror.Record.Path = *mirrorRecord
		}
		if *adminListen != "" {
			c.Server.AdminListen = *adminListen
		}
		if *adminAuthFile != "" {
			c.Server.AdminAuth, c.Server.AdminAuthFile = "", *adminAuthFile
		}
		if *maxConc != 0 {
			c.Shaping.Global.MaxRequests = *maxConc
		}
		if *maxQueue != 0 {
			c.Shaping.Queue.MaxWaiting = *maxQueue
		}
		if *queueTimeout != 0 {
			c.Shaping.Queue.Timeout = *queueTimeout
		}
		if *redisAddr != "" {
			c.Shaping.Redis.Addr = *redisAddr
		}
		return nil
	}
	if err := overrides(&cfg); err != nil {
		return err
	}
	if *pidFile != "" {
		if err := pidFileFree(*pidFile); err != nil {
			return err
		}
	}
	g, err := proxy.New(cfg, log)
	if err != nil {
		return err
	}
	// reloadFile re-reads the file: on SIGHUP, a --watch-config change or
	// POST /admin/config/reload (which runs on the admin listener's own
	// goroutine; ReloadFrom serialises them).
	reloadFile := func(source string) error {
		next, err := loadConfig(*file)
		if err != nil {
			return err
		}
		if *listen != "" {
			next.Server.Listen = *listen
		}
		if err := overrides(&next); err != nil {
			return err
		}
		return g.ReloadFrom(source+" "+*file, next)
	}
	if *file != "" {
		g.SetFileReload(reloadFile)
	}
	ln, err := net.Listen("tcp", g.Config().Server.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", g.Config().Server.Listen, err)
	}
	var aln net.Listener
	if a := g.Config().Server.AdminListen; a != "off" {
		if aln, err = net.Listen("tcp", a); err != nil {
			ln.Close()
			return fmt.Errorf("admin listen %s (server.admin_listen, --admin-listen; off turns it off): %w", a, err)
		}
	}
	// The pid file exists before anything answers: whoever saw /readyz
	// answer can read it.
	if *pidFile != "" {
		remove, err := writePIDFile(*pidFile)
		if err != nil {
			ln.Close()
			return err
		}
		defer remove()
	}
	if *addrFile != "" {
		kv := []string{"api", ln.Addr().String()}
		if aln != nil {
			kv = append(kv, "admin", aln.Addr().String())
		}
		remove, err := writeAddrFile(*addrFile, kv...)
		if err != nil {
			ln.Close()
			if aln != nil {
				aln.Close()
			}
			return err
		}
		defer remove()
	}
	errc := make(chan error, 2)
	if aln != nil {
		log.Info("admin listening", "addr", aln.Addr().String(), "paths", "/metrics /admin/stats")
		go func() { errc <- g.ServeAdmin(aln) }()
	}
	log.Info("infergate listening", "addr", ln.Addr().String(), "tls", g.Config().Server.TLS.CertFile != "")
	go func() { errc <- g.Serve(ln) }()

	reload := func(source string) {
		if err := reloadFile(source); err != nil {
			log.Error("reload refused; the running configuration stays", "err", err, "by", source)
			return
		}
		log.Info("configuration reloaded", "file", *file, "by", source)
	}
	// --watch-config: a ConfigMap or Secret update swaps the mounted files
	// under the process; their contents, not their times, say what changed.
	var watch <-chan time.Time
	watched := []string{*file, *authKeys, g.Config().Server.AdminAuthFile}
	stamp := filesStamp(watched)
	if *watchEvery > 0 && *file != "" {
		t := time.NewTicker(*watchEvery)
		defer t.Stop()
		watch = t.C
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case err := <-errc:
			return err
		case <-hup:
			if *file == "" {
				log.Warn("SIGHUP ignored: no --config file to reload")
				continue
			}
			stamp = filesStamp(watched)
			reload("sighup")
		case <-watch:
			if s := filesStamp(watched); s != stamp {
				stamp = s
				reload("watch")
			}
		case <-ctx.Done():
			return drain(g, log, errc)
		}
	}
}

// filesStamp is a hash of the named files' contents (a missing or
// unreadable file hashes as its error), so a reload runs once per change.
func filesStamp(paths []string) string {
	h := sha256.New()
	for _, p := range paths {
		if p == "" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			b = []byte("error: " + err.Error())
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// drain stops the gateway after SIGTERM or SIGINT: /readyz turns 503 and
// responses close their connections at once; the listener keeps accepting
// for server.drain_delay, so load balancers notice; then in-flight
// requests get server.drain_timeout to finish. A second signal at any
// point exits at once, status 1.
func drain(g *proxy.Gateway, log *slog.Logger, errc <-chan error) error {
	force := make(chan os.Signal, 1)
	signal.Notify(force, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(force)
	g.BeginDrain()
	sc := g.Config().Server
	log.Info("draining", "delay", sc.DrainDelay, "timeout", sc.DrainTimeout)
	select {
	case <-time.After(sc.DrainDelay):
	case sig := <-force:
		return fmt.Errorf("second signal (%v) during the drain delay: exiting now", sig)
	case err := <-errc:
		return err
	}
	dctx, cancel := context.WithTimeout(context.Background(), sc.DrainTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Shutdown(dctx) }()
	select {
	case err := <-done:
		if err != nil {
			log.Error("shutdown", "err", err)
		}
		log.Info("stopped")
		return nil
	case sig := <-force:
		return fmt.Errorf("second signal (%v) during the drain: exiting now, requests in flight cut off", sig)
	}
}

// startBuiltinSim runs a balanced simulator in this process on a free
// localhost port.
func startBuiltinSim(log *slog.Logger) (stop func(), url string, err error) {
	s, err := sim.New(sim.DefaultConfig(), log.With("component", "sim"))
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("built-in sim: %w", err)
	}
	go s.Serve(ln)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}, "http://" + ln.Addr().String(), nil
}
