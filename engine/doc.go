// Package engine assembles a sluice pipeline: it consumes Kafka partitions
// as a consumer group, runs each partition's records through its module
// instance, hands rows to the ClickHouse sink and commits offsets only once
// every record at or below them is inserted.
//
// Concurrency: Run owns every goroutine it starts (poll loop, one worker per
// assigned partition, commit loop, sink workers) and returns after all exit.
package engine
