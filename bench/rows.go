package bench

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
)

// csvHeader names the columns of the per-request CSV.
var csvHeader = []string{"stage", "index", "warmup", "sent", "send_lag_ms", "status", "error_class", "ttfb_ms", "first_event_ms", "ttft_ms", "server_ttft_ms",
	"tpot_ms", "e2e_ms", "stream_end_ms", "output_tokens", "usage_tokens", "counted_tokens", "prompt_tokens", "input_tokens", "max_tokens",
	"content_events", "finish_reason", "invalid_json", "empty", "refusal", "schema_invalid", "error"}

// rowWriter streams one line per finished request to CSV and/or JSON
// Lines (the latter with every content event's time), so per-request
// data costs no memory however long the run. Not safe for concurrent
// use: the collector calls it under its lock.
type rowWriter struct {
	csv    *csv.Writer
	events *bufio.Writer
	err    error
	rec    []string
}

// newRowWriter writes CSV to csvW and event lines to eventsW; either may
// be nil.
func newRowWriter(csvW, eventsW io.Writer) *rowWriter {
	rw := &rowWriter{}
	if csvW != nil {
		rw.csv = csv.NewWriter(csvW)
		rw.err = rw.csv.Write(csvHeader)
	}
	if eventsW != nil {
		rw.events = bufio.NewWriterSize(eventsW, 64<<10)
	}
	return rw
}

func ms(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64)
}

// Write writes r.
func (rw *rowWriter) Write(r *Result) {
	if rw.err != nil {
		return
	}
	if rw.csv != nil {
		tpot := ""
		if t := r.TPOT(); t > 0 {
			tpot = ms(t)
		}
		rw.rec = append(rw.rec[:0], strconv.Itoa(r.Stage), strconv.Itoa(r.Index), strconv.FormatBool(r.Warmup), r.Sent.UTC().Format(time.RFC3339Nano),
			strconv.FormatFloat(float64(r.SendLag())/1e6, 'f', 3, 64), strconv.Itoa(r.Status), r.ErrClass, ms(r.TTFB), ms(r.FirstEvent), ms(r.TTFT), ms(r.ServerTTFT),
			tpot, ms(r.E2E()), ms(r.End), strconv.Itoa(r.OutputTokens), strconv.Itoa(r.UsageTokens), strconv.Itoa(r.CountedTokens),
			strconv.Itoa(r.PromptTokens), strconv.Itoa(r.InputTokens), strconv.Itoa(r.MaxTokens), strconv.Itoa(r.ContentEvents), r.Finish,
			strconv.FormatBool(r.InvalidJSON), strconv.FormatBool(r.Empty), strconv.FormatBool(r.Refusal), strconv.FormatBool(r.SchemaInvalid), r.Err)
		rw.err = rw.csv.Write(rw.rec)
	}
	if rw.events != nil {
		evs := make([]float64, len(r.Events))
		for i, e := range r.Events {
			evs[i] = float64(e) / 1e6
		}
		line, err := json.Marshal(struct {
			Stage    int       `json:"stage"`
			Index    int       `json:"index"`
			Warmup   bool      `json:"warmup,omitempty"`
			Intended time.Time `json:"intended"`
			Sent     time.Time `json:"sent"`
			TTFB     float64   `json:"ttfb_ms"`
			First    float64   `json:"first_event_ms"`
			End      float64   `json:"end_ms"`
			Error    string    `json:"error_class,omitempty"`
			Events   []float64 `json:"events_ms"`
		}{r.Stage, r.Index, r.Warmup, r.Intended.UTC(), r.Sent.UTC(), float64(r.TTFB) / 1e6, float64(r.FirstEvent) / 1e6, float64(r.End) / 1e6, r.ErrClass, evs})
		if err == nil {
			_, err = rw.events.Write(append(line, '\n'))
		}
		rw.err = err
	}
}

// Flush writes out what is buffered and reports the first error.
func (rw *rowWriter) Flush() error {
	if rw.csv != nil {
		rw.csv.Flush()
		if err := rw.csv.Error(); err != nil && rw.err == nil {
			rw.err = err
		}
	}
	if rw.events != nil {
		if err := rw.events.Flush(); err != nil && rw.err == nil {
			rw.err = err
		}
	}
	if rw.err != nil {
		return fmt.Errorf("bench: per-request rows: %w", rw.err)
	}
	return nil
}
