package engine

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitLoop commits acknowledged offsets every CommitInterval.
func (p *Pipeline) commitLoop(ctx context.Context) {
	every(ctx, p.cfg.Kafka.CommitInterval, func() {
		if err := p.commitSync(ctx, nil); err != nil && ctx.Err() == nil {
			p.log.Warn("offset commit failed; will retry", "err", err)
		}
	})
}

// commitSync commits the watermark of every partition of tps (all tracked
// partitions when tps is nil) that has one, moved since the last commit or
// not: committing an offset again is harmless, and a commit after a
// rebalance or a broker restart must not rely on what an earlier one did.
func (p *Pipeline) commitSync(ctx context.Context, tps []topicPartition) error {
	if p.eo != nil {
		return p.commitExactlyOnce(ctx, tps)
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	p.mu.Lock()
	for tp, a := range p.acks {
		if tps != nil && !containsTP(tps, tp) {
			continue
		}
		if eo, ok := a.watermark(); ok {
			if offsets[tp.topic] == nil {
				offsets[tp.topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[tp.topic][tp.partition] = eo
		}
	}
	p.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	var commitErr error
	p.client.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			commitErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, pr := range t.Partitions {
				if e := kerr.ErrorForCode(pr.ErrorCode); e != nil && commitErr == nil {
					commitErr = fmt.Errorf("commit %s/%d: %w", t.Topic, pr.Partition, e)
				}
			}
		}
	})
	return commitErr
}

func containsTP(tps []topicPartition, tp topicPartition) bool {
	for _, x := range tps {
		if x == tp {
			return true
		}
	}
	return false
}
