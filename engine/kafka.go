package engine

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// pingKafka checks that a broker answers within k.ConnectTimeout.
func pingKafka(ctx context.Context, k KafkaConfig) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ClientID(k.ClientID))
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, k.ConnectTimeout)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka brokers %v unreachable after %s: %w", k.Brokers, k.ConnectTimeout, err)
	}
	return nil
}

func (p *Pipeline) newClient() (*kgo.Client, error) {
	k := p.cfg.Kafka
	start := kgo.NewOffset().AtStart()
	if k.StartOffset == "latest" {
		start = kgo.NewOffset().AtEnd()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(k.Brokers...),
		kgo.ClientID(k.ClientID),
		kgo.ConsumerGroup(k.Group),
		kgo.ConsumeTopics(p.activeTopics()...),
		kgo.ConsumeResetOffset(start),
		kgo.DisableAutoCommit(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(p.onRevoked),
		kgo.OnPartitionsLost(p.onLost),
		kgo.FetchMaxBytes(k.FetchMaxBytes),
		kgo.FetchMaxPartitionBytes(min(k.FetchMaxBytes, 8<<20)),
		// Resumed partitions are fetched at the next fetch, after the one
		// in flight: keep the wait for an empty fetch short so that a
		// resume takes effect quickly even beside idle topics.
		kgo.FetchMaxWait(k.FetchMaxWait),
		kgo.SessionTimeout(k.SessionTimeout),
	}
	if k.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(k.InstanceID))
	}
	if p.eo != nil {
		opts = append(opts, kgo.OnPartitionsAssigned(p.onAssigned))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return cl, nil
}

// onRevoked finishes the revoked partitions' in-flight work within
// RevokeTimeout and commits what was inserted before giving them up.
func (p *Pipeline) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	var tps []topicPartition
	for topic, parts := range revoked {
		for _, part := range parts {
			tps = append(tps, topicPartition{topic, part})
		}
	}
	if p.drained.Load() {
		// Leaving the group after Run's drain and final commit: nothing
		// in flight can land any more.
		p.forget(tps)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Kafka.RevokeTimeout)
	defer cancel()
	p.stopWorkers(ctx, tps)
	for _, tp := range tps {
		p.mu.Lock()
		a := p.acks[tp]
		p.mu.Unlock()
		if a != nil && !a.waitIdle(ctx) {
			p.log.Warn("revoked partition still had rows in flight; they may be consumed again", "partition", tp)
		}
	}
	if err := p.commitSync(ctx, tps); err != nil {
		p.log.Warn("commit on revoke failed", "err", err)
	}
	p.forget(tps)
	p.log.Info("partitions revoked", "partitions", fmt.Sprint(tps))
}

// onLost drops lost partitions without committing: another member owns
// them now.
func (p *Pipeline) onLost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	var tps []topicPartition
	for topic, parts := range lost {
		for _, part := range parts {
			tps = append(tps, topicPartition{topic, part})
		}
	}
	// Another member owns them now: stop at once rather than finish.
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	p.stopWorkers(ctx, tps)
	p.forget(tps)
	p.log.Warn("partitions lost", "partitions", fmt.Sprint(tps))
}

func (p *Pipeline) forget(tps []topicPartition) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, tp := range tps {
		if a := p.acks[tp]; a != nil {
			a.abandon()
		}
		delete(p.acks, tp)
	}
}
