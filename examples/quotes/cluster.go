package quotes

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
)

var (
	//go:embed schema.sql
	localSchema string
	//go:embed distributed.sql
	distributedSchema string
	//go:embed pipeline.yaml
	pipelineTemplate string
)

// clusterName is the cluster distributed.sql's tables name.
const clusterName = "quotes_cluster"

// Cluster is the example's machinery, all on loopback: a Kafka broker and
// two ClickHouse 26.9 servers, one per shard, whose cluster reaches shard 2
// through Link, a proxy that delays every byte by the latency. Link stands
// for the network between the shards: the Distributed tables on shard 1
// send shard 2's rows over it, and sluice, which reaches both shards
// directly, crosses it only when it inserts through them.
type Cluster struct {
	Kafka          *testinfra.Kafka
	Shard1, Shard2 *testinfra.ClickHouse
	Link           *testinfra.Proxy
	Latency        time.Duration // Link's one-way delay
}

// StartCluster starts the broker, the shards and the link, and creates the
// tables. Close stops them; on error, what had started is stopped.
func StartCluster(ctx context.Context, latency time.Duration) (c *Cluster, err error) {
	c = &Cluster{Latency: latency}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	// The broker starts while the shards do: it takes the longest.
	kafka := make(chan error, 1)
	var k *testinfra.Kafka
	go func() {
		var err error
		k, err = testinfra.StartKafka(ctx, testinfra.KafkaOptions{})
		kafka <- err
	}()
	waitKafka := sync.OnceValue(func() error {
		err := <-kafka
		c.Kafka = k
		return err
	})
	defer waitKafka() // before Close, on error
	if c.Shard2, err = testinfra.StartClickHouse(ctx, testinfra.ClickHouseOptions{Server: testinfra.Modern}); err != nil {
		return c, fmt.Errorf("start shard 2: %w", err)
	}
	if c.Link, err = testinfra.StartProxy(c.Shard2.Addr); err != nil {
		return c, fmt.Errorf("start the link to shard 2: %w", err)
	}
	c.Link.SetLatency(latency)
	// Shard 1 names itself in the cluster, so its ports are fixed first:
	// it then writes its own part of a Distributed insert locally.
	ports, err := testinfra.FreePorts(2)
	if err != nil {
		return c, err
	}
	replica := func(addr string) string {
		host, port, _ := strings.Cut(addr, ":")
		return fmt.Sprintf("<shard><replica><host>%s</host><port>%s</port></replica></shard>", host, port)
	}
	remote := fmt.Sprintf("<%[1]s>%[2]s%[3]s</%[1]s>", clusterName, replica(fmt.Sprintf("127.0.0.1:%d", ports[0])), replica(c.Link.Addr))
	if c.Shard1, err = testinfra.StartClickHouse(ctx, testinfra.ClickHouseOptions{
		Server: testinfra.Modern, TCPPort: ports[0], HTTPPort: ports[1], RemoteServers: remote,
	}); err != nil {
		return c, fmt.Errorf("start shard 1: %w", err)
	}
	for _, s := range []*testinfra.ClickHouse{c.Shard1, c.Shard2} {
		if err := execAll(ctx, s, localSchema); err != nil {
			return c, err
		}
	}
	if err := execAll(ctx, c.Shard1, distributedSchema); err != nil {
		return c, err
	}
	if err := waitKafka(); err != nil {
		return c, fmt.Errorf("start Kafka: %w", err)
	}
	return c, nil
}

// Close stops everything the cluster started.
func (c *Cluster) Close() error {
	var errs []error
	if c.Shard1 != nil {
		errs = append(errs, c.Shard1.Close())
	}
	if c.Link != nil {
		errs = append(errs, c.Link.Close())
	}
	if c.Shard2 != nil {
		errs = append(errs, c.Shard2.Close())
	}
	if c.Kafka != nil {
		errs = append(errs, c.Kafka.Close())
	}
	return errors.Join(errs...)
}

// shards are the two servers, shard 1 first.
func (c *Cluster) shards() []*testinfra.ClickHouse {
	return []*testinfra.ClickHouse{c.Shard1, c.Shard2}
}

// execAll runs the statements of a SQL file: they end with ";" at the end
// of a line, and lines starting with "--" are comments.
func execAll(ctx context.Context, s *testinfra.ClickHouse, sql string) error {
	var stmt strings.Builder
	for line := range strings.Lines(sql) {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		stmt.WriteString(line)
		if t := strings.TrimSpace(line); strings.HasSuffix(t, ";") {
			q := strings.TrimSuffix(strings.TrimSpace(stmt.String()), ";")
			if err := s.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", s.Addr, err)
			}
			stmt.Reset()
		}
	}
	if strings.TrimSpace(stmt.String()) != "" {
		return fmt.Errorf("SQL without a final ';': %q", stmt.String())
	}
	return nil
}
