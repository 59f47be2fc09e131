package tracing

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/internal/bgqueue"
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
	q       *bgqueue.Queue[sdktrace.ReadOnlySpan]
	batch   []sdktrace.ReadOnlySpan // the queue goroutine's
	dropped atomic.Int64
}

func newSpanBatcher(exp sdktrace.SpanExporter) *spanBatcher {
	b := &spanBatcher{exp: exp, batch: make([]sdktrace.ReadOnlySpan, 0, maxBatch)}
	b.q = bgqueue.Start(bgqueue.Config[sdktrace.ReadOnlySpan]{Size: spanQueue, Handle: b.add1, Flush: b.export, Tick: flushInterval, Linger: 2 * time.Millisecond})
	return b
}

// add queues s for export; a full queue drops it and counts.
func (b *spanBatcher) add(s sdktrace.ReadOnlySpan) {
	if !b.q.Offer(s) {
		b.dropped.Add(1)
	}
}

// add1 batches s, exporting a full batch.
func (b *spanBatcher) add1(s sdktrace.ReadOnlySpan) {
	b.batch = append(b.batch, s)
	if len(b.batch) == maxBatch {
		b.export()
	}
}

func (b *spanBatcher) export() {
	if len(b.batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), exportTimeout)
	// A failed export is reported by the exporter through
	// OpenTelemetry's error handler (infergate serve routes it to its log).
	_ = b.exp.ExportSpans(ctx, b.batch)
	cancel()
	clear(b.batch)
	b.batch = b.batch[:0]
}

// shutdown exports what is queued and stops the exporter; safe to call
// twice.
func (b *spanBatcher) shutdown(ctx context.Context) error {
	b.q.Stop()
	select {
	case <-b.q.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.exp.Shutdown(ctx)
}
