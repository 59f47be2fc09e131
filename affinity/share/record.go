package share

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/infergate/infergate/affinity"
)

// Record is one placement a replica made: the pool, the backend the
// prompt went to, its prefix checkpoints and its session. Every field is
// a hash, so a record names no prompt, URL or session key, and its size
// is fixed (it travels through Offer's queue by value, allocating nothing).
type Record struct {
	// Pool names the pool: PoolID of its name and block size.
	Pool uint64
	// Backend names the backend by a hash of its URL, not its place in
	// the pool, so replicas whose files list the backends in another
	// order still agree.
	Backend uint64
	// Session is the hash of the request's session key; 0: none.
	Session uint64
	// N is how many of Hashes are set.
	N uint8
	// Hashes are the prompt's checkpoint hashes (affinity.Key.Hashes).
	Hashes [affinity.MaxCheckpoints]uint64
}

// Set fills in the checkpoints from hashes (at most MaxCheckpoints).
func (r *Record) Set(hashes []uint64) { r.N = uint8(copy(r.Hashes[:], hashes)) }

// Checkpoints returns the hashes set.
func (r *Record) Checkpoints() []uint64 { return r.Hashes[:min(int(r.N), len(r.Hashes))] }

// The batch on the wire, little-endian, fixed-width fields:
//
//	version  1 byte (Version)
//	replica  8 bytes: the sender's id, so it skips its own batches
//	count    2 bytes: the records that follow (1 to MaxBatchRecords)
//	records  each: pool 8, backend 8, session 8, n 1, then n hashes of 8
//
// A batch is read whole or refused whole: one bad record (a count past
// the bytes, n past MaxCheckpoints, bytes left over) refuses its batch.
const (
	// Version is the format's version byte. A replica refuses (and
	// counts as invalid) a batch of another version: in a rolling
	// upgrade that changes it, the two sets of replicas learn apart.
	Version = 1

	// MaxBatchRecords bounds the records of one batch.
	MaxBatchRecords = 512

	headerBytes    = 1 + 8 + 2
	recordBytes    = 8 + 8 + 8 + 1 // before its hashes
	maxRecordBytes = recordBytes + 8*affinity.MaxCheckpoints
	// MaxBatchBytes bounds a batch: longer input is refused unread.
	MaxBatchBytes = headerBytes + MaxBatchRecords*maxRecordBytes
)

// Errors of Parse. Each wraps ErrBatch.
var (
	ErrBatch   = errors.New("share: invalid batch")
	errVersion = fmt.Errorf("%w: unknown version", ErrBatch)
	errShort   = fmt.Errorf("%w: truncated", ErrBatch)
	errLong    = fmt.Errorf("%w: bytes after the last record", ErrBatch)
	errCount   = fmt.Errorf("%w: record count out of range", ErrBatch)
	errN       = fmt.Errorf("%w: too many checkpoints in a record", ErrBatch)
	errSize    = fmt.Errorf("%w: longer than MaxBatchBytes", ErrBatch)
)

// Append appends the batch of replica's recs (at most MaxBatchRecords;
// more are left out) to dst and returns it.
func Append(dst []byte, replica uint64, recs []Record) []byte {
	recs = recs[:min(len(recs), MaxBatchRecords)]
	dst = append(dst, Version)
	dst = binary.LittleEndian.AppendUint64(dst, replica)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(recs)))
	for i := range recs {
		r := &recs[i]
		dst = binary.LittleEndian.AppendUint64(dst, r.Pool)
		dst = binary.LittleEndian.AppendUint64(dst, r.Backend)
		dst = binary.LittleEndian.AppendUint64(dst, r.Session)
		hs := r.Checkpoints()
		dst = append(dst, uint8(len(hs)))
		for _, h := range hs {
			dst = binary.LittleEndian.AppendUint64(dst, h)
		}
	}
	return dst
}

// Parse reads a batch: its sender, and its records appended to recs[:0]
// (at most MaxBatchRecords, so a reused slice of that capacity never
// grows). It reads network input: whatever b holds, it returns an error
// wrapping ErrBatch or a whole batch, in time linear in len(b), and
// never panics.
func Parse(b []byte, recs []Record) (replica uint64, out []Record, err error) {
	out = recs[:0]
	if len(b) > MaxBatchBytes {
		return 0, out, errSize
	}
	if len(b) < headerBytes {
		return 0, out, errShort
	}
	if b[0] != Version {
		return 0, out, errVersion
	}
	replica = binary.LittleEndian.Uint64(b[1:])
	n := int(binary.LittleEndian.Uint16(b[9:]))
	if n == 0 || n > MaxBatchRecords {
		return 0, out, errCount
	}
	b = b[headerBytes:]
	for range n {
		if len(b) < recordBytes {
			return 0, recs[:0], errShort
		}
		var r Record
		r.Pool = binary.LittleEndian.Uint64(b)
		r.Backend = binary.LittleEndian.Uint64(b[8:])
		r.Session = binary.LittleEndian.Uint64(b[16:])
		r.N = b[24]
		b = b[recordBytes:]
		if int(r.N) > affinity.MaxCheckpoints {
			return 0, recs[:0], errN
		}
		if len(b) < 8*int(r.N) {
			return 0, recs[:0], errShort
		}
		for j := range int(r.N) {
			r.Hashes[j] = binary.LittleEndian.Uint64(b[8*j:])
		}
		b = b[8*int(r.N):]
		out = append(out, r)
	}
	if len(b) != 0 {
		return 0, recs[:0], errLong
	}
	return replica, out, nil
}
