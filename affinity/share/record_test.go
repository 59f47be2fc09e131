package share

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/infergate/infergate/affinity"
)

func rec(pool, backend, session uint64, hashes ...uint64) Record {
	r := Record{Pool: pool, Backend: backend, Session: session}
	r.Set(hashes)
	return r
}

// What Append writes, Parse reads back whole, sender included.
func TestBatchRoundTrip(t *testing.T) {
	t.Parallel()
	full := make([]uint64, affinity.MaxCheckpoints)
	for i := range full {
		full[i] = uint64(i+1) * 0x9e3779b97f4a7c15
	}
	in := []Record{rec(1, 2, 0, 10, 11, 12), rec(1, 3, 99), rec(^uint64(0), 0, 7, full...)}
	b := Append(nil, 42, in)
	replica, out, err := Parse(b, make([]Record, 0, MaxBatchRecords))
	if err != nil || replica != 42 || len(out) != len(in) {
		t.Fatalf("Parse = %d, %d records, %v", replica, len(out), err)
	}
	for i := range in {
		if out[i] != in[i] {
			t.Errorf("record %d: %+v, sent %+v", i, out[i], in[i])
		}
	}
	// The fixed layout: version, replica, count, then the first record.
	if b[0] != Version || binary.LittleEndian.Uint64(b[1:]) != 42 || binary.LittleEndian.Uint16(b[9:]) != 3 ||
		binary.LittleEndian.Uint64(b[11:]) != 1 || b[11+24] != 3 {
		t.Fatalf("layout: % x", b[:40])
	}
	// More than a batch holds: the rest is left out, not wrapped round.
	many := make([]Record, MaxBatchRecords+5)
	if _, out, err := Parse(Append(nil, 1, many), nil); err != nil || len(out) != MaxBatchRecords {
		t.Fatalf("an oversized batch: %d records, %v", len(out), err)
	}
}

// Malformed batches are refused whole, with an error wrapping ErrBatch.
func TestParseRefusesMalformedBatches(t *testing.T) {
	t.Parallel()
	good := Append(nil, 5, []Record{rec(1, 2, 0, 3, 4), rec(1, 2, 0, 5)})
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"header only, cut", good[:5]},
		{"another version", mutate(func(b []byte) []byte { b[0] = 2; return b })},
		{"no records", mutate(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[9:], 0); return b[:headerBytes] })},
		{"count past the bytes", mutate(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[9:], 3); return b })},
		{"count past the bound", mutate(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[9:], MaxBatchRecords+1); return b })},
		{"checkpoints past the bound", mutate(func(b []byte) []byte { b[headerBytes+24] = affinity.MaxCheckpoints + 1; return b })},
		{"checkpoints past the bytes", mutate(func(b []byte) []byte { return b[:len(b)-4] })},
		{"bytes after the last record", append(bytes.Clone(good), 0)},
		{"longer than a batch can be", make([]byte, MaxBatchBytes+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := make([]Record, 0, 4)
			_, out, err := Parse(tc.b, recs)
			if !errors.Is(err, ErrBatch) || len(out) != 0 {
				t.Fatalf("Parse(% x...) = %d records, %v; want ErrBatch and none", tc.b[:min(len(tc.b), 16)], len(out), err)
			}
		})
	}
}

// FuzzShareBatch: whatever arrives on the channel, Parse refuses it or
// returns records that encode back to the same bytes; it never panics
// and never returns more than MaxBatchRecords records.
func FuzzShareBatch(f *testing.F) {
	f.Add(Append(nil, 7, []Record{rec(1, 2, 3, 4, 5, 6)}))
	f.Add(Append(nil, 0, []Record{rec(0, 0, 0)}))
	f.Add([]byte{Version, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs := make([]Record, 0, MaxBatchRecords)
		replica, out, err := Parse(b, recs)
		if err != nil {
			if !errors.Is(err, ErrBatch) || len(out) != 0 {
				t.Fatalf("error %v with %d records", err, len(out))
			}
			return
		}
		if len(out) == 0 || len(out) > MaxBatchRecords || cap(out) != MaxBatchRecords {
			t.Fatalf("%d records (cap %d)", len(out), cap(out))
		}
		if again := Append(nil, replica, out); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded differs:\n% x\n% x", again, b)
		}
	})
}
