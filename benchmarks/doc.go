// Package benchmarks holds sluice's end-to-end benchmarks: real Kafka broker,
// real ClickHouse server, the real pipeline. Run them with
//
//	go test -run '^$' -bench . -benchtime 3x ./benchmarks/
//
// Each benchmark measures its baseline in the same run, since these
// machines are noisy.
package benchmarks
