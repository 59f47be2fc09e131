package proxy

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/policy"
)

// The gateway's own sections of the file: the listening side, its
// timeouts, retries and the keep-alive of slow streams.

// ServerConfig is the listening side.
type ServerConfig struct {
	// Listen is host:port. Default 127.0.0.1:8080. A reload cannot change it.
	Listen string `yaml:"listen"`
	// AdminListen is host:port of the admin listener: /metrics,
	// /admin/stats, /healthz, /readyz, in plain HTTP. Default
	// 127.0.0.1:9464; "off" turns it off. A reload cannot change it.
	AdminListen string `yaml:"admin_listen"`
	// TLS, when CertFile is set, serves HTTPS; the files are re-read on reload.
	TLS ServerTLS `yaml:"tls"`
	// MaxBodyBytes bounds a request body, in bytes. Default 8 MiB.
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// MaxResponseBytes bounds a non-streaming response body buffered from a
	// backend, in bytes. Default 64 MiB.
	MaxResponseBytes int `yaml:"max_response_bytes"`
	// HeaderTimeout bounds reading a request's line and headers, from
	// their first byte (nginx's client_header_timeout): a slowloris
	// sending a byte at a time is cut here. Default 10s.
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// ReadTimeout bounds reading a request's body, from the end of its
	// headers (nginx's client_body_timeout). Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// MaxConnections caps the client connections open at once; past it a
	// new connection is closed at once, unread, and counted
	// (infergate_connections_refused_total). Default 16384.
	MaxConnections int `yaml:"max_connections"`
	// MaxHeaderBytes bounds a request's line and headers; larger ones get
	// 431. It is also each connection's read buffer (fasthttp's ReadBufferSize). Default 4096.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// WriteTimeout is the longest one write to a client may block (nginx's
	// send_timeout): a client that stops reading a stream, or a large
	// answer, is cut off after it, its backend request cancelled and its
	// slot released. Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes a client keep-alive connection idle this long.
	// Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// DrainDelay is how long the listener keeps accepting after SIGTERM,
	// with /readyz answering 503 and every response closing its
	// connection, before the drain proper: time for load balancers to
	// notice (match it to their health-check period). Default 0.
	DrainDelay time.Duration `yaml:"drain_delay"`
	// DrainTimeout is how long SIGTERM waits for in-flight requests before
	// cancelling them. Default 30s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// ForwardAuthorization passes the client's Authorization header to the
	// backend. Default false: it is dropped, and a backend's api_key is sent.
	ForwardAuthorization bool `yaml:"forward_authorization"`
	// AdminAuth is the key the admin listener's /metrics and /admin/*
	// routes require, as "Authorization: Bearer KEY"; it may be written
	// as sha256:HEX. /healthz and /readyz stay open for probes. Empty (the
	// default) is allowed only while admin_listen is a loopback address:
	// its routes read the traffic and reload and roll back the
	// configuration. No tenant's key may be the admin key.
	AdminAuth string `yaml:"admin_auth"`
	// AdminAuthFile names a file holding AdminAuth's key instead (a
	// mounted Kubernetes Secret; the file Prometheus's credentials_file
	// reads too), read at start and on every reload; not with AdminAuth.
	AdminAuthFile string `yaml:"admin_auth_file"`
	// ForwardSimFault passes the client's X-Sim-Fault header (the
	// simulator's fault injection) to the backends. Default false;
	// `infergate serve` turns it on for its built-in simulator.
	ForwardSimFault bool `yaml:"forward_sim_fault"`
}

// ServerTLS names the certificate and key, PEM files.
type ServerTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Timeouts each have their own error. Before the first byte went to the
// client they answer 504; after it, the stream ends with an SSE error.
type Timeouts struct {
	// Connect bounds dialling a backend, TLS handshake included. Default 5s.
	Connect time.Duration `yaml:"connect"`
	// FirstByte bounds a stream's wait from sending the request to the
	// response headers, and again to the first event. A plain answer's
	// headers come with the whole generation: only Total bounds that
	// wait. Default 120s.
	FirstByte time.Duration `yaml:"first_byte"`
	// Idle bounds the gap between two events of a stream, or between reads
	// of a plain body. Default 60s.
	Idle time.Duration `yaml:"idle"`
	// Total bounds the whole request. Default 15m.
	Total time.Duration `yaml:"total"`
}

// Retries bounds failover. A retry happens only before the first byte went
// to the client, on a connect error, a 5xx or a 429 from a backend.
type Retries struct {
	// Max is the most retries per request. Default 2; -1 disables retries.
	Max int `yaml:"max"`
	// BudgetRatio caps retries at this share of requests. Default 0.2.
	BudgetRatio float64 `yaml:"budget_ratio"`
	// BudgetMinPerSecond allows this many retries a second whatever the
	// ratio, so a quiet gateway can still fail over. Default 10.
	BudgetMinPerSecond float64 `yaml:"budget_min_per_second"`
}

// KeepAlive makes a stream that waits long for its first event commit its
// response and send SSE comment lines, so idle timeouts of load balancers
// on the way do not cut it. It gives up failover for that request, and
// some clients (openai-go before v3.43) abort on comment lines.
type KeepAlive struct {
	// Delay is how long to wait for the first event before committing;
	// 0 (the default) turns keep-alive off.
	Delay time.Duration `yaml:"delay"`
	// Interval between comment lines. Default 15s.
	Interval time.Duration `yaml:"interval"`
}

// validateAdmin holds the admin listener to its own credential: a key
// no tenant has, and one required wherever other machines reach it.
func (s *ServerConfig) validateAdmin(tenants map[string]TenantConfig) error {
	field := "server.admin_auth"
	if s.AdminAuthFile != "" {
		if s.AdminAuth != "" {
			return errors.New("server.admin_auth, server.admin_auth_file: set one")
		}
		field = "server.admin_auth_file"
	}
	k, err := s.adminKey()
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	if k != "" {
		d, err := policy.ParseKey(k)
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		for _, name := range slices.Sorted(maps.Keys(tenants)) {
			for i, k := range tenants[name].APIKeys {
				if td, err := policy.ParseKey(k); err == nil && td == d {
					return fmt.Errorf("%s: the key of tenants.%s.api_keys[%d]; the admin listener needs a key of its own", field, name, i)
				}
			}
		}
		return nil
	}
	if s.AdminListen != "off" && !loopbackAddr(s.AdminListen) {
		return fmt.Errorf("server.admin_listen %s is reachable from other machines, and its routes reload and roll back the configuration: "+
			"set server.admin_auth (a key of its own, or sha256:HEX of one) or server.admin_auth_file, or listen on 127.0.0.1", s.AdminListen)
	}
	return nil
}

// maxAdminKeyFile bounds server.admin_auth_file.
const maxAdminKeyFile = 4 << 10

// adminKey is the admin listener's key as configured, "" for none.
func (s *ServerConfig) adminKey() (string, error) {
	if s.AdminAuthFile == "" {
		return s.AdminAuth, nil
	}
	f, err := os.Open(s.AdminAuthFile)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAdminKeyFile+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", s.AdminAuthFile, err)
	}
	if len(b) > maxAdminKeyFile {
		return "", fmt.Errorf("%s is longer than %d bytes", s.AdminAuthFile, maxAdminKeyFile)
	}
	k := strings.TrimSpace(string(b))
	if k == "" {
		return "", fmt.Errorf("%s is empty", s.AdminAuthFile)
	}
	return k, nil
}

// loopbackAddr reports whether a listen address host:port binds only
// this machine's loopback: an empty host binds every interface.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
