package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
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
	// HeaderTruncated is on a copy that had to be cut to fit the topic's
	// message size: its value is the original record's size in bytes (key,
	// value and headers). The copy keeps a prefix of the value (or none),
	// no key and only the traceparent header; the source headers name the
	// original, which stays in its topic until retention.
	HeaderTruncated = "sluice.truncated"
)

// truncatedPrefix is how much of the value a cut copy keeps at first.
const truncatedPrefix = 16 << 10

// deadLetter produces failed records to the dead-letter topic.
type deadLetter struct {
	topic  string
	client *kgo.Client
	// resends are the goroutines producing a cut copy after a copy was
	// too large; spawned counts them ever started (see flush).
	resends sync.WaitGroup
	spawned atomic.Int64
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
// produce result. franz-go retries retriable produce errors itself. A copy
// too large for the topic (MESSAGE_TOO_LARGE, from the client's or the
// broker's limit) is sent again cut to a prefix of its value, then with no
// value at all: a record is always dead-lettered, whatever its size.
func (d *deadLetter) send(ctx context.Context, r *kgo.Record, module, sha string, cause string, done func(error)) {
	d.produce(ctx, d.copyOf(r, module, sha, cause, -1), r, module, sha, cause, truncatedPrefix, done)
}

// produce sends out; if it is too large, it sends a copy of r cut to keep
// bytes of the value (none when keep is 0).
func (d *deadLetter) produce(ctx context.Context, out, r *kgo.Record, module, sha, cause string, keep int, done func(error)) {
	d.client.Produce(ctx, out, func(_ *kgo.Record, err error) {
		if err == nil || !errors.Is(err, kerr.MessageTooLarge) && !errors.Is(err, kerr.RecordListTooLarge) || keep < 0 {
			done(err)
			return
		}
		next := -1 // the last try
		if keep > 0 {
			next = 0
		}
		// Producing from inside a promise may block on the client's
		// buffer: do it on a goroutine that flush waits for.
		d.resends.Add(1)
		d.spawned.Add(1)
		go func() {
			defer d.resends.Done()
			d.produce(ctx, d.copyOf(r, module, sha, cause, keep), r, module, sha, cause, next, done)
		}()
	})
}

// copyOf is the dead-letter copy of r: whole when keep is negative, else
// cut to keep bytes of the value, with no key and, of r's own headers, only
// its traceparent.
func (d *deadLetter) copyOf(r *kgo.Record, module, sha, cause string, keep int) *kgo.Record {
	if keep < 0 {
		return &kgo.Record{Topic: d.topic, Key: r.Key, Value: r.Value, Headers: deadLetterHeaders(r, module, sha, cause), Timestamp: r.Timestamp}
	}
	cut := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp}
	size := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		size += len(h.Key) + len(h.Value)
		if h.Key == "traceparent" && len(h.Value) < 256 {
			cut.Headers = append(cut.Headers, h)
		}
	}
	headers := deadLetterHeaders(cut, module, sha, cause)
	headers = append(headers, kgo.RecordHeader{Key: HeaderTruncated, Value: strconv.AppendInt(nil, int64(size), 10)})
	return &kgo.Record{Topic: d.topic, Value: r.Value[:min(keep, len(r.Value))], Headers: headers, Timestamp: r.Timestamp}
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
	headers := make([]kgo.RecordHeader, 0, len(r.Headers)+8)
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

// flush waits until every copy sent so far, cut copies included, is
// produced or failed, or ctx ends.
func (d *deadLetter) flush(ctx context.Context) error {
	for {
		n := d.spawned.Load()
		if err := d.client.Flush(ctx); err != nil {
			return err
		}
		d.resends.Wait()
		if d.spawned.Load() == n {
			return nil
		}
	}
}

func (d *deadLetter) close() {
	if d != nil {
		d.client.Close()
	}
}
