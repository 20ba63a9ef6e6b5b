// Package sink benchmarks sluice's ClickHouse sink against a real server
// started by each benchmark:
//
//	go test -run '^$' -bench 'Ceiling|RowPerInsert|DistributedVsDirect' -benchtime 1x -count 3 ./benchmarks/sink/
//	go test -run '^$' -bench Sweep -benchtime 1x ./benchmarks/sink/
//
// Every benchmark measures its baseline in the same run (the raw ch-go
// ceiling, one-row inserts, synchronous Distributed inserts) because these
// machines are noisy; the sweep prints markdown tables of medians of three
// runs. docs/adr/0003-sink-defaults.md records the figures.
package sink
