//go:build linux

package hangup

import (
	"net"
	"testing"
	"time"
)

func TestResting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		peer func(net.Conn) // what the server side does to the idle connection
		want bool
	}{
		{"idle", func(net.Conn) {}, true},
		// llama.cpp's server after a streamed answer, or past its idle time.
		{"peer closed", func(c net.Conn) { c.Close() }, false},
		{"peer reset", func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }, false},
		// A 408 before the close, or any byte no request asked for.
		{"bytes unasked", func(c net.Conn) { c.Write([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n")) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			client, server := pair(t)
			defer client.Close()
			defer server.Close()
			tc.peer(server)
			// The peer's act reaches us one loopback trip later: wait for
			// it when one is expected, up to a second.
			got := Resting(client)
			for deadline := time.Now().Add(time.Second); got && !tc.want && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
				got = Resting(client)
			}
			if !tc.want {
				if got {
					t.Fatalf("Resting = true a second after the peer's act, want false")
				}
				return
			}
			time.Sleep(20 * time.Millisecond) // nothing is coming; make sure
			if !Resting(client) {
				t.Errorf("Resting = false for an idle, open connection")
			}
		})
	}
}

func TestRestingReadsNothing(t *testing.T) {
	t.Parallel()
	client, server := pair(t)
	defer client.Close()
	defer server.Close()
	if _, err := server.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	// Poll until Resting sees the byte (one loopback trip), up to a second.
	seen := false
	for deadline := time.Now().Add(time.Second); !seen && time.Now().Before(deadline); {
		if seen = !Resting(client); !seen {
			time.Sleep(time.Millisecond)
		}
	}
	if !seen {
		t.Fatal("Resting = true a second after the peer wrote a byte, want false")
	}
	buf := make([]byte, 4)
	client.SetReadDeadline(time.Now().Add(time.Second))
	if n, _ := client.Read(buf); string(buf[:n]) != "x" {
		t.Errorf("read %q after Resting, want the byte it saw", buf[:n])
	}
}

func TestRestingWithoutSocket(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	b.Close()
	if !Resting(a) {
		t.Error("Resting = false for a pipe: it cannot tell, and must say true")
	}
}

// BenchmarkResting is the cost the round trip adds to each reuse of a
// pooled connection: one ppoll(2).
func BenchmarkResting(b *testing.B) {
	client, server := pair(b)
	defer client.Close()
	defer server.Close()
	fd, _ := SocketFD(client)
	var c net.Conn = fdConn{Conn: client, fd: fd}
	b.ReportAllocs()
	for b.Loop() {
		if !Resting(c) {
			b.Fatal("not resting")
		}
	}
}
