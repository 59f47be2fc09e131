package proxy

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cppHttplibServer builds testdata/cpphttplib/server.cc against the
// system's cpp-httplib (Debian: libcpp-httplib-dev) and runs it on a free
// loopback port until the test ends. Without g++ or the library the test
// skips, unless INFERGATE_REQUIRE_CPPHTTPLIB is set (CI sets it).
func cppHttplibServer(t *testing.T) string {
	t.Helper()
	gxx, err := exec.LookPath("g++")
	if err == nil {
		_, err = os.Stat("/usr/include/httplib.h")
	}
	if err != nil {
		if os.Getenv("INFERGATE_REQUIRE_CPPHTTPLIB") != "" {
			t.Fatalf("no g++ or cpp-httplib, and INFERGATE_REQUIRE_CPPHTTPLIB is set: %v", err)
		}
		t.Skipf("no g++ or cpp-httplib: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "server")
	if out, err := exec.Command(gxx, "-O1", "-o", bin, "testdata/cpphttplib/server.cc", "-lcpp-httplib", "-lpthread").CombinedOutput(); err != nil {
		t.Fatalf("build the cpp-httplib server: %v\n%s", err, out)
	}
	// The server binds a port the system picks and prints it.
	cmd := exec.Command(bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	port := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		port <- strings.TrimSpace(line)
	}()
	var addr string
	select {
	case p := <-port:
		if _, err := strconv.Atoi(p); err != nil {
			t.Fatalf("the cpp-httplib server printed %q, want its port", p)
		}
		addr = net.JoinHostPort("127.0.0.1", p)
	case <-time.After(5 * time.Second):
		t.Fatal("the cpp-httplib server printed no port in 5 s")
	}
	return "http://" + addr
}

// A backend on cpp-httplib, the HTTP library under llama.cpp's server,
// answers through the gateway: plain and streamed. It routes the request
// line's target as it stands, so a request sent in absolute-form
// ("POST http://host/v1/...") gets 404 from it.
func TestCppHttplibBackend(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, testConfig(cppHttplibServer(t)))
	for i := range 3 { // on one keep-alive backend connection too
		code, _, body := post(t, gw.URL, "/v1/chat/completions", plainBody)
		if code != 200 || !strings.Contains(body, `"hello"`) {
			t.Fatalf("plain %d: %d %s", i, code, body)
		}
		code, _, body = post(t, gw.URL, "/v1/chat/completions", streamBody)
		if ev := events(body); code != 200 || len(ev) != 3 || ev[2] != "[DONE]" {
			t.Fatalf("stream %d: %d %s", i, code, body)
		}
	}
}
