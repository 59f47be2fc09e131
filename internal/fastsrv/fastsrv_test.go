package fastsrv

import (
	"bytes"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
)

// TestLoggerRedactsRequestBytes: fasthttp's messages about a request it
// could not read quote that request; the log keeps the addresses and
// the shape, never the bytes (an Authorization header among them).
func TestLoggerRedactsRequestBytes(t *testing.T) {
	var out bytes.Buffer
	l := Logger{Log: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	l.Printf("error when serving connection %q<->%q: %v", "127.0.0.1:8080", "[::1]:5555",
		`error when reading request headers: invalid header value "Bearer sk-planted\x00": buffer size=99, contents: "POST / HTTP/1.1\r\nAuthorization: Bearer sk-planted"..."tail \"sk-planted\""`)
	got := out.String()
	if strings.Contains(got, "sk-planted") {
		t.Errorf("the log holds the key: %s", got)
	}
	for _, want := range []string{"127.0.0.1:8080", "[::1]:5555", "invalid header value", "bytes redacted"} {
		if !strings.Contains(got, want) {
			t.Errorf("the log lost %q: %s", want, got)
		}
	}
}

// FuzzRedactQuoted: whatever bytes fasthttp quotes (%q) in a message,
// none of them survive into the log line but an address.
func FuzzRedactQuoted(f *testing.F) {
	for _, s := range []string{"Bearer sk-x", "POST / HTTP/1.1\r\nAuthorization: Bearer k\x00", `a"b\"c`, "127.0.0.1:80", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		key := "K" + s + "Z"
		out := redactQuoted(fmt.Sprintf("error when reading request headers: invalid header value %q: buffer size=9, contents: %q...%q", key, key, key))
		if strings.Contains(out, key) || strings.Contains(out, strconv.Quote(key)) {
			t.Errorf("%q survived: %s", key, out)
		}
	})
}
