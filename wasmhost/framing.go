package wasmhost

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Record is one Kafka record handed to a module.
type Record struct {
	Offset    int64
	Timestamp int64 // milliseconds since the Unix epoch
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Batch is the records of one partition handed to a module in one call.
type Batch struct {
	Topic     string
	Partition int32
	Records   []Record
}

func (b *Batch) encodedSize() int {
	n := 4 + len(b.Topic) + 4 + 4
	for i := range b.Records {
		r := &b.Records[i]
		n += 8 + 8 + 4 + len(r.Key) + 4 + len(r.Value) + 4
		for _, h := range r.Headers {
			n += 8 + len(h.Key) + len(h.Value)
		}
	}
	return n
}

// encode writes the batch framing of guest-sdk/ABI.md into buf, which is
// exactly encodedSize bytes.
func (b *Batch) encode(buf []byte) {
	le := binary.LittleEndian
	p := 0
	putBytes := func(s []byte) {
		le.PutUint32(buf[p:], uint32(len(s)))
		p += 4
		p += copy(buf[p:], s)
	}
	le.PutUint32(buf[p:], uint32(len(b.Topic)))
	p += 4
	p += copy(buf[p:], b.Topic)
	le.PutUint32(buf[p:], uint32(b.Partition))
	le.PutUint32(buf[p+4:], uint32(len(b.Records)))
	p += 8
	for i := range b.Records {
		r := &b.Records[i]
		le.PutUint64(buf[p:], uint64(r.Offset))
		le.PutUint64(buf[p+8:], uint64(r.Timestamp))
		p += 16
		putBytes(r.Key)
		putBytes(r.Value)
		le.PutUint32(buf[p:], uint32(len(r.Headers)))
		p += 4
		for _, h := range r.Headers {
			le.PutUint32(buf[p:], uint32(len(h.Key)))
			p += 4
			p += copy(buf[p:], h.Key)
			putBytes(h.Value)
		}
	}
}

// size is what Limits.MaxRecordBytes measures: the record's key, value and
// header keys and values.
func (r *Record) size() int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Output is a module's validated output for one batch: one result per input
// record, in order. It reads guest memory: it is valid until the next call
// on the instance that made it.
type Output struct {
	raw []byte
	pos int

	total int       // results in all
	next  int       // index of the next result
	skip  []skipped // records not handed to the module, by index
	limit int       // Limits.MaxRecordBytes, for their message
}

// skipped is a record over Limits.MaxRecordBytes.
type skipped struct{ index, size int }

// RecordResult is one input record's outcome: an error message, or rows.
type RecordResult struct {
	// Err is the module's message for a record it could not normalize (at
	// most MaxErrorMessage bytes of it), or the host's for a record over
	// Limits.MaxRecordBytes; empty when the record succeeded.
	Err   string
	rows  []byte
	nrows int
}

// Rows is the number of rows the record produced (0: filtered out).
func (r *RecordResult) Rows() int { return r.nrows }

// NextRow returns the record's next row: the target table's index in the
// init payload and the RowBinary bytes.
func (r *RecordResult) NextRow() (table int, row []byte, ok bool) {
	if len(r.rows) == 0 {
		return 0, nil, false
	}
	le := binary.LittleEndian
	table = int(le.Uint16(r.rows))
	n := int(le.Uint32(r.rows[2:]))
	row = r.rows[6 : 6+n]
	r.rows = r.rows[6+n:]
	return table, row, true
}

// Len is the number of results, the number of records of the batch.
func (o *Output) Len() int { return o.total }

// Next returns the next record's result, in input order.
func (o *Output) Next() (RecordResult, bool) {
	if o.next >= o.total {
		return RecordResult{}, false
	}
	i := o.next
	o.next++
	if len(o.skip) > 0 && o.skip[0].index == i {
		s := o.skip[0]
		o.skip = o.skip[1:]
		return RecordResult{Err: fmt.Sprintf("record of %d bytes is over the module's limit of %d bytes (key, value and headers); it was not passed to the module", s.size, o.limit)}, true
	}
	le := binary.LittleEndian
	status := o.raw[o.pos]
	o.pos++
	if status == 1 {
		n := int(le.Uint32(o.raw[o.pos:]))
		msg := capMessage(o.raw[o.pos+4 : o.pos+4+n])
		o.pos += 4 + n
		if msg == "" {
			msg = "module reported an error without a message"
		}
		return RecordResult{Err: msg}, true
	}
	nrows := int(le.Uint32(o.raw[o.pos:]))
	o.pos += 4
	start := o.pos
	for i := 0; i < nrows; i++ {
		o.pos += 6 + int(le.Uint32(o.raw[o.pos+2:]))
	}
	return RecordResult{rows: o.raw[start:o.pos], nrows: nrows}, true
}

var errTruncated = errors.New("output ends early")

// limitError is an output that breaks one of the output limits.
type limitError struct {
	limit Limit
	err   error
}

func (e *limitError) Error() string { return e.err.Error() }
func (e *limitError) Unwrap() error { return e.err }

// parseOutput checks the whole output's framing and the output limits once,
// so that iterating it later cannot go out of bounds, and points out at it.
func parseOutput(out *Output, raw []byte, records int, lim Limits) error {
	le := binary.LittleEndian
	if len(raw) > lim.MaxOutputBytes {
		return &limitError{LimitOutputBytes, fmt.Errorf("%w: %d bytes of output for %d records; the limit is %d",
			ErrOutputLimit, len(raw), records, lim.MaxOutputBytes)}
	}
	malformed := func(err error) error { return fmt.Errorf("%w: %w", ErrMalformedOutput, err) }
	if len(raw) < 4 {
		return malformed(errTruncated)
	}
	if n := int(le.Uint32(raw)); n != records {
		return malformed(fmt.Errorf("output has %d records for %d input records", n, records))
	}
	p := 4
	for i := 0; i < records; i++ {
		if p >= len(raw) {
			return malformed(fmt.Errorf("record %d: %w", i, errTruncated))
		}
		status := raw[p]
		p++
		switch status {
		case 0:
			if len(raw)-p < 4 {
				return malformed(fmt.Errorf("record %d: %w", i, errTruncated))
			}
			nrows := uint64(le.Uint32(raw[p:]))
			p += 4
			if nrows > uint64(lim.MaxRowsPerRecord) {
				return &limitError{LimitOutputRows, fmt.Errorf("%w: record %d produced %d rows; the limit is %d per record",
					ErrOutputLimit, i, nrows, lim.MaxRowsPerRecord)}
			}
			for j := 0; j < int(nrows); j++ {
				if len(raw)-p < 6 {
					return malformed(fmt.Errorf("record %d row %d: %w", i, j, errTruncated))
				}
				n := uint64(le.Uint32(raw[p+2:]))
				p += 6
				if n > uint64(len(raw)-p) {
					return malformed(fmt.Errorf("record %d row %d: length %d past the end", i, j, n))
				}
				p += int(n)
			}
		case 1:
			if len(raw)-p < 4 {
				return malformed(fmt.Errorf("record %d: %w", i, errTruncated))
			}
			n := uint64(le.Uint32(raw[p:]))
			p += 4
			if n > uint64(len(raw)-p) {
				return malformed(fmt.Errorf("record %d: message length %d past the end", i, n))
			}
			p += int(n)
		default:
			return malformed(fmt.Errorf("record %d: status %d is neither 0 nor 1", i, status))
		}
	}
	if p != len(raw) {
		return malformed(fmt.Errorf("%d bytes after the last record", len(raw)-p))
	}
	out.raw, out.pos = raw, 4
	return nil
}
