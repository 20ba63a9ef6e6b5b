package engine

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// setModulePaused pauses or resumes fetching a partition whose module keeps
// failing; readiness is false while any partition is paused.
func (p *Pipeline) setModulePaused(tp topicPartition, paused bool) {
	p.pausedMu.Lock()
	defer p.pausedMu.Unlock()
	parts := map[string][]int32{tp.topic: {tp.partition}}
	if paused {
		p.paused[tp] = true
		p.client.PauseFetchPartitions(parts)
	} else {
		delete(p.paused, tp)
		p.client.ResumeFetchPartitions(parts)
	}
}

// Ready reports whether the pipeline is consuming, ClickHouse answers and
// every shard's last insert succeeded, and no partition is paused for a
// failing module; and why not.
func (p *Pipeline) Ready() (bool, string) {
	if !p.polling.Load() {
		return false, "not consuming: starting, draining or stopped"
	}
	if why := p.modulePaused(); why != "" {
		return false, why
	}
	if why := p.topicsMissing(); why != "" {
		return false, why
	}
	for _, r := range p.routes {
		if msg := r.loadErr.Load(); msg != nil {
			return false, *msg
		}
		if why := r.schema.Load().refused; why != "" {
			return false, why
		}
	}
	if msg := p.sink.Failing(); msg != "" {
		return false, "ClickHouse: " + msg
	}
	if err := p.ping.check(func() error { return p.sink.Ping(context.Background(), 2*time.Second) }); err != nil {
		return false, "ClickHouse unreachable: " + err.Error()
	}
	return true, ""
}

func (p *Pipeline) modulePaused() string {
	p.pausedMu.Lock()
	defer p.pausedMu.Unlock()
	if len(p.paused) == 0 {
		return ""
	}
	var tps []string
	for tp := range p.paused {
		tps = append(tps, fmt.Sprintf("%s (module %s)", tp, p.byTopic[tp.topic]))
	}
	sort.Strings(tps)
	return fmt.Sprintf("paused after repeated module failures: %s", strings.Join(tps, ", "))
}

// pingCache runs a reachability check at most once per second; callers in
// between get the last result.
type pingCache struct {
	mu   sync.Mutex
	at   time.Time
	last error
}

func (c *pingCache) check(ping func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < time.Second {
		return c.last
	}
	c.last = ping()
	c.at = time.Now()
	return c.last
}
