// Package httpbody decodes an HTTP/1.1 response body (fixed length,
// chunked, or delimited by the connection's close) from a connection's
// buffered reader, for the gateway's relay and the load generator's client.
package httpbody

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/valyala/fasthttp"
)

// ErrBadChunk is a chunked body that breaks RFC 9112's framing.
var ErrBadChunk = errors.New("httpbody: malformed chunked encoding from backend")

// Body framings (RFC 9112 section 6.3).
const (
	None    = iota // no body (HEAD, 204, 304)
	Fixed          // Content-Length bytes
	Chunked        // Transfer-Encoding: chunked
	Close          // until the backend closes the connection
)

// chunk decoder states
const (
	stHeader  = iota // at a chunk-size line
	stData           // inside chunk data
	stCRLF           // after chunk data
	stTrailer        // after the last chunk, reading trailer lines
	stDone
)

// Reader reads a backend response body from the connection's buffered
// reader. Unlike fasthttp's stream it can tell, without blocking, whether
// more body bytes are already buffered (Available), so the relay writes out
// everything that has arrived in one flush and flushes before it waits.
// The chunked decoding is RFC 9112 section 7.1. Not safe for concurrent use.
type Reader struct {
	br    *bufio.Reader
	mode  int
	left  int64 // fixed: bytes to go; chunked: bytes left in this chunk
	state int
	err   error
}

// Reset makes b read a body of the given mode from br; length is the
// Content-Length for Fixed.
func (b *Reader) Reset(br *bufio.Reader, mode int, length int64) {
	*b = Reader{br: br, mode: mode, left: length}
	if mode == None || (mode == Fixed && length == 0) {
		b.state = stDone
	}
}

// Complete reports whether the body was read to its end, so the connection
// can carry another request.
func (b *Reader) Complete() bool {
	return (b.state == stDone || b.mode == Fixed && b.left == 0) && b.err == nil && b.mode != Close
}

// Read implements io.Reader.
// Ready reports that the next Read returns without waiting on the
// connection: the body is at its end, or its next bytes are buffered and
// need no framing line read first.
func (b *Reader) Ready() bool {
	switch {
	case b.err != nil || b.state == stDone || b.mode == None:
		return true
	case b.mode == Fixed && b.left == 0:
		return true
	case b.mode == Fixed || b.mode == Close || b.mode == Chunked && b.state == stData:
		return b.br.Buffered() > 0
	}
	return false
}

func (b *Reader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

func (b *Reader) read(p []byte) (int, error) {
	switch b.mode {
	case None:
		return 0, io.EOF
	case Close:
		n, err := b.br.Read(p)
		if err == io.EOF {
			b.state = stDone
		}
		return n, err
	case Fixed:
		if b.left == 0 {
			b.state = stDone
			return 0, io.EOF
		}
		n, err := b.br.Read(p[:min(int64(len(p)), b.left)])
		b.left -= int64(n)
		if err == io.EOF {
			return n, io.ErrUnexpectedEOF
		}
		return n, err
	}
	for {
		switch b.state {
		case stDone:
			return 0, io.EOF
		case stHeader:
			line, err := b.br.ReadSlice('\n')
			if err != nil {
				return 0, eofIsUnexpected(err)
			}
			size, ok := parseChunkSize(line)
			if !ok {
				return 0, fmt.Errorf("%w: size line %q", ErrBadChunk, line)
			}
			if size == 0 {
				b.state = stTrailer
				continue
			}
			b.left, b.state = size, stData
		case stData:
			n, err := b.br.Read(p[:min(int64(len(p)), b.left)])
			b.left -= int64(n)
			if b.left == 0 {
				b.state = stCRLF
			}
			if err != nil {
				return n, eofIsUnexpected(err)
			}
			return n, nil
		case stCRLF:
			line, err := b.br.ReadSlice('\n')
			if err != nil {
				return 0, eofIsUnexpected(err)
			}
			if len(bytes.TrimRight(line, "\r\n")) != 0 {
				return 0, fmt.Errorf("%w: data runs past its size", ErrBadChunk)
			}
			b.state = stHeader
		case stTrailer:
			line, err := b.br.ReadSlice('\n')
			if err != nil {
				return 0, eofIsUnexpected(err)
			}
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				b.state = stDone
			}
		}
	}
}

func eofIsUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseChunkSize reads a chunk-size line: hex digits, optional extensions
// after ';', CRLF (a bare LF is accepted).
func parseChunkSize(line []byte) (int64, bool) {
	line = bytes.TrimRight(line, "\r\n")
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

// Available reports whether Read would return body bytes, or the body's
// end, using only what is already buffered: it never blocks.
func (b *Reader) Available() bool {
	if b.err != nil || b.state == stDone {
		return true
	}
	buffered := b.br.Buffered()
	switch b.mode {
	case Fixed, Close:
		return buffered > 0
	case None:
		return true
	}
	if b.state == stData {
		return buffered > 0
	}
	buf, _ := b.br.Peek(buffered)
	state := b.state
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			return false
		}
		line := buf[:i+1]
		buf = buf[i+1:]
		switch state {
		case stCRLF:
			state = stHeader
		case stHeader:
			size, ok := parseChunkSize(line)
			if !ok {
				return true // Read reports the error at once
			}
			if size > 0 {
				return len(buf) > 0
			}
			state = stTrailer
		case stTrailer:
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				return true
			}
		}
	}
}

// Mode says how the response to req is framed.
func Mode(req *fasthttp.Request, resp *fasthttp.Response) int {
	status := resp.StatusCode()
	if req.Header.IsHead() || status < 200 || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified {
		return None
	}
	switch n := resp.Header.ContentLength(); {
	case n == -1:
		return Chunked
	case n < 0:
		return Close
	}
	return Fixed
}

// Peek returns the rest of a fixed-length body of at most limit bytes
// (limit no more than the buffered reader's size) without consuming it,
// waiting for it to arrive; ok is false for any other body (chunked,
// until the close, longer, or an error so far), which Peek leaves alone.
// The bytes are valid until the next read. The gateway reads a short
// error body with it to decide whether to retry elsewhere, and can still
// relay the body when it does not.
func (b *Reader) Peek(limit int) (p []byte, ok bool) {
	if b.mode != Fixed || b.err != nil || b.left <= 0 || b.left > int64(limit) || int(b.left) > b.br.Size() {
		return nil, false
	}
	p, err := b.br.Peek(int(b.left))
	if err != nil {
		return nil, false
	}
	return p, true
}
