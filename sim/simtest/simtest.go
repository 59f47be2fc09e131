// Package simtest runs the simulator in a test's own process, the way
// net/http/httptest runs a handler: on a loopback port the kernel picks,
// shut down when the test ends.
package simtest

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/infergate/infergate/sim"
)

// Server is a running simulator.
type Server struct {
	// URL is the base URL, http://127.0.0.1:port, without a trailing slash.
	URL string
	// Sim is the simulator itself.
	Sim *sim.Server
}

// Start runs a simulator with cfg on 127.0.0.1 and a kernel-picked port
// until the test ends. Its logs are discarded.
func Start(t testing.TB, cfg sim.Config) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return StartOn(t, cfg, ln)
}

// StartOn runs a simulator on ln (a listener in a network namespace, say)
// until the test ends.
func StartOn(t testing.TB, cfg sim.Config, ln net.Listener) *Server {
	t.Helper()
	s, err := sim.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = s.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		<-served
	})
	return &Server{URL: "http://" + ln.Addr().String(), Sim: s}
}

// Fixed returns the default configuration in fixed mode: every answer
// starts after ttft and sends a token every itl, whatever the load.
func Fixed(ttft, itl time.Duration) sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Mode, cfg.TTFT, cfg.ITL = sim.ModeFixed, ttft, itl
	return cfg
}
