package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// partitionCheck is the checker's verdict on one partition.
type partitionCheck struct {
	tenant    string
	topic     string
	partition int32
	produced  int   // records in the partition
	end       int64 // its end offset
	committed int64 // the group's committed offset, -1 for none
	landed    int   // distinct offsets with a row in ClickHouse
	rows      int   // rows in ClickHouse
	deadLet   int   // distinct offsets in the dead-letter topic
	missing   []int64
	// unresolved: neither landed nor dead-lettered, committed or not.
	unresolved []int64
	// corrupt: rows whose value is not the record's, rows or dead letters
	// naming an offset the partition does not have.
	corrupt []string
}

// chaosCheck reads what sluice left behind, independently of its code:
// every record of the tenants' partitions from Kafka, the committed offsets
// from the group coordinator, the rows from ClickHouse and the dead letters
// from their topic (identified by the documented sluice.source.* headers,
// else by the id in the value).
func (r *chaosRun) check() ([]partitionCheck, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	committed, ends, err := r.offsets(ctx)
	if err != nil {
		return nil, err
	}
	topics := map[string]string{r.acme.topic: r.acme.table, r.beta.topic: r.beta.table}
	kafkaRecs, err := r.readTopics(ctx, append([]string{r.dlq}, r.acme.topic, r.beta.topic))
	if err != nil {
		return nil, err
	}
	type key struct {
		topic     string
		partition int32
	}
	byPart := map[key]map[int64][]byte{}
	byID := map[string]key{}
	offsetOf := map[string]int64{}
	for _, rec := range kafkaRecs {
		if rec.Topic == r.dlq {
			continue
		}
		k := key{rec.Topic, rec.Partition}
		if byPart[k] == nil {
			byPart[k] = map[int64][]byte{}
		}
		byPart[k][rec.Offset] = rec.Value
		id, _, _ := strings.Cut(string(rec.Value[:min(len(rec.Value), 64)]), "|")
		byID[id] = k
		offsetOf[id] = rec.Offset
	}
	dead := map[key]map[int64]bool{}
	var strays []string
	for _, rec := range kafkaRecs {
		if rec.Topic != r.dlq {
			continue
		}
		h := map[string]string{}
		for _, hd := range rec.Headers {
			h[hd.Key] = string(hd.Value)
		}
		var k key
		var off int64
		if topic, ok := h[headerSourceTopic]; ok {
			p, err1 := strconv.ParseInt(h[headerSourcePartition], 10, 32)
			o, err2 := strconv.ParseInt(h[headerSourceOffset], 10, 64)
			if err1 != nil || err2 != nil {
				strays = append(strays, fmt.Sprintf("dead letter at %d with bad source headers %v", rec.Offset, h))
				continue
			}
			k, off = key{topic, int32(p)}, o
		} else {
			id, _, _ := strings.Cut(string(rec.Value[:min(len(rec.Value), 64)]), "|")
			var ok bool
			if k, ok = byID[id]; !ok {
				strays = append(strays, fmt.Sprintf("dead letter at %d with no source headers and unknown id %q", rec.Offset, id))
				continue
			}
			off = offsetOf[id]
		}
		if dead[k] == nil {
			dead[k] = map[int64]bool{}
		}
		dead[k][off] = true
	}
	var out []partitionCheck
	for topic, table := range topics {
		tenant := r.acme.id
		if topic == r.beta.topic {
			tenant = r.beta.id
		}
		rows, err := r.env.ch.Query(ctx, fmt.Sprintf(
			"SELECT partition, offset, count(), any(value) FROM %s WHERE topic = '%s' GROUP BY partition, offset FORMAT TSV", table, topic))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		landed := map[key]map[int64]int{}
		var bad []string
		for _, line := range strings.Split(strings.TrimSpace(rows), "\n") {
			if line == "" {
				continue
			}
			f := strings.SplitN(line, "\t", 4)
			if len(f) != 4 {
				return nil, fmt.Errorf("read %s: unexpected line %q", table, line)
			}
			p, _ := strconv.ParseInt(f[0], 10, 32)
			o, _ := strconv.ParseInt(f[1], 10, 64)
			n, _ := strconv.Atoi(f[2])
			k := key{topic, int32(p)}
			if landed[k] == nil {
				landed[k] = map[int64]int{}
			}
			landed[k][o] = n
			if v, ok := byPart[k][o]; !ok {
				bad = append(bad, fmt.Sprintf("row for %s/%d@%d, which Kafka does not have", topic, p, o))
			} else if string(v) != f[3] {
				bad = append(bad, fmt.Sprintf("row for %s/%d@%d holds %.40q, the record is %.40q", topic, p, o, f[3], v))
			}
		}
		for p := int32(0); p < 4; p++ {
			k := key{topic, p}
			pk := fmt.Sprintf("%s/%d", topic, p)
			c := partitionCheck{tenant: tenant, topic: topic, partition: p, end: ends[pk], committed: committed[pk], produced: len(byPart[k])}
			for _, b := range bad {
				if strings.Contains(b, fmt.Sprintf("%s/%d@", topic, p)) {
					c.corrupt = append(c.corrupt, b)
				}
			}
			for o := range dead[k] {
				if _, ok := byPart[k][o]; !ok {
					c.corrupt = append(c.corrupt, fmt.Sprintf("dead letter for %s@%d, which Kafka does not have", pk, o))
				}
			}
			c.deadLet = len(dead[k])
			for o, n := range landed[k] {
				c.landed++
				c.rows += n
				_ = o
			}
			offs := make([]int64, 0, len(byPart[k]))
			for o := range byPart[k] {
				offs = append(offs, o)
			}
			sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
			for _, o := range offs {
				if landed[k][o] > 0 || dead[k][o] {
					continue
				}
				c.unresolved = append(c.unresolved, o)
				if o < c.committed {
					c.missing = append(c.missing, o)
				}
			}
			out = append(out, c)
		}
	}
	if len(strays) > 0 && len(out) > 0 {
		out[0].corrupt = append(out[0].corrupt, strays...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].partition < out[j].partition
	})
	return out, nil
}

