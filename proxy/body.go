package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

var errBadChunk = errors.New("proxy: malformed chunked encoding from backend")

// body modes
const (
	bodyNone    = iota // no body (HEAD, 204, 304)
	bodyFixed          // Content-Length bytes
	bodyChunked        // Transfer-Encoding: chunked
	bodyClose          // until the backend closes the connection
)

// chunk decoder states
const (
	stHeader  = iota // at a chunk-size line
	stData           // inside chunk data
	stCRLF           // after chunk data
	stTrailer        // after the last chunk, reading trailer lines
	stDone
)

// bodyReader reads a backend response body from the connection's buffered
// reader. Unlike fasthttp's stream it can tell, without blocking, whether
// more body bytes are already buffered (Available), so the relay writes out
// everything that has arrived in one flush and flushes before it waits.
// The chunked decoding is RFC 9112 section 7.1. Not safe for concurrent use.
type bodyReader struct {
	br    *bufio.Reader
	mode  int
	left  int64 // fixed: bytes to go; chunked: bytes left in this chunk
	state int
	err   error
}

func (b *bodyReader) reset(br *bufio.Reader, mode int, length int64) {
	*b = bodyReader{br: br, mode: mode, left: length}
	if mode == bodyNone || (mode == bodyFixed && length == 0) {
		b.state = stDone
	}
}

// complete reports whether the body was read to its end, so the connection
// can carry another request.
func (b *bodyReader) complete() bool {
	return b.state == stDone && b.err == nil && b.mode != bodyClose
}

// Read implements io.Reader.
func (b *bodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

func (b *bodyReader) read(p []byte) (int, error) {
	switch b.mode {
	case bodyNone:
		return 0, io.EOF
	case bodyClose:
		n, err := b.br.Read(p)
		if err == io.EOF {
			b.state = stDone
		}
		return n, err
	case bodyFixed:
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
				return 0, fmt.Errorf("%w: size line %q", errBadChunk, line)
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
				return 0, fmt.Errorf("%w: data runs past its size", errBadChunk)
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
func (b *bodyReader) Available() bool {
	if b.err != nil || b.state == stDone {
		return true
	}
	buffered := b.br.Buffered()
	switch b.mode {
	case bodyFixed, bodyClose:
		return buffered > 0
	case bodyNone:
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
