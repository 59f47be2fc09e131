// Package jsonl is the one rotating JSON Lines file of infergate: the
// gateway's request log and the mirror's pairs file both write through
// it. Lines are buffered and flushed by the caller's tick; the file opens
// 0600 (both hold what clients sent); a write error (a full disk, the
// file removed) counts the lines not on disk as lost, closes the file and
// opens it afresh at the next line, at most once a second, so a log never
// stops for good; past MaxBytes the file rotates to PATH.1, PATH.2, ...
// keeping MaxFiles of them.
package jsonl

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// Config is one file.
type Config struct {
	// Path is the file.
	Path string
	// MaxBytes rotates the file before a line would take it past this
	// size. Zero: 100 MiB.
	MaxBytes int64
	// MaxFiles is how many rotated files are kept (PATH.1 is the newest);
	// 0 keeps none: a full file is started afresh.
	MaxFiles int
}

// File is what a Writer writes to: an *os.File in production.
type File interface {
	io.WriteCloser
	Stat() (os.FileInfo, error)
}

// Writer appends lines to a rotating file. It is used by one goroutine
// (the owner's writer); Lost and Written may be read from any.
type Writer struct {
	cfg  Config
	open func(name string) (File, error)

	f       File
	w       *bufio.Writer
	size    int64
	pending int64 // lines in w, not yet flushed
	lastTry time.Time
	err     error // the last write error, for Close

	lost, written atomic.Int64
}

// Open opens cfg.Path for appending (creating it 0600).
func Open(cfg Config) (*Writer, error) {
	return open(cfg, func(name string) (File, error) {
		return os.OpenFile(name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	})
}

func open(cfg Config, openFn func(string) (File, error)) (*Writer, error) {
	if cfg.Path == "" {
		return nil, errors.New("jsonl: no path")
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 100 << 20
	}
	w := &Writer{cfg: cfg, open: openFn}
	if err := w.reopen(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Writer) reopen() error {
	f, err := w.open(w.cfg.Path)
	if err != nil {
		return fmt.Errorf("jsonl: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("jsonl: %w", err)
	}
	if w.w == nil {
		w.w = bufio.NewWriterSize(f, 64<<10)
	} else {
		w.w.Reset(f)
	}
	w.f, w.size = f, st.Size()
	return nil
}

// Write appends line and a newline. A line it cannot write is counted
// lost, never waited for.
func (w *Writer) Write(line []byte) {
	if w.f == nil && !w.retry() {
		w.lost.Add(1)
		return
	}
	n := int64(len(line)) + 1
	if w.size+n > w.cfg.MaxBytes && w.size > 0 {
		if err := w.rotate(); err != nil {
			w.failed(err)
			w.lost.Add(1)
			return
		}
	}
	k, err := w.w.Write(line)
	if err == nil {
		err = w.w.WriteByte('\n')
		k++
	}
	w.size += int64(k)
	if err != nil {
		w.failed(err)
		w.lost.Add(1)
		return
	}
	w.pending++
}

// Flush writes the buffered lines to the file.
func (w *Writer) Flush() {
	if w.f == nil {
		return
	}
	if err := w.w.Flush(); err != nil {
		w.failed(err)
		return
	}
	w.written.Add(w.pending)
	w.pending = 0
}

// failed counts the lines not yet on disk lost, closes the file, and
// leaves the next line to open it afresh.
func (w *Writer) failed(err error) {
	w.lost.Add(w.pending)
	w.pending = 0
	w.err = err
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	w.w.Reset(io.Discard)
}

// retry opens the file again after a failure, at most once a second.
func (w *Writer) retry() bool {
	if now := time.Now(); now.Sub(w.lastTry) >= time.Second {
		w.lastTry = now
		return w.reopen() == nil
	}
	return false
}

// rotate shifts PATH.N-1 → PATH.N, ..., PATH → PATH.1 and starts afresh.
func (w *Writer) rotate() error {
	if err := w.w.Flush(); err != nil {
		return err
	}
	w.written.Add(w.pending)
	w.pending = 0
	w.f.Close()
	w.f = nil
	p := w.cfg.Path
	for i := w.cfg.MaxFiles; i >= 1; i-- {
		from := p
		if i > 1 {
			from += "." + strconv.Itoa(i-1)
		}
		_ = os.Rename(from, p+"."+strconv.Itoa(i))
	}
	if w.cfg.MaxFiles == 0 {
		_ = os.Remove(p)
	}
	w.lastTry = time.Now()
	return w.reopen()
}

// Lost counts lines that could not be written.
func (w *Writer) Lost() int64 { return w.lost.Load() }

// Written counts lines flushed to the file.
func (w *Writer) Written() int64 { return w.written.Load() }

// Close flushes and closes the file, returning the last write error. It
// is safe to call twice.
func (w *Writer) Close() error {
	w.Flush()
	if w.f != nil {
		if err := w.f.Close(); err != nil && w.err == nil {
			w.err = err
		}
		w.f = nil
	}
	return w.err
}
