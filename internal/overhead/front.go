package overhead

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// front is a plain round-robin HTTP front on loopback, what a load
// balancer or a Kubernetes Service puts before gateway replicas: each
// request goes to the next replica in turn, whatever it carries, so two
// turns of a session reach different replicas and only the replicas'
// own agreement keeps the session where its cache is. Streams are
// relayed as they come (FlushInterval -1).
type front struct {
	addr    string
	srv     *http.Server
	served  chan error
	next    atomic.Uint64
	counts  []atomic.Int64
	tr      []*http.Transport
	closing sync.Once
}

// startFront listens on 127.0.0.1 (a port the kernel picks) and
// forwards to the replicas at addrs (host:port), one request each in
// turn. Close stops it.
func startFront(addrs []string) (*front, error) {
	if len(addrs) == 0 {
		return nil, errors.New("front: no replica")
	}
	proxies := make([]*httputil.ReverseProxy, len(addrs))
	transports := make([]*http.Transport, len(addrs))
	for i, a := range addrs {
		u, err := url.Parse("http://" + a)
		if err != nil {
			return nil, fmt.Errorf("front: replica %q: %w", a, err)
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.FlushInterval = -1
		transports[i] = &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second}
		rp.Transport = transports[i]
		proxies[i] = rp
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("front: %w", err)
	}
	f := &front{addr: ln.Addr().String(), served: make(chan error, 1), counts: make([]atomic.Int64, len(addrs)), tr: transports}
	f.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int((f.next.Add(1) - 1) % uint64(len(proxies)))
		f.counts[i].Add(1)
		proxies[i].ServeHTTP(w, r)
	})}
	go func() { f.served <- f.srv.Serve(ln) }()
	return f, nil
}

// Counts is the requests forwarded to each replica so far.
func (f *front) Counts() []int64 {
	out := make([]int64, len(f.counts))
	for i := range f.counts {
		out[i] = f.counts[i].Load()
	}
	return out
}

// Close stops accepting, lets requests in flight finish for up to 10 s
// (then cuts them) and returns when the server has stopped. Safe to call
// twice.
func (f *front) Close() {
	f.closing.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if f.srv.Shutdown(ctx) != nil {
			_ = f.srv.Close()
		}
		<-f.served
		for _, t := range f.tr {
			t.CloseIdleConnections()
		}
	})
}
