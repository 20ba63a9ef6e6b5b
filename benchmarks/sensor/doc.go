// Package sensor is the sensor-batch workload (/work/shared/workloads/
// sensor-batch, copied in benchmarks/README.md): its corpus, a pure function
// of batch_id, in the two encodings the benchmark uses (Avro in Confluent
// framing, and the JSON shape ClickHouse 18.16's Kafka engine reads), the
// reference transform, and the producer-side expectations the correctness
// gates compare with what landed in ClickHouse.
//
// Everything here is deterministic and safe for concurrent use; the
// end-to-end rig that drives a broker, a server and the sluice binary is
// benchmarks/sensor/cmd/rig.
package sensor