// readTopics reads every record of topics, from the start to the end
// offsets listed now.
func (r *chaosRun) readTopics(ctx context.Context, topics []string) ([]*kgo.Record, error) {
	starts, err := r.admin.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	ends, err := r.admin.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	assign := map[string]map[int32]kgo.Offset{}
	remaining := map[string]int64{} // partition → end offset still to reach
	var lerr error
	ends.Each(func(l kadm.ListedOffset) {
		if l.Err != nil {
			lerr = l.Err
			return
		}
		s, _ := starts.Lookup(l.Topic, l.Partition)
		if l.Offset <= s.Offset {
			return
		}
		if assign[l.Topic] == nil {
			assign[l.Topic] = map[int32]kgo.Offset{}
		}
		assign[l.Topic][l.Partition] = kgo.NewOffset().At(s.Offset)
		remaining[fmt.Sprintf("%s/%d", l.Topic, l.Partition)] = l.Offset
	})
	if lerr != nil {
		return nil, lerr
	}
	if len(assign) == 0 {
		return nil, nil
	}
	cl, err := r.env.kafka.NewClient(kgo.ConsumePartitions(assign), kgo.FetchMaxBytes(16<<20), kgo.FetchMaxPartitionBytes(8<<20))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %v: %d partitions not read to their end: %w", topics, len(remaining), err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("read %s/%d: %w", t, p, err) })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			k := fmt.Sprintf("%s/%d", rec.Topic, rec.Partition)
			end, ok := remaining[k]
			if !ok || rec.Offset >= end {
				return
			}
			out = append(out, rec)
			if rec.Offset+1 >= end {
				delete(remaining, k)
			}
		})
	}
	return out, nil
}

