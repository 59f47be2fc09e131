package tracing

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Batching as the SDK's batch span processor does it, for spans that are
// built finished: up to maxBatch spans or flushInterval, whichever comes
// first, exported by one goroutine; a full queue drops and counts.
const (
	maxBatch      = 512
	spanQueue     = 8192
	flushInterval = 2 * time.Second
	exportTimeout = 30 * time.Second
)

type spanBatcher struct {
	exp     sdktrace.SpanExporter
	ch      chan sdktrace.ReadOnlySpan
	dropped atomic.Int64
	mu      sync.RWMutex // add against shutdown
	closed  bool
	done    chan struct{}
}

func newSpanBatcher(exp sdktrace.SpanExporter) *spanBatcher {
	b := &spanBatcher{exp: exp, ch: make(chan sdktrace.ReadOnlySpan, spanQueue), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *spanBatcher) add(s sdktrace.ReadOnlySpan) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		b.dropped.Add(1)
		return
	}
	select {
	case b.ch <- s:
	default:
		b.dropped.Add(1)
	}
}

func (b *spanBatcher) run() {
	defer close(b.done)
	tick := time.NewTicker(flushInterval)
	defer tick.Stop()
	batch := make([]sdktrace.ReadOnlySpan, 0, maxBatch)
	export := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), exportTimeout)
		// A failed export is reported by the exporter through
		// OpenTelemetry's error handler (the gateway's log).
		_ = b.exp.ExportSpans(ctx, batch)
		cancel()
		clear(batch)
		batch = batch[:0]
	}
	for {
		select {
		case s, ok := <-b.ch:
			if !ok {
				export()
				return
			}
			batch = append(batch, s)
			if len(batch) == maxBatch {
				export()
			}
		case <-tick.C:
			export()
		}
	}
}

// shutdown exports what is queued and stops the exporter; safe to call
// twice.
func (b *spanBatcher) shutdown(ctx context.Context) error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.ch)
	}
	b.mu.Unlock()
	select {
	case <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.exp.Shutdown(ctx)
}
