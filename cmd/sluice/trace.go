package main

import (
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/sluicehq/sluice/internal/telemetry"
)

const traceUsage = `sluice trace names the spans that followed one Kafka record to ClickHouse:
its batch's consume ('process {topic}') and transform spans, and the seal and
INSERT spans that carried the batch's rows, with the rows of the batch each
carried. It reads OTLP/JSON trace data, as the OpenTelemetry Collector's file
exporter writes it (one export request per line).

Usage:
  sluice trace -spans traces.json -topic logs -partition 1 -offset 41520

Exit status 1 when no exported consume span holds the record (its batch was
not sampled, or its spans are not in the file).
`

func cmdTrace(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, traceUsage); fs.PrintDefaults() }
	spansPath := fs.String("spans", "", "OTLP/JSON trace file (- for standard input)")
	topic := fs.String("topic", "", "the record's topic")
	partition := fs.Int("partition", -1, "the record's partition")
	offset := fs.Int64("offset", -1, "the record's offset")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *spansPath == "" || *topic == "" || *partition < 0 || *offset < 0 {
		fmt.Fprintln(stderr, "sluice trace: -spans, -topic, -partition and -offset are required")
		return 2
	}
	in := os.Stdin
	if *spansPath != "-" {
		f, err := os.Open(*spansPath)
		if err != nil {
			fmt.Fprintln(stderr, "sluice trace:", err)
			return 1
		}
		defer f.Close()
		in = f
	}
	spans, err := telemetry.ReadSpans(in)
	if err != nil {
		fmt.Fprintf(stderr, "sluice trace: %s: %v\n", *spansPath, err)
		return 1
	}
	found := telemetry.FindRecord(spans, *topic, int32(*partition), *offset)
	if len(found) == 0 {
		fmt.Fprintf(stderr, "sluice trace: no consume span of %s/%d holds offset %d among %d spans (its batch was not sampled, or its spans are elsewhere)\n",
			*topic, *partition, *offset, len(spans))
		return 1
	}
	for i, rt := range found {
		if i > 0 {
			fmt.Fprintln(stdout, "consumed again:")
		}
		printRecordTrace(stdout, rt)
	}
	return 0
}

func printRecordTrace(w io.Writer, rt telemetry.RecordTrace) {
	c := rt.Consume
	a := func(s *tracepb.Span, k string) string { return telemetry.Attr(s, k) }
	fmt.Fprintf(w, "%s  trace %s span %s  %s  offsets %s-%s (%s records)\n", c.Name, hex.EncodeToString(c.TraceId), hex.EncodeToString(c.SpanId),
		spanTime(c), a(c, "sluice.kafka.offset.first"), a(c, "sluice.kafka.offset.last"), a(c, "messaging.batch.message_count"))
	for _, s := range rt.Transforms {
		fmt.Fprintf(w, "  transform  span %s  module %s  records in %s, rows out %s, errored %s\n", hex.EncodeToString(s.SpanId),
			a(s, "sluice.module.name"), a(s, "sluice.records.in"), a(s, "sluice.rows.out"), a(s, "sluice.records.errored"))
	}
	for _, cs := range rt.Seals {
		s := cs.Span
		fmt.Fprintf(w, "  seal  trace %s span %s  %s  %s.%s  %s rows, %s of this batch\n", hex.EncodeToString(s.TraceId), hex.EncodeToString(s.SpanId),
			spanTime(s), a(s, "db.namespace"), a(s, "db.collection.name"), a(s, "sluice.rows"), carriedRows(cs))
	}
	if len(rt.Inserts) == 0 {
		fmt.Fprintln(w, "  no INSERT span carried this batch's rows")
	}
	for _, cs := range rt.Inserts {
		s := cs.Span
		status := "ok"
		if s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			status = "failed: " + s.Status.GetMessage()
		}
		fmt.Fprintf(w, "  INSERT INTO %s.%s  trace %s span %s  %s  server %s:%s shard %s attempt %s  %s rows, %s of this batch  %s\n",
			a(s, "db.namespace"), a(s, "db.collection.name"), hex.EncodeToString(s.TraceId), hex.EncodeToString(s.SpanId), spanTime(s),
			a(s, "server.address"), a(s, "server.port"), a(s, "sluice.clickhouse.shard"), a(s, "sluice.insert.attempt"),
			a(s, "sluice.rows"), carriedRows(cs), status)
	}
}

func carriedRows(cs telemetry.CarrierSpan) string {
	if cs.Exact {
		return fmt.Sprint(cs.Rows)
	}
	return fmt.Sprintf("(in the chunk) %d", cs.Rows)
}

// spanTime is a span's start (UTC) and duration.
func spanTime(s *tracepb.Span) string {
	start := time.Unix(0, int64(s.StartTimeUnixNano)).UTC()
	return fmt.Sprintf("%s +%s", start.Format(time.RFC3339Nano), time.Duration(s.EndTimeUnixNano-s.StartTimeUnixNano))
}
