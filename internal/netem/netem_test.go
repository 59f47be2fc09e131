//go:build linux

package netem

import (
	"net"
	"testing"
	"time"
)

// A TCP connection through the link takes the delay to open (one round
// trip), and the echo of a byte takes it again.
func TestLinkDelaysTheRoundTrip(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	l, err := New(30 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ln, err := l.Listen("0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		for {
			if _, err := c.Read(b); err != nil {
				return
			}
			c.Write(b)
		}
	}()
	start := time.Now()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dial := time.Since(start)
	start = time.Now()
	b := []byte{'x'}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(b); err != nil {
		t.Fatal(err)
	}
	echo := time.Since(start)
	for name, d := range map[string]time.Duration{"connect": dial, "echo": echo} {
		if d < 30*time.Millisecond || d > 200*time.Millisecond {
			t.Errorf("%s took %v, want the link's 30 ms round trip", name, d)
		}
	}
}