// commitTime is when the committed offset of a partition first passed
// offset, from the watch; zero if never seen.
func (r *chaosRun) commitTime(pk string, offset int64) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.commits[pk] {
		if c.offset > offset {
			return c.at
		}
	}
	return time.Time{}
}

// near names the faults active at, or ended within 15s before, moment at.
func (r *chaosRun) near(at time.Time) string {
	s, _, _ := r.nearKinds(at)
	return s
}

// nearKinds is near with the kinds of those faults.
func (r *chaosRun) nearKinds(at time.Time) (desc string, kinds []string, exit string) {
	if at.IsZero() {
		return "commit not observed by the watch (at the final drain?)", nil, ""
	}
	r.mu.Lock()
	faults := append([]chaosSpan(nil), r.faultLog...)
	r.mu.Unlock()
	for _, f := range faults {
		if !at.Before(f.start) && (f.end.IsZero() || !at.After(f.end.Add(15*time.Second))) {
			kinds = append(kinds, f.kind)
		}
	}
	desc = fmt.Sprintf("committed at %.2fs", at.Sub(r.start).Seconds())
	if len(kinds) > 0 {
		desc += " during/after " + strings.Join(kinds, ",")
	}
	// The process that made the commit most likely ended soon after it: a
	// failing pipeline commits, then drains for up to shutdown_timeout.
	var first *chaosExit
	for _, in := range []*chaosInstance{r.a, r.b} {
		for _, e := range in.exits() {
			if d := e.ended.Sub(at); d > -time.Second && d < r.prof.shutdown+5*time.Second && (first == nil || e.ended.Before(first.ended)) {
				first = &e
			}
		}
	}
	if first != nil {
		desc += fmt.Sprintf(", then %s pid %d ended at %.2fs: %s", first.instance, first.pid, first.ended.Sub(r.start).Seconds(), first)
		exit = first.String()
		if first.cause == "" && first.lastErr != "" {
			desc += ": " + first.lastErr
			exit += ": " + digits.ReplaceAllString(strings.TrimPrefix(first.lastErr, "sluice run: "), "N")
		}
		if first.panic != "" {
			exit += ": " + first.panic
		}
	}
	return desc, kinds, exit
}

// ranges prints offsets as compact ranges.
func ranges(offs []int64) string {
	var parts []string
	for i := 0; i < len(offs); {
		j := i
		for j+1 < len(offs) && offs[j+1] == offs[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.FormatInt(offs[i], 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", offs[i], offs[j]))
		}
		i = j + 1
	}
	if len(parts) > 12 {
		parts = append(parts[:12], fmt.Sprintf("… (%d ranges)", len(parts)))
	}
	return strings.Join(parts, ",")
}

// missingRanges prints offsets as ranges, each with the moment the
// committed offset first passed it and the faults around that moment.
func (r *chaosRun) missingRanges(pk string, offs []int64) string {
	var parts []string
	for i := 0; i < len(offs); {
		j := i
		for j+1 < len(offs) && offs[j+1] == offs[j]+1 {
			j++
		}
		span := strconv.FormatInt(offs[i], 10)
		if j > i {
			span = fmt.Sprintf("%d-%d", offs[i], offs[j])
		}
		desc, kinds, exit := r.nearKinds(r.commitTime(pk, offs[i]))
		if len(kinds) == 0 {
			kinds = []string{"(no fault near)"}
		}
		if exit == "" {
			exit = "(no exit soon after)"
		}
		r.mu.Lock()
		for _, k := range kinds {
			r.missingNear[k] += j - i + 1
		}
		r.missingBy[exit] += j - i + 1
		r.mu.Unlock()
		parts = append(parts, fmt.Sprintf("%s (%s)", span, desc))
		i = j + 1
	}
	if len(parts) > 8 {
		parts = append(parts[:8], fmt.Sprintf("… (%d ranges)", len(parts)))
	}
	return strings.Join(parts, "; ")
}
