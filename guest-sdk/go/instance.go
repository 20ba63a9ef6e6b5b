package sluice

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Handler is a normalization module.
type Handler interface {
	// Init is called once per instance, before any record, with the module
	// parameters and the schema of the target tables. Look the tables up and
	// check them here (Config.Table, Table.Expect); an error refuses the
	// config and its message is reported to the operator.
	Init(cfg *Config) error

	// Transform turns one record into zero or more rows written to out. An
	// error dead-letters this record (and only it) with the error's message,
	// and drops any rows it wrote. rec and out are valid only during the call.
	Transform(rec *Record, out *Output) error
}

// Record is one Kafka record.
//
// Lifetime: Topic, Key, Value and the headers alias the batch payload, which
// the host overwrites for the next batch. They are valid only until Transform
// returns; copy (strings.Clone, bytes.Clone) anything you keep. The Record
// itself and its Headers slice are reused for the next record.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp int64 // milliseconds since the Unix epoch
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Header is a Kafka record header. It aliases the batch payload like the
// Record that holds it.
type Header struct {
	Key   string
	Value []byte
}

// Header returns the value of the first header called key.
func (r *Record) Header(key string) ([]byte, bool) {
	for i := range r.Headers {
		if r.Headers[i].Key == key {
			return r.Headers[i].Value, true
		}
	}
	return nil, false
}

// Instance is the state behind the wasm exports: a Handler, its Config, and
// the buffers reused from batch to batch. The exports drive the Instance that
// Run registers; tests drive their own, natively, with the same payloads the
// host sends (package sluicetest builds and decodes them).
type Instance struct {
	h   Handler
	cfg *Config
	rec Record
	out Output
}

// NewInstance returns an Instance that runs h.
func NewInstance(h Handler) *Instance {
	in := &Instance{h: h}
	in.out.row.o = &in.out
	in.out.flat.o = &in.out
	in.out.flat.stop()
	return in
}

// Init decodes an init payload and calls the handler's Init. It returns ""
// when the module accepts the config, otherwise why it refuses it.
func (in *Instance) Init(payload []byte) (refusal string) {
	in.cfg = nil
	if in.h == nil {
		return "sluice: no handler registered: call sluice.Run from an init function"
	}
	cfg, err := decodeInit(payload)
	if err == nil {
		err = in.callInit(cfg)
	}
	if err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "sluice: the module refused its config (empty error message)"
		}
		return msg
	}
	in.cfg = cfg
	in.out.cfg = cfg
	return ""
}

func (in *Instance) callInit(cfg *Config) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return in.h.Init(cfg)
}

// recovered is the error of a panic of Transform: a misplaced FlatRow
// write's message (after an earlier error of the record, which comes
// first, as End would have it), or "panic: " and the value.
func (in *Instance) recovered(p any) error {
	if m, ok := p.(misplaced); ok {
		if in.out.err != nil {
			return in.out.err
		}
		return m.err()
	}
	return fmt.Errorf("panic: %v", p)
}

var errNotInitialized = errors.New("sluice: sluice_transform called before a successful sluice_init")

// Transform decodes a batch payload, runs the handler on each record and
// returns the output payload. The result aliases a buffer the Instance
// reuses: it is valid until the next call.
//
// A payload whose header does not decode yields an output of zero records,
// which the host rejects as not matching the batch (an instance failure). A
// record that does not decode, and every record after it, is answered with
// an error entry naming the problem.
func (in *Instance) Transform(payload []byte) []byte {
	o := &in.out
	o.buf = o.buf[:0]
	r := reader{p: payload}
	rec := &in.rec
	rec.Topic = r.str("topic")
	rec.Partition = int32(r.u32("partition"))
	n := r.count(28, "nrecords") // a record takes at least 28 bytes
	if r.err != nil {
		Log(LevelError, "sluice: malformed batch payload: "+r.err.Error())
		o.buf = binary.LittleEndian.AppendUint32(o.buf, 0)
		return o.buf
	}
	o.buf = binary.LittleEndian.AppendUint32(o.buf, uint32(n))
	var bad error
	for i := 0; i < n; {
		i = in.runRecords(&r, i, n, &bad)
	}
	if bad == nil && r.off != len(payload) {
		Log(LevelWarn, fmt.Sprintf("sluice: batch payload has %d trailing bytes", len(payload)-r.off))
	}
	return o.buf
}

