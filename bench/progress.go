package bench

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// startProgress shows a live bar for one stage on w (nil: none): done of
// total (requests, or seconds of a timed stage), in flight, the TTFT
// median so far and the failures. The returned func stops and clears it.
func startProgress(w io.Writer, col *Collector, rn *Runner, l *LoadSpec, stage, stages int, begin time.Time) (stop func()) {
	if w == nil {
		return func() {}
	}
	total, byTime := int64(l.Requests), false
	if l.Requests == 0 && l.Duration > 0 {
		total, byTime = int64((l.Duration+l.WarmupTime)/time.Second), true
	}
	if l.Mode == "replay" {
		total = int64(rn.Workload.Len())
	}
	desc := fmt.Sprintf("stage %d/%d", stage+1, stages)
	if rn.prime {
		desc += " warm pass"
	}
	bar := progressbar.NewOptions64(max(total, 1),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(24),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetPredictTime(false),
	)
	done0, failed0, _ := col.Live()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			done, failed, ttft := col.Live()
			done, failed = done-done0, failed-failed0
			if byTime {
				_ = bar.Set64(min(int64(time.Since(begin)/time.Second), total))
			} else {
				_ = bar.Set64(min(done, total))
			}
			bar.Describe(fmt.Sprintf("%s  done %d  in flight %d  TTFT p50 %.1f ms  failed %d", desc, done, rn.InFlight(), float64(ttft)/1e6, failed))
		}
	}()
	return func() {
		close(quit)
		wg.Wait()
		_ = bar.Finish()
	}
}
