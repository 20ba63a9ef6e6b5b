// Package quotes runs the quotes example (README.md): quotes on a Kafka
// topic, through the quotes module, into a raw and an end-of-day table on a
// two-shard ClickHouse 26.9 cluster whose link to shard 2 has a latency.
//
// StartCluster starts the broker, the shards and the link; Cluster.Run runs
// sluice once with a routing, checks every row that landed and reads the
// lag histograms from sluice's /metrics; Report prints and draws the runs
// side by side. A Cluster runs one pipeline at a time; Run returns only
// after every goroutine it started has ended.
package quotes
