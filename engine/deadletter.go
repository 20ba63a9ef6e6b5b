package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Dead-letter headers. The record keeps its key, value and headers
// (including any traceparent); these say where it came from and why it
// failed.
const (
	HeaderError         = "sluice.error"
	HeaderModule        = "sluice.module"
	HeaderModuleVersion = "sluice.module.sha256"
	HeaderTopic         = "sluice.source.topic"
	HeaderPartition     = "sluice.source.partition"
	HeaderOffset        = "sluice.source.offset"
	HeaderTimestamp     = "sluice.source.timestamp"
)

// deadLetter produces failed records to the dead-letter topic.
type deadLetter struct {
	topic  string
	client *kgo.Client
}

func newDeadLetter(cfg Config) (*deadLetter, error) {
	if cfg.DeadLetter.Topic == "" {
		return nil, nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.Kafka.Brokers...),
		kgo.ClientID(cfg.Kafka.ClientID+"-dlq"),
		kgo.DefaultProduceTopic(cfg.DeadLetter.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.AllowAutoTopicCreation(),
	)
	if err != nil {
		return nil, fmt.Errorf("dead_letter: %w", err)
	}
	return &deadLetter{topic: cfg.DeadLetter.Topic, client: cl}, nil
}

// send produces r with the failure in its headers; done is called with the
// produce result. franz-go retries retriable produce errors itself.
func (d *deadLetter) send(ctx context.Context, r *kgo.Record, module, sha string, cause string, done func(error)) {
	out := &kgo.Record{Topic: d.topic, Key: r.Key, Value: r.Value, Headers: deadLetterHeaders(r, module, sha, cause), Timestamp: r.Timestamp}
	d.client.Produce(ctx, out, func(_ *kgo.Record, err error) { done(err) })
}

// HeaderTenantPrefix is put in front of a record's own header whose key
// starts with "sluice." (in any case) in its dead-letter copy, so that a
// tenant cannot pass off a header as sluice's: in the copy, every key
// starting with "sluice." is one of the headers above or starts with
// HeaderTenantPrefix.
const HeaderTenantPrefix = "sluice.tenant."

// deadLetterHeaders are the headers of r's dead-letter copy: sluice's
// first, then the record's own, those in sluice's namespace renamed.
func deadLetterHeaders(r *kgo.Record, module, sha, cause string) []kgo.RecordHeader {
	if len(cause) > 4096 {
		cause = cause[:4096]
	}
	headers := make([]kgo.RecordHeader, 0, len(r.Headers)+7)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderError, Value: []byte(cause)},
		kgo.RecordHeader{Key: HeaderModule, Value: []byte(module)},
		kgo.RecordHeader{Key: HeaderModuleVersion, Value: []byte(sha)},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		kgo.RecordHeader{Key: HeaderOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
		kgo.RecordHeader{Key: HeaderTimestamp, Value: strconv.AppendInt(nil, r.Timestamp.UnixMilli(), 10)},
	)
	for _, h := range r.Headers {
		if len(h.Key) >= len("sluice.") && strings.EqualFold(h.Key[:len("sluice.")], "sluice.") {
			h.Key = HeaderTenantPrefix + h.Key
		}
		headers = append(headers, h)
	}
	return headers
}

func (d *deadLetter) close() {
	if d != nil {
		d.client.Close()
	}
}
