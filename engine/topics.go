package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// topicCheckInterval is how often the pipeline asks the brokers whether
// its topics exist.
const topicCheckInterval = 5 * time.Second

// watchTopics checks, once at once and then every topicCheckInterval until
// ctx ends, that every topic the pipeline consumes exists: a missing topic
// consumes nothing and says nothing otherwise. Readiness names the missing
// ones; each is logged when it goes missing and when it appears.
func (p *Pipeline) watchTopics(ctx context.Context) {
	adm := kadm.NewClient(p.client)
	check := func() {
		topics := p.activeTopics()
		if len(topics) == 0 {
			p.missingTopics.Store(nil)
			return
		}
		reqCtx, cancel := context.WithTimeout(ctx, topicCheckInterval)
		defer cancel()
		details, err := adm.ListTopics(reqCtx, topics...)
		if err != nil {
			return // the brokers are unreachable: fetches report that
		}
		var missing []string
		for _, t := range topics {
			if d, ok := details[t]; !ok || d.Err != nil {
				missing = append(missing, t)
			}
		}
		var before []string
		if prev := p.missingTopics.Load(); prev != nil {
			before = *prev
		}
		for _, t := range missing {
			if !slices.Contains(before, t) {
				p.log.Warn("topic does not exist; nothing is consumed from it until it is created", "topic", t)
			}
		}
		for _, t := range before {
			if !slices.Contains(missing, t) {
				p.log.Info("topic exists now", "topic", t)
			}
		}
		if len(missing) == 0 {
			p.missingTopics.Store(nil)
		} else {
			p.missingTopics.Store(&missing)
		}
	}
	check()
	every(ctx, topicCheckInterval, check)
}

// topicsMissing says which consumed topics do not exist, "" when all do.
func (p *Pipeline) topicsMissing() string {
	m := p.missingTopics.Load()
	if m == nil {
		return ""
	}
	return fmt.Sprintf("topics do not exist: %s", strings.Join(*m, ", "))
}
