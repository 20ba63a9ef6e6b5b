// Package sluice is the Go SDK for sluice normalization modules: WebAssembly
// modules that the sluice host runs on every batch of Kafka records to turn
// them into ClickHouse rows. It implements the guest side of the guest ABI,
// version 1 (guest-sdk/ABI.md): the exports, the binary framing and the
// RowBinary encoding, so that a module is just a Handler.
//
// # Writing a module
//
// A module is a package main that registers its Handler from an init
// function. It is built as a WASI reactor, whose main is never run:
//
//	package main
//
//	import sluice "github.com/sluicehq/sluice/guest-sdk/go"
//
//	type module struct{ logs *sluice.Table }
//
//	func init() { sluice.Run(&module{}) }
//
//	func main() {}
//
//	func (m *module) Init(cfg *sluice.Config) (err error) {
//		if m.logs, err = cfg.Table("logs"); err != nil {
//			return err // refuses the config; the host reports the message
//		}
//		return m.logs.Expect(sluice.Col("ts", "DateTime"), sluice.Col("msg", "String"))
//	}
//
//	func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
//		return out.Row(m.logs).DateTime(uint32(rec.Timestamp / 1000)).Bytes(rec.Value).End()
//	}
//
// Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o module.wasm .
//
// The module exports _initialize, memory, sluice_abi_version, sluice_alloc,
// sluice_init and sluice_transform, and imports sluice.log and the
// wasi_snapshot_preview1 functions the Go runtime needs.
//
// # Init
//
// Init receives the module parameters (Config.Param) and the schema of every
// target table (Config.Table). A table's Columns are the ones a row must
// carry, in order. Table.Expect checks the whole list, names and types, in
// one call and returns an error that lists every difference; returning any
// error from Init refuses the config. The Config stays valid for the life of
// the instance.
//
// # Transform and the row writer
//
// Transform is called once per record, in order. It writes zero or more rows
// with Output.Row, one value per column in column order, then Row.End:
//
//	out.Row(t).DateTime(sec).String(service).UInt64(n).ArrayString(tags).End()
//
// There is a write method per ClickHouse type the ABI carries: UInt8…UInt64,
// Int8…Int64, Float32, Float64, String and Bytes (String, and
// LowCardinality(String)), FixedString, Date, DateTime, Bool, UUID, Enum8 and
// Enum16 (by number; Column.Enum8Value and EnumValue map names), IPv4, IPv6. Nullable(T)
// takes Null(), or a T, optionally after NotNull(). Array(T) takes
// BeginArray(n) followed by n values of T, or ArrayString, ArrayInt64,
// ArrayUInt64 for whole slices. Map(K, V) takes BeginMap(n) followed by n
// key, value pairs; Tuple(…) takes BeginTuple() followed by its elements.
// Date32 and DateTime64(P[, tz]) take Date32(days) and DateTime64(ticks);
// Time(t) writes a time.Time into any of Date, Date32, DateTime(…) and
// DateTime64(…), checking the type's range, so that a zero time.Time or a
// timestamp in the wrong unit fails the record instead of landing as some
// other date; it rounds down to the type's precision, before 1970 too, as
// ClickHouse reads the time's text. Decimal(P, S) and Decimal32…256 take Decimal(unscaled) or
// DecimalBig; Int128…UInt256 take BigInt, Int128(lo, hi), UInt128(lo, hi);
// a value out of the type's range fails the record. A JSON column takes
// the value's text with String.
//
// ParseDecimal (and ParseDecimalBig) and ParseUUID read a decimal's or a
// UUID's text as ClickHouse reads it, exactly and without allocating, into
// what Decimal and UUID take; they refuse what ClickHouse refuses.
//
// Every write checks, with an integer compare, that its type is the one the
// next column or array element expects; End checks that the row is complete.
// The first mismatch is recorded on the Output with the table, the column,
// and the expected type, later writes for the record do nothing, and the
// record is dead-lettered with that message even if Transform ignores the
// error and returns nil. A malformed row never reaches the host.
//
// # The fast writer: FlatRow
//
// Output.Flat starts a row like Output.Row does and returns a FlatRow,
// which writes the common types (the integers and floats, Bool, String,
// Date, Date32, DateTime, DateTime64, UUID, IPv4, IPv6, each also inside
// LowCardinality or Nullable, and Array of String, Int64 or UInt64) with
// the same checks and the same bytes as Row, at a fraction of Row's cost
// in wasm: its fixed-width writes inline into the caller as a compare
// and a store into room reserved when the row starts, where Row's are
// calls, and every call is dear in Go compiled to wasm (a string or an
// array is one call; so is Flat, a short one after a row of the same
// table, and End inlines). Use it for a hot
// module's rows; tables with other column types need Row. Two things
// differ: a Nullable column takes Null(), or NotNull() and then the value
// (the value alone is a mismatch), and a misplaced write panics where it
// is, with an error naming the value, its column and both types, which
// the SDK recovers: the record fails with that message. A record whose
// FlatRow fails is dead-lettered like one whose Row fails.
//
// A record that writes no row is filtered out. A Transform that returns an
// error dead-letters its record (and only it) with the error's message; rows
// it wrote are dropped. A panic in Transform is recovered by the SDK and
// dead-letters the record with the message "panic: …", so the rest of the
// batch goes on; a panic in Init refuses the config the same way. What the
// SDK cannot recover from (a runtime fatal error such as running out of
// memory or stack, a wasm trap, os.Exit or proc_exit) fails the whole
// instance: the host discards it, starts a fresh one and isolates the
// records that fail on their own.
//
// # Lifetimes and allocation
//
// The SDK allocates nothing per batch or per record once its buffers have
// grown to the batch size: the input buffer handed to the host, the Record,
// its Headers slice, the Output and its buffer are all reused.
//
//   - Record.Topic, Key, Value and Header keys and values alias the batch
//     payload (strings via unsafe.String): they are valid only until
//     Transform returns, and must not be modified. Copy what you keep
//     (strings.Clone, bytes.Clone). Key and Value have their capacity capped
//     at their length, so appending to them copies.
//   - *Record and *Output are reused for the next record: do not keep them.
//   - Values passed to the row writer are copied into the output at once.
//   - The output payload is owned by the SDK and valid until the host's next
//     call, as the ABI requires.
//
// # Logging
//
// Log and Logf send a line to the host (the sluice.log import), which tags it
// with the module name and rate-limits it. Natively they print to standard
// error. Writing to stdout or stderr from a module goes to WASI, which the
// host may discard.
//
// # Testing natively
//
// Everything but the wasm exports is plain Go. NewInstance drives a Handler
// with the very payloads the host sends, and package sluicetest builds them
// and decodes the output and its RowBinary rows, so a module's tests and
// benchmarks run with go test, without wasm (see the examples).
package sluice
