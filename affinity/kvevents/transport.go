package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// zmq4 allocates each frame at the size its header declares before
// reading it, so a hostile publisher could make it allocate any amount
// (or panic in its reader goroutine). Subscriptions therefore dial
// through a transport of their own, "igkv", whose connection parses
// ZMTP 3's framing as it reads (a 64-byte greeting, then frames of a
// flags byte and a 1- or 8-byte size, rfc.zeromq.org/spec/23) and fails
// the read of a frame larger than the limit: the connection drops, the
// subscriber reconnects with backoff.

const (
	scheme           = "igkv"
	handshakeTimeout = 5 * time.Second
	greetingBytes    = 64
)

// registerOnce registers the transport: zmq4 keeps transports in a
// process-wide table, the one piece of global state here. Each address
// carries its own limit (host:port;max=N), so subscribers with different
// limits share the transport.
var registerOnce sync.Once

func register() {
	registerOnce.Do(func() {
		_ = zmq4.RegisterTransport(scheme, limitedTransport{})
	})
}

// endpoint turns tcp://host:port into the limited transport's address
// with the frame limit.
func endpoint(ep string, limit int) (string, error) {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return "", fmt.Errorf("kvevents: endpoint %q: not tcp://host:port", ep)
	}
	if _, _, err := net.SplitHostPort(rest); err != nil {
		return "", fmt.Errorf("kvevents: endpoint %q: %w", ep, err)
	}
	return fmt.Sprintf("%s://%s;max=%d", scheme, rest, limit), nil
}

type limitedTransport struct{}

func (limitedTransport) Dial(ctx context.Context, _ transport.Dialer, addr string) (net.Conn, error) {
	hostport, lim, ok := strings.Cut(addr, ";max=")
	limit, err := strconv.ParseUint(lim, 10, 63)
	if !ok || err != nil {
		return nil, fmt.Errorf("kvevents: address %q has no frame limit", addr)
	}
	d := net.Dialer{Timeout: handshakeTimeout, KeepAlive: 15 * time.Second}
	c, err := d.DialContext(ctx, "tcp", hostport)
	if err != nil {
		return nil, err
	}
	// The handshake (greeting and READY) must come within the timeout;
	// afterwards a quiet publisher is an idle engine, not a dead one
	// (TCP keep-alive notices a vanished host).
	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	return &limitedConn{Conn: c, limit: limit, skip: greetingBytes}, nil
}

func (limitedTransport) Listen(context.Context, string) (net.Listener, error) {
	return nil, errors.New("kvevents: the igkv transport only dials")
}

func (limitedTransport) Addr(ep string) (string, error) { return ep, nil }

// limitedConn follows the ZMTP framing of what it reads.
type limitedConn struct {
	net.Conn
	limit uint64
	skip  uint64 // bytes of the greeting or of a frame body still to pass
	msg   uint64 // bytes of the message's frames so far (they are held until its last)
	hdr   []byte // the frame header read so far
	cmd   bool   // the frame being passed is a command
	ready bool   // the handshake's first command is through
}

var errFrameTooLarge = errors.New("kvevents: ZMQ message larger than the limit")

func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if ferr := c.follow(p[:n]); ferr != nil {
		return 0, ferr
	}
	return n, err
}

// follow advances the framing state over b.
func (c *limitedConn) follow(b []byte) error {
	for len(b) > 0 {
		if c.skip > 0 {
			k := min(c.skip, uint64(len(b)))
			c.skip -= k
			b = b[k:]
			if c.skip == 0 && c.cmd && !c.ready {
				c.ready = true
				_ = c.Conn.SetReadDeadline(time.Time{})
			}
			continue
		}
		c.hdr = append(c.hdr, b[0])
		b = b[1:]
		flags := c.hdr[0]
		need := 2
		if flags&0x02 != 0 { // LONG
			need = 9
		}
		if len(c.hdr) < need {
			continue
		}
		var size uint64
		if need == 2 {
			size = uint64(c.hdr[1])
		} else {
			size = binary.BigEndian.Uint64(c.hdr[1:9])
		}
		// zmq4 holds a message's frames until its last one, and up to
		// ten messages in its queue: the limit is on the whole message.
		c.msg += size
		if size > c.limit || c.msg > c.limit {
			return errFrameTooLarge
		}
		if flags&0x01 == 0 || flags&0x04 != 0 { // the last frame (no MORE), or a command
			c.msg = 0
		}
		c.cmd = flags&0x04 != 0
		c.hdr = c.hdr[:0]
		c.skip = size
		if size == 0 && c.cmd && !c.ready {
			c.ready = true
			_ = c.Conn.SetReadDeadline(time.Time{})
		}
	}
	return nil
}
