package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// encoder appends batch b, with send_ts_us send, to dst.
type encoder func(dst []byte, b uint64, send int64) []byte

func (e *env) producer(topic string, linger time.Duration) (*kgo.Client, error) {
	return e.kafka.NewClient(
		kgo.DefaultProduceTopic(topic),
		// Messages are spread by batch_id % partitions, not by key.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(linger),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.MaxBufferedBytes(256<<20),
	)
}

// prefill produces batches [0, n) of the corpus to topic as fast as the
// broker takes them, with the drain-mode send_ts_us.
func (e *env) prefill(ctx context.Context, topic string, n uint64, enc encoder, send func(uint64) int64) (float64, int64, error) {
	cl, err := e.producer(topic, 5*time.Millisecond)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	start := time.Now()
	var failed atomic.Value
	var bytes int64
	for b := uint64(0); b < n; b++ {
		v := enc(make([]byte, 0, 6<<10), b, send(b))
		bytes += int64(len(v))
		cl.Produce(ctx, &kgo.Record{Value: v, Partition: int32(b % uint64(e.partitions))}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, 0, err
	}
	if err, _ := failed.Load().(error); err != nil {
		return 0, 0, fmt.Errorf("produce: %w", err)
	}
	return time.Since(start).Seconds(), bytes, nil
}

// openLoop produces batches [0, n) on a fixed schedule, batch b at
// t0 + b/batchesPerSec, whether or not the broker or the pipeline keep up
// (open loop), stamping each with its intended send time, never the
// actual one, so that falling behind shows as latency instead of hiding it
// (coordinated omission). It returns how late the latest send was.
func (e *env) openLoop(ctx context.Context, topic string, n uint64, t0 time.Time, batchesPerSec float64, enc encoder) (time.Duration, error) {
	cl, err := e.producer(topic, 0)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var failed atomic.Value
	var maxLate time.Duration
	for b := uint64(0); b < n; b++ {
		due := intendedTime(t0, b, batchesPerSec)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		} else if -d > maxLate {
			maxLate = -d
		}
		v := enc(make([]byte, 0, 6<<10), b, due.UnixMicro())
		cl.Produce(ctx, &kgo.Record{Value: v, Partition: int32(b % uint64(e.partitions))}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return maxLate, err
	}
	if err, _ := failed.Load().(error); err != nil {
		return maxLate, fmt.Errorf("produce: %w", err)
	}
	return maxLate, nil
}

// intendedTime is when the open-loop schedule sends batch b.
func intendedTime(t0 time.Time, b uint64, batchesPerSec float64) time.Time {
	return t0.Add(time.Duration(float64(b) / batchesPerSec * float64(time.Second)))
}
