package proxy

// A finished request's span, metrics, live-view sample and request-log
// line are built off the request path, by one goroutine of the gateway's:
// on a stream the last chunk and the connection's next request do not
// wait for them, and the goroutine's grown stack is not grown again for
// every request. When its queue is full the request builds its own, so
// nothing is lost under load and nothing waits long.

// telemetryQueue bounds the requests waiting for the telemetry goroutine.
const telemetryQueue = 4096

// telemetryItem is a finished request, or a barrier (sync).
type telemetryItem struct {
	x       *exchange
	barrier chan struct{}
}

// startTelemetry starts the goroutine; stopTelemetry drains and stops it.
func (g *Gateway) startTelemetry() {
	g.telem = make(chan telemetryItem, telemetryQueue)
	g.telemDone = make(chan struct{})
	go func() {
		defer close(g.telemDone)
		for it := range g.telem {
			if it.barrier != nil {
				close(it.barrier)
				continue
			}
			it.x.emit()
		}
	}()
}

// stopTelemetry drains the queue and stops the goroutine; requests that
// finish later (past the drain's deadline) build their own.
func (g *Gateway) stopTelemetry() {
	g.telemMu.Lock()
	if !g.telemClosed {
		g.telemClosed = true
		close(g.telem)
	}
	g.telemMu.Unlock()
	<-g.telemDone
}

// submit hands x over; x is not touched by the request path afterwards.
func (g *Gateway) submit(x *exchange) {
	g.telemMu.RLock()
	if !g.telemClosed {
		select {
		case g.telem <- telemetryItem{x: x}:
			g.telemMu.RUnlock()
			return
		default:
		}
	}
	g.telemMu.RUnlock()
	x.emit()
}

// syncTelemetry returns once every request handed over before it has
// been recorded: a scrape then counts every request that ended before it.
func (g *Gateway) syncTelemetry() {
	b := make(chan struct{})
	g.telemMu.RLock()
	if g.telemClosed {
		g.telemMu.RUnlock()
		return
	}
	g.telem <- telemetryItem{barrier: b}
	g.telemMu.RUnlock()
	<-b
}

// emit builds the request's telemetry.
func (x *exchange) emit() {
	if x.logged {
		x.logEntry()
	}
	x.endSpan()
	x.record()
}
