package httpbody

import (
	"bufio"
	"bytes"
	"io"
	"net/http/httputil"
	"strings"
	"testing"
	"testing/iotest"
)

func decodeAll(raw []byte, bufSize int) ([]byte, *Reader, error) {
	var b Reader
	b.Reset(bufio.NewReaderSize(iotest.HalfReader(bytes.NewReader(raw)), bufSize), Chunked, -1)
	out, err := io.ReadAll(&b)
	return out, &b, err
}

func TestChunkedBody(t *testing.T) {
	tests := []struct {
		name, raw, want string
		ok              bool
	}{
		{"two chunks", "3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n", "abcde", true},
		{"trailers", "1\r\nx\r\n0\r\nX-T: 1\r\n\r\n", "x", true},
		{"bare LF", "1\nx\n0\n\n", "x", true},
		{"uppercase hex", "A\r\n0123456789\r\n0\r\n\r\n", "0123456789", true},
		{"truncated data", "5\r\nab", "ab", false},
		{"no last chunk", "1\r\nx\r\n", "x", false},
		{"bad size", "zz\r\nx\r\n", "", false},
		{"data past size", "1\r\nxy\r\n0\r\n\r\n", "x", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, b, err := decodeAll([]byte(tc.raw), 16)
			if string(out) != tc.want || (err == nil) != tc.ok || b.Complete() != tc.ok {
				t.Errorf("decoded %q err %v complete %v, want %q ok=%v", out, err, b.Complete(), tc.want, tc.ok)
			}
		})
	}
}

func TestAvailableNeverLies(t *testing.T) {
	// Whenever Available says yes, a Read must not block: with the stream
	// cut at every offset, a Read after a yes must return data or the end
	// without reaching the (empty) rest.
	raw := "4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n"
	for cut := 0; cut <= len(raw); cut++ {
		var b Reader
		br := bufio.NewReaderSize(io.MultiReader(strings.NewReader(raw[:cut]), blocker{t}), 64)
		br.Peek(cut) // buffer the first cut bytes
		b.Reset(br, Chunked, -1)
		var got []byte
		for b.Available() {
			p := make([]byte, 8)
			n, err := b.Read(p)
			got = append(got, p[:n]...)
			if err != nil {
				break
			}
		}
		if !strings.HasPrefix("abcdefg", string(got)) {
			t.Fatalf("cut %d: read %q", cut, got)
		}
	}
}

// blocker fails the test if read: reading it means a Read blocked.
type blocker struct{ t *testing.T }

func (b blocker) Read([]byte) (int, error) {
	b.t.Helper()
	b.t.Fatal("Read reached past the buffered bytes after Available said yes")
	return 0, io.EOF
}

// FuzzChunkedBody compares the decoder with net/http's.
func FuzzChunkedBody(f *testing.F) {
	f.Add([]byte("3\r\nabc\r\n0\r\n\r\n"), uint8(16))
	f.Add([]byte("1;x\r\na\r\n0\r\nT: v\r\n\r\n"), uint8(20))
	f.Fuzz(func(t *testing.T, raw []byte, size uint8) {
		out, b, err := decodeAll(raw, int(size)+16)
		ref, refErr := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(raw)))
		if err == nil && refErr == nil && !bytes.Equal(out, ref) {
			t.Fatalf("decoded %q, net/http %q", out, ref)
		}
		if err == nil && !b.Complete() {
			t.Fatal("clean end but not complete")
		}
		if err == nil && refErr != nil && !bytes.HasPrefix(ref, out) && !bytes.HasPrefix(out, ref) {
			t.Fatalf("accepted %q as %q; net/http refused after %q: %v", raw, out, ref, refErr)
		}
	})
}

// TestPeek reads a short fixed-length body without consuming it, and
// refuses every other body.
func TestPeek(t *testing.T) {
	for _, tc := range []struct {
		name   string
		raw    string
		mode   int
		length int64
		limit  int
		want   string // "" means not ok
	}{
		{name: "fixed", raw: `{"a":1}rest`, mode: Fixed, length: 7, limit: 64, want: `{"a":1}`},
		{name: "over the limit", raw: `{"a":1}`, mode: Fixed, length: 7, limit: 6},
		{name: "chunked", raw: "7\r\n{\"a\":1}\r\n0\r\n\r\n", mode: Chunked, limit: 64},
		{name: "until close", raw: `{"a":1}`, mode: Close, limit: 64},
		{name: "empty", raw: ``, mode: Fixed, length: 0, limit: 64},
		// The backend said 7 bytes and sent 3 before closing: no peek.
		{name: "short", raw: `{"a`, mode: Fixed, length: 7, limit: 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Reader
			r.Reset(bufio.NewReaderSize(strings.NewReader(tc.raw), 16), tc.mode, tc.length)
			p, ok := r.Peek(tc.limit)
			if ok != (tc.want != "") || string(p) != tc.want {
				t.Fatalf("Peek(%d) of %q = %q, %v; want %q", tc.limit, tc.raw, p, ok, tc.want)
			}
			if ok {
				all, err := io.ReadAll(&r)
				if err != nil || string(all) != tc.want || !r.Complete() {
					t.Fatalf("after Peek, read %q, %v (complete %v); want %q", all, err, r.Complete(), tc.want)
				}
			}
		})
	}
}
