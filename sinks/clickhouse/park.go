package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// parkKey names the inserts of one table to one shard.
type parkKey struct {
	t  *Table
	sh *shard
}

// parkedInserts are one table's inserts to one shard that failed
// permanently (a dropped or altered table, a revoked grant, a value out of
// range), oldest first. They keep their rows and acks: nothing is dropped,
// nothing is acked, and the table's pipeline holds its offsets until the
// rows land. One goroutine retries them, unchanged, in order.
type parkedInserts struct {
	inserts []*openInsert
	rows    int
	err     error // the last failure
}

// park keeps ins, which failed permanently with err, for retryParked, and
// starts that table's retrier if it is not running. The shard's worker goes
// on with other tables' parts at once.
func (s *Sink) park(sh *shard, ins *openInsert, err error) {
	key := parkKey{t: ins.t, sh: sh}
	s.mu.Lock()
	pk := s.parked[key]
	start := pk == nil
	if start {
		pk = &parkedInserts{}
		s.parked[key] = pk
	}
	pk.inserts = append(pk.inserts, ins)
	pk.rows += ins.rows
	pk.err = err
	ctx := s.runCtx
	if start {
		s.background.Add(1)
	}
	s.mu.Unlock()
	s.log.Error("insert failed permanently; its rows are kept and retried, the table's pipeline holds its offsets",
		"table", ins.t.target.fullName(), "shard", sh.name, "rows", ins.rows, "retry_in", s.cfg.PermanentRetryInterval, "err", err)
	if start {
		go func() {
			defer s.background.Done()
			s.retryParked(ctx, key)
		}()
	}
}

// retryParked retries key's parked inserts, oldest first, every
// PermanentRetryInterval, until all have landed or ctx ends or the sink is
// closed (then they stay unacked).
func (s *Sink) retryParked(ctx context.Context, key parkKey) {
	w := &worker{s: s, sh: key.sh, timer: time.NewTimer(time.Hour)}
	w.timer.Stop()
	defer w.closeConn()
	t := time.NewTimer(s.cfg.PermanentRetryInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		case <-s.closing:
			// A drain does not wait for a table that keeps failing.
			return
		}
		for {
			s.mu.Lock()
			pk := s.parked[key]
			if len(pk.inserts) == 0 {
				delete(s.parked, key)
				s.mu.Unlock()
				return
			}
			ins := pk.inserts[0]
			s.mu.Unlock()
			err := w.insertWithRetry(ctx, ins)
			if err != nil {
				if !errors.As(err, new(*PermanentError)) {
					return // ctx ended
				}
				s.mu.Lock()
				pk.err = err
				s.mu.Unlock()
				s.log.Warn("parked insert still fails", "table", key.t.target.fullName(), "shard", key.sh.name,
					"rows", pk.rows, "retry_in", s.cfg.PermanentRetryInterval, "err", err)
				break
			}
			s.mu.Lock()
			pk.inserts = pk.inserts[1:]
			pk.rows -= ins.rows
			s.mu.Unlock()
			for _, p := range ins.parts {
				s.partDone(p, ins.acked)
			}
			s.log.Info("parked insert landed", "table", key.t.target.fullName(), "shard", key.sh.name, "rows", ins.rows)
		}
		t.Reset(s.cfg.PermanentRetryInterval)
	}
}

// parkedFailing describes the tables with parked inserts, "" if none.
func (s *Sink) parkedFailing() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := ""
	for key, pk := range s.parked {
		if len(pk.inserts) == 0 {
			continue
		}
		if msg != "" {
			msg += "; "
		}
		msg += fmt.Sprintf("%s%s: %d rows held after a permanent error: %v", key.t.target.fullName(), key.sh.where(key.sh.current()), pk.rows, pk.err)
	}
	return msg
}

// parkedRows is the number of rows of t held after a permanent insert
// error, over all shards.
func (s *Sink) parkedRows(t *Table) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for key, pk := range s.parked {
		if key.t == t {
			n += pk.rows
		}
	}
	return n
}