// runRecords decodes and runs records i to n-1 and returns n, or, when the
// handler panics on a record, writes that record's error and returns the
// index of the next one. The recover is per batch rather than per record:
// a defer costs little natively but much on wasm.
func (in *Instance) runRecords(r *reader, i, n int, bad *error) (next int) {
	o := &in.out
	defer func() {
		if p := recover(); p != nil {
			o.flat.stop()
			o.buf = o.buf[:o.started]
			in.writeError(in.recovered(p))
			next = i + 1
		}
	}()
	for ; i < n; i++ {
		o.started = len(o.buf)
		if *bad == nil {
			in.decodeRecord(r)
			if r.err != nil {
				*bad = fmt.Errorf("sluice: malformed batch payload: record %d: %w", i, r.err)
			}
		}
		if *bad != nil {
			in.writeError(*bad)
			continue
		}
		in.runRecord()
	}
	return n
}

func (in *Instance) decodeRecord(r *reader) {
	if !in.decodeRecordFast(r) {
		in.decodeRecordSlow(r)
	}
}

// decodeRecordFast decodes a record without headers, with plain bounds
// checks (the reader's methods do not all inline, and calls are dear on
// wasm), and reports whether it could.
func (in *Instance) decodeRecordFast(r *reader) bool {
	rec := &in.rec
	if p, off := r.p, r.off; off <= len(p)-20 {
		if kn := int(le32(p[off+16:])); kn <= len(p)-off-24 {
			vo := off + 20 + kn
			if vn := int(le32(p[vo:])); vn <= len(p)-vo-8 {
				if ho := vo + 4 + vn; le32(p[ho:]) == 0 {
					rec.Offset = int64(le64(p[off:]))
					rec.Timestamp = int64(le64(p[off+8:]))
					rec.Key = p[off+20 : off+20+kn : off+20+kn]
					rec.Value = p[vo+4 : ho : ho]
					rec.Headers = rec.Headers[:0]
					r.off = ho + 4
					return true
				}
			}
		}
	}
	return false
}

func (in *Instance) decodeRecordSlow(r *reader) {
	rec := &in.rec
	rec.Offset = int64(r.u64("offset"))
	rec.Timestamp = int64(r.u64("timestamp"))
	rec.Key = r.bytes("key")
	rec.Value = r.bytes("value")
	nh := r.count(8, "nheaders")
	rec.Headers = rec.Headers[:0]
	for j := 0; j < nh && r.err == nil; j++ {
		k := r.str("header key")
		v := r.bytes("header value")
		rec.Headers = append(rec.Headers, Header{Key: k, Value: v})
	}
}

// runRecord runs the handler on in.rec and writes its entry.
func (in *Instance) runRecord() {
	o := &in.out
	if in.cfg == nil {
		in.writeError(errNotInitialized)
		return
	}
	o.buf = append(o.buf, 0, 0, 0, 0, 0) // status ok, nrows patched below
	o.nrows, o.err = 0, nil
	o.row.open, o.row.cur, o.row.t = false, nil, nil
	f := &o.flat
	f.stop() // it keeps its table: the next Flat of it checks it again
	f.failK = 0
	err := in.h.Transform(&in.rec, o) // a panic is recovered by runRecords
	f.sync()
	if err == nil {
		err = o.err
	}
	switch {
	case err != nil:
	case f.failK != 0: // a FlatRow's mismatch, in a row not ended or after End
		err = f.mismatch()
	case o.row.open:
		err = fmt.Errorf("sluice: table %q: Transform returned without calling End on its row", o.row.t.Name)
	case f.isOpen():
		err = fmt.Errorf("sluice: table %q: Transform returned without calling End on its row", f.t.Name)
	}
	f.stop()
	if err != nil {
		o.buf = o.buf[:o.started]
		in.writeError(err)
		return
	}
	binary.LittleEndian.PutUint32(o.buf[o.started+1:], o.nrows)
}

func (in *Instance) writeError(err error) {
	msg := err.Error()
	if msg == "" {
		msg = "sluice: Transform returned an error with an empty message"
	}
	o := &in.out
	o.buf = append(o.buf, 1)
	o.buf = binary.LittleEndian.AppendUint32(o.buf, uint32(len(msg)))
	o.buf = append(o.buf, msg...)
}
