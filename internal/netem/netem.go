//go:build linux

// Package netem puts a real network delay between this process and a
// listener, for tests that must see time on the wire: two TUN devices, one
// here and one in a network namespace of its own, joined by a forwarder
// that holds every packet for the delay. The kernel's TCP sees the delay
// as round-trip time (TCP_INFO), as it would on a real network. The
// kernel's own netem qdisc would do the same, but is not built into every
// kernel; TUN is. It needs root (CAP_NET_ADMIN) and the ip command.
package netem

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Link is a delayed path to a network namespace. Listen there; connect to
// the listener's address from here.
type Link struct {
	// Local and Remote are the two ends' addresses: this process's and
	// the namespace's (10.213.N.1 and .2, N a subnet no other link here
	// uses, so tests of several packages can run at once).
	Local, Remote string

	ns       string
	a, b     *os.File // this side's TUN device, the namespace's
	delay    time.Duration
	stop     chan struct{}
	wg       sync.WaitGroup
	closeOne sync.Once
}

// Available reports why a Link cannot be made here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netem: needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("netem: needs the ip command (iproute2)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("netem: %w", err)
	}
	return nil
}

// New makes a link whose packets each wait delay on the way to the
// namespace (the way back is immediate), so the round trip is delay.
func New(delay time.Duration) (*Link, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	id := fmt.Sprintf("ig%d", os.Getpid()%100000)
	// A subnet no other link of this machine uses (tests of several
	// packages run at once), starting from one the process id picks.
	used, _ := exec.Command("ip", "-o", "addr", "show").Output()
	net := os.Getpid() % 250
	for range 250 {
		if !strings.Contains(string(used), fmt.Sprintf(" 10.213.%d.1 ", net)) {
			break
		}
		net = (net + 1) % 250
	}
	l := &Link{ns: id, delay: delay, stop: make(chan struct{}),
		Local: fmt.Sprintf("10.213.%d.1", net), Remote: fmt.Sprintf("10.213.%d.2", net)}
	fail := func(err error) (*Link, error) {
		l.Close()
		return nil, err
	}
	var err error
	if l.a, err = openTUN(id + "a"); err != nil {
		return fail(err)
	}
	if l.b, err = openTUN(id + "b"); err != nil {
		return fail(err)
	}
	for _, args := range [][]string{
		{"netns", "add", id},
		{"link", "set", id + "b", "netns", id},
		{"addr", "add", l.Local, "peer", l.Remote, "dev", id + "a"},
		{"link", "set", id + "a", "up"},
		{"-n", id, "addr", "add", l.Remote, "peer", l.Local, "dev", id + "b"},
		{"-n", id, "link", "set", id + "b", "up"},
		{"-n", id, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("netem: ip %s: %v: %s", strings.Join(args, " "), err, out))
		}
	}
	l.wg.Add(2)
	go l.forward(l.a, l.b, delay)
	go l.forward(l.b, l.a, 0)
	return l, nil
}

// Listen opens a TCP listener inside the namespace on port ("0" for any);
// connect to it at its address, on Remote.
func (l *Link) Listen(port string) (net.Listener, error) {
	var ln net.Listener
	err := l.inNamespace(func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(l.Remote, port))
		return err
	})
	return ln, err
}

// inNamespace runs f on a thread moved into the namespace; a socket made
// there stays in it.
func (l *Link) inNamespace(f func() error) error {
	runtime.LockOSThread()
	own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netem: %w", err)
	}
	defer own.Close()
	target, err := os.Open("/var/run/netns/" + l.ns)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netem: %w", err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netem: setns: %w", err)
	}
	ferr := f()
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked and dies with this goroutine rather than
		// serve others from the wrong namespace.
		return errors.Join(ferr, fmt.Errorf("netem: setns back: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// forward copies packets from one device to the other, each after delay.
func (l *Link) forward(from, to *os.File, delay time.Duration) {
	defer l.wg.Done()
	type packet struct {
		due time.Time
		b   []byte
	}
	q := make(chan packet, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range q {
			if d := time.Until(p.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := to.Write(p.b); err != nil {
				return
			}
		}
	}()
	defer func() { close(q); <-done }()
	buf := make([]byte, 65536)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		select {
		case q <- packet{due: time.Now().Add(delay), b: append([]byte(nil), buf[:n]...)}:
		case <-l.stop:
			return
		default: // a full queue drops, as a link would
		}
	}
}

// Close removes the namespace and the devices and stops the forwarders.
// It is safe to call twice.
func (l *Link) Close() error {
	l.closeOne.Do(func() {
		close(l.stop)
		_ = exec.Command("ip", "netns", "del", l.ns).Run()
		for _, f := range []*os.File{l.a, l.b} {
			if f != nil {
				f.Close()
			}
		}
		l.wg.Wait()
	})
	return nil
}

// openTUN creates a TUN device (IP packets, no extra header).
func openTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netem: open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netem: %w", err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netem: TUNSETIFF %s: %w", name, err)
	}
	// Non-blocking, so Close unblocks a Read through the runtime poller.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netem: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}
