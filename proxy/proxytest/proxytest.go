// Package proxytest runs a gateway in a test's own process, the way
// net/http/httptest runs a handler: its API and admin listeners on
// loopback ports the kernel picks, shut down when the test ends. It is
// for tests outside proxy (tune, diagnose, the SDK tests); the gateway
// never imports it.
package proxytest

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/infergate/infergate/proxy"
)

// Gateway is a running gateway.
type Gateway struct {
	// URL is the API's base URL, http://127.0.0.1:port, without a
	// trailing slash.
	URL string
	// Admin is the admin listener's base URL, in the same form.
	Admin string
	// G is the gateway itself, for Reload and ConfigVersions.
	G *proxy.Gateway
}

// Start runs a gateway with cfg until the test ends. cfg's listen
// addresses are ignored: both listeners are bound before Start returns,
// so no port is picked and then lost to another process. Its logs are
// discarded.
func Start(t testing.TB, cfg proxy.Config, opts ...proxy.Option) *Gateway {
	t.Helper()
	g, err := proxy.New(cfg, slog.New(slog.DiscardHandler), opts...)
	if err != nil {
		t.Fatal(err)
	}
	api, admin := listen(t), listen(t)
	go g.Serve(api)
	go g.ServeAdmin(admin)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	return &Gateway{URL: "http://" + api.Addr().String(), Admin: "http://" + admin.Addr().String(), G: g}
}

// To is the smallest configuration: every model goes to one pool,
// "default", of the one backend at url.
func To(url string) proxy.Config {
	return proxy.Config{
		Pools:       map[string]proxy.PoolConfig{"default": {Backends: []proxy.BackendConfig{{URL: url}}}},
		DefaultPool: "default",
	}
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
