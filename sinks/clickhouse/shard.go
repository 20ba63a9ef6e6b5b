package clickhouse

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"
)

// transport is how inserts and metadata queries reach a server.
type transport interface {
	// newReplica describes the server at native address addr ("" for the
	// configured addr or http_addr).
	newReplica(addr string) (*replica, error)
	// open returns a connection to rep for one worker's inserts.
	open(ctx context.Context, rep *replica) (conn, error)
	// query runs a statement whose result columns are all String.
	query(ctx context.Context, rep *replica, sql string) ([][]string, error)
	// canSendSettings reports whether per-query settings reach rep.
	canSendSettings(rep *replica) bool
	close()
}

// conn is one worker's connection to one replica.
type conn interface {
	// insert sends the parts src hands out, all of table t, as one
	// INSERT; src has at least one.
	insert(ctx context.Context, plan *insertPlan, src *partSource, s insertSettings) error
	close()
}

// insertSettings are what an insert sends besides its rows.
type insertSettings struct {
	dedupToken      string
	distributedSync bool
	// asyncInsertOff sends async_insert=0: sluice batches inserts itself,
	// and a server-side async insert would acknowledge rows it has only
	// queued (with wait_for_async_insert=0) and deduplicate them by
	// async_insert_deduplicate instead of the token.
	asyncInsertOff bool
	// requestKey is the same for every attempt of one insert (HTTP
	// Idempotency-Key).
	requestKey string
	// dedupViews sends deduplicate_blocks_in_dependent_materialized_views=1:
	// an exactly-once replay the table drops is dropped by its views too.
	dedupViews bool
	// duplicated, when not nil, counts the blocks the server dropped as
	// duplicates of blocks it had inserted before, where the transport
	// reports them (native: the DuplicatedInsertedBlocks profile event).
	duplicated *int64
}

// part is the rows of one chunk that go to one shard.
type part struct {
	chunk *Chunk
	sub   *subBlock
	// taken is when an insert took the part off its shard queue (for a
	// part that ended another table's insert: when the next insert
	// started with it).
	taken time.Time
}

// replica is one server of a shard.
type replica struct {
	addr   string   // native host:port (HTTP: the URL's host for http_addr)
	url    *url.URL // transport http
	dialer *dialer  // transport native
	brk    breaker
	// settings caches which per-insert settings the server knows
	// (Sink.serverSettings); 0 until it has answered.
	settings atomic.Int32
}

// breaker is a replica's circuit breaker. It opens after a number of
// consecutive failed inserts, keeping the replica out of rotation for a
// cool-down; then one trial insert (half-open) closes it again or
// reopens it.
type breaker struct {
	mu        sync.Mutex
	failures  int
	openUntil time.Time // zero: closed
	trial     bool      // the half-open trial is in flight
	opens     int64
}

// allow reports whether an insert may go to the replica now, and takes
// the half-open trial when the cool-down is over.
func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return true
	case now.Before(b.openUntil) || b.trial:
		return false
	}
	b.trial = true
	return true
}

func (b *breaker) success() {
	b.mu.Lock()
	b.failures, b.openUntil, b.trial = 0, time.Time{}, false
	b.mu.Unlock()
}

// failure records a failed insert and reports whether it opened the breaker.
func (b *breaker) failure(now time.Time, threshold int, cooldown time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	if b.trial || (b.openUntil.IsZero() && b.failures >= threshold) {
		b.openUntil, b.trial = now.Add(cooldown), false
		b.opens++
		return true
	}
	if !b.openUntil.IsZero() && !now.Before(b.openUntil) {
		// Used while open because every replica was: keep it out again.
		b.openUntil = now.Add(cooldown)
	}
	return false
}

// release gives back a half-open trial that ended without a verdict.
func (b *breaker) release() {
	b.mu.Lock()
	b.trial = false
	b.mu.Unlock()
}

func (b *breaker) until() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.openUntil
}

func (b *breaker) isOpen(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero() && now.Before(b.openUntil)
}

// shard is one bounded queue of parts and the replicas its workers insert
// into. With routing endpoint or distributed there is one shard whose one
// replica is the configured server.
type shard struct {
	name     string // for logs and errors: "" or "shard 2 of cluster c"
	num      int    // shard_num, 1-based (0: the endpoint)
	weight   int
	replicas []*replica
	queue    chan *part
	// collect holds one token: the worker that has it is the one whose
	// insert takes parts from the queue. One insert collects at a time,
	// so that each gets every part sealed during its insert_linger,
	// rather than inserts_per_shard inserts splitting them into smaller
	// parts for the server to merge; the other workers send, retry, or
	// wait their turn.
	collect chan struct{}
	// held is a part of another table that ended the last insert to
	// collect; the next one starts with it. Only the collect token's
	// holder touches it.
	held *part

	mu  sync.Mutex
	cur int // index of the replica inserts go to

	insertedRows atomic.Int64
	// failing is why the shard's last insert attempt failed, nil after a
	// success.
	failing atomic.Pointer[string]
}

// sameAs says whether o is the same shard of a cluster: the same number,
// weight and replicas.
func (sh *shard) sameAs(o *shard) bool {
	return sh.num == o.num && sh.weight == o.weight &&
		slices.EqualFunc(sh.replicas, o.replicas, func(a, b *replica) bool { return a.addr == b.addr })
}

// pick returns the replica the next insert goes to: the current one, or
// the next whose breaker lets it, in rotation. If every breaker is open it
// returns the one that reopens first rather than stall; the backoff paces
// those attempts.
func (sh *shard) pick(now time.Time) *replica {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := len(sh.replicas)
	for i := range n {
		idx := (sh.cur + i) % n
		if sh.replicas[idx].brk.allow(now) {
			sh.cur = idx
			return sh.replicas[idx]
		}
	}
	best, bestUntil := sh.replicas[sh.cur], time.Time{}
	for i, r := range sh.replicas {
		if u := r.brk.until(); i == 0 || u.Before(bestUntil) {
			best, bestUntil = r, u
		}
	}
	return best
}

// rotate moves the shard's inserts past a replica that just failed.
func (sh *shard) rotate(failed *replica) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.replicas[sh.cur] == failed {
		sh.cur = (sh.cur + 1) % len(sh.replicas)
	}
}

func (sh *shard) current() *replica {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.replicas[sh.cur]
}

// where names the shard and replica for a message.
func (sh *shard) where(rep *replica) string {
	if sh.name == "" {
		return ""
	}
	return fmt.Sprintf(" (%s, replica %s)", sh.name, rep.addr)
}

// worker is one of a shard's inserts_per_shard goroutines. It keeps its
// connection across inserts while the replica stays the same.
type worker struct {
	s       *Sink
	sh      *shard
	conn    conn
	connRep *replica
	timer   *time.Timer
	// sorted sends inserts in their table's key order (sort_rows).
	sorted sortedEncoder
}

func (w *worker) closeConn() {
	if w.conn != nil {
		w.conn.close()
		w.conn, w.connRep = nil, nil
	}
}

// openInsert is one INSERT: its table and the parts it carries so far.
type openInsert struct {
	t           *Table
	parts       []*part
	rows, bytes int
	deadline    time.Time // it takes no more parts after this
	// sealed: the insert takes no more parts, because a limit or the
	// deadline was reached or because it was sent (a retry is unchanged).
	sealed bool
	// acked is when the server acknowledged the attempt that succeeded.
	acked time.Time
	// token is the insert's deduplication token once derived: every
	// attempt sends the same one.
	token    string
	hasToken bool
	// collecting: the insert holds its shard's collect token (until it
	// is sealed or its first attempt ends).
	collecting bool
	// backlog: its first chunk's rows are older than
	// backlog_insert_linger, so it lingers that long, but past
	// insert_linger takes no more chunks once none has come for
	// insert_linger.
	backlog bool
	started time.Time
	// sorted: the last attempt sent its rows in the table's key order.
	sorted bool
}

// segment is the exactly-once segment of the insert's part, "" for none:
// such an insert carries that one part.
func (ins *openInsert) segment() string {
	if len(ins.parts) == 0 {
		return ""
	}
	return ins.parts[0].chunk.segment
}

func (ins *openInsert) add(p *part) {
	ins.parts = append(ins.parts, p)
	ins.rows += p.sub.rows
	ins.bytes += p.sub.size()
}

// partSource hands a transport an insert's parts: those it has, then, if
// the insert streams, more from the shard queue as the transport asks.
type partSource struct {
	w      *worker
	ins    *openInsert
	i      int
	stream bool
	// sorted, when not nil, sends the parts' rows in the table's key
	// order (native transport; the parts are all at hand).
	sorted *sortedEncoder
}

// next returns the next part, or nil at the end of the insert.
func (ps *partSource) next(ctx context.Context) *part {
	if ps.i < len(ps.ins.parts) {
		ps.i++
		return ps.ins.parts[ps.i-1]
	}
	if !ps.stream {
		return nil
	}
	p := ps.w.pull(ctx, ps.ins)
	if p != nil {
		ps.i++
	}
	return p
}

// pull adds the next queued part of the insert's table to ins, waiting
// until ins's deadline; nil once ins is full, late, or the queue is closed.
// A part of another table ends the insert and starts the next one.
func (w *worker) pull(ctx context.Context, ins *openInsert) *part {
	cfg := &w.s.cfg
	if ins.sealed || ins.segment() != "" || ins.rows >= cfg.MaxInsertRows || ins.bytes >= cfg.MaxInsertBytes {
		w.seal(ins)
		return nil
	}
	wait := time.Until(ins.deadline)
	if wait <= 0 {
		w.seal(ins)
		return nil
	}
	if ins.backlog {
		// Past insert_linger, a backlog insert stays open only while
		// chunks keep coming: they stop when the backlog is drained or
		// fetching is paused, waiting for this insert to free the
		// in-flight budget.
		gap := w.s.backlogGap
		if gap <= 0 {
			gap = cfg.InsertLinger
		}
		wait = min(wait, max(time.Until(ins.started.Add(cfg.InsertLinger)), gap))
	}
	w.timer.Reset(wait)
	defer w.timer.Stop()
	var p *part
	select {
	case p = <-w.sh.queue:
	case <-w.timer.C:
	case <-ctx.Done():
	case <-w.s.closing:
		// No more parts come; take one already queued, if any.
		select {
		case p = <-w.sh.queue:
		default:
		}
	}
	switch {
	case p == nil:
	case p.chunk.block.table != ins.t || p.chunk.segment != "":
		w.sh.held = p
	default:
		p.taken = time.Now()
		ins.add(p)
		return p
	}
	w.seal(ins)
	return nil
}

// behind reports whether p's oldest record was written more than d before
// now, by its acks' record times.
func behind(p *part, now time.Time, d time.Duration) bool {
	var oldest time.Time
	for _, a := range p.chunk.acks {
		if rt, ok := a.(RecordTime); ok {
			if t := rt.OldestRecord(); !t.IsZero() && (oldest.IsZero() || t.Before(oldest)) {
				oldest = t
			}
		}
	}
	return !oldest.IsZero() && now.Sub(oldest) > d
}

// seal ends ins's collecting of parts and passes the shard's collect
// token on.
func (w *worker) seal(ins *openInsert) {
	ins.sealed = true
	if ins.collecting {
		ins.collecting = false
		w.sh.collect <- struct{}{}
	}
}

// acquire waits for the shard's collect token; false once ctx ended.
func (w *worker) acquire(ctx context.Context) bool {
	select {
	case <-w.sh.collect:
		return true
	case <-ctx.Done():
		return false
	}
}

// next waits for the next queued part. After Close it returns what is
// still queued, then nil once no Send is left that could add more.
func (w *worker) next(ctx context.Context) *part {
	select {
	case p := <-w.sh.queue:
		return p
	case <-ctx.Done():
		return nil
	case <-w.s.closing:
		w.s.senders.Wait()
		select {
		case p := <-w.sh.queue:
			return p
		default:
			return nil
		}
	}
}

// run inserts queued parts until the sink is closed and the queue drained,
// or ctx ends. An insert starts with the first part at hand and, while it
// is open, takes more parts of the same table as they come, until
// max_insert_rows, max_insert_bytes or insert_linger after its start. An
// insert that fails permanently is parked (see park) and the worker goes
// on with the queue: one broken table never stops the others.
func (w *worker) run(ctx context.Context) error {
	defer w.closeConn()
	w.timer = time.NewTimer(time.Hour)
	w.timer.Stop()
	for {
		if !w.acquire(ctx) {
			return nil
		}
		first := w.sh.held
		w.sh.held = nil
		if first == nil {
			if first = w.next(ctx); first == nil {
				w.sh.collect <- struct{}{}
				return nil
			}
		}
		now := time.Now()
		first.taken = now
		ins := &openInsert{t: first.chunk.block.table, deadline: now.Add(w.s.cfg.InsertLinger), collecting: true, started: now}
		if l := w.s.cfg.BacklogInsertLinger; l > w.s.cfg.InsertLinger && behind(first, now, l) {
			ins.deadline, ins.backlog = now.Add(l), true
		}
		ins.add(first)
		if err := w.insertWithRetry(ctx, ins); err != nil {
			if errors.As(err, new(*PermanentError)) {
				w.s.park(w.sh, ins, err)
				continue
			}
			return nil // ctx ended
		}
		for _, p := range ins.parts {
			w.s.partDone(p, ins.acked)
		}
	}
}

// insertWithRetry sends ins, retrying it unchanged with backoff, rotating
// through the shard's replicas, until it succeeds, fails permanently, or
// ctx ends. The first attempt streams: it starts with the parts at hand and
// takes more as they come. When a deduplication token is sent, the insert
// collects its parts first, because the token must cover all of them.
func (w *worker) insertWithRetry(ctx context.Context, ins *openInsert) error {
	s := w.s
	t := ins.t
	b := backoff{min: s.cfg.RetryMin, max: s.cfg.RetryMax}
	st := insertSettings{requestKey: fmt.Sprintf("sluice-%016x", rand.Uint64())}
	plan := t.planFor(w.sh)
	for attempt := 1; ; attempt++ {
		start := time.Now()
		dups := int64(0)
		st.duplicated = &dups
		rep := w.sh.pick(start)
		err := w.connect(ctx, rep)
		if err == nil && plan.err != nil {
			// The table changed in a way these rows do not fit: look
			// again, the table may have changed since.
			if plan, err = w.adaptPlan(ctx, rep, t); err != nil {
				err = &PermanentError{Err: fmt.Errorf("the table changed and its queued rows cannot be adapted: %w", err)}
				plan = &insertPlan{err: err}
			}
		}
		if err == nil {
			st.distributedSync = s.cfg.DistributedSync && s.tr.canSendSettings(rep)
			st.asyncInsertOff = s.serverSettings(ctx, rep)&settingAsyncInsert != 0
			st.dedupToken = ""
			if seg := ins.segment(); seg != "" {
				// Checked at startup (CheckExactlyOnce); a replica
				// that does not take the token must not get the rows,
				// and one that could not be asked is tried again.
				v, aerr := s.askSettings(ctx, rep)
				switch {
				case aerr != nil:
					err = fmt.Errorf("asking the server which settings it takes: %w", aerr)
				case v&settingDedupToken == 0:
					err = &PermanentError{Err: fmt.Errorf("exactly-once insert: the server does not take insert_deduplication_token")}
				}
				st.dedupToken, st.dedupViews = segmentToken(t, seg), true
			} else if s.dedupSupported(ctx, rep) && hasOffsetRanges(ins.parts[0]) {
				for !ins.sealed {
					w.pull(ctx, ins)
				}
				if !ins.hasToken {
					ins.token, ins.hasToken = w.dedupToken(t, ins.parts), true
				}
				st.dedupToken = ins.token
			}
			var sorted *sortedEncoder
			ins.sorted = false
			if err == nil && w.sortable(ins) && plan.identity() {
				// Its rows go in the key order: all of them at once.
				for !ins.sealed {
					w.pull(ctx, ins)
				}
				sorted = &w.sorted
			}
			if err == nil {
				src := &partSource{w: w, ins: ins, stream: !ins.sealed, sorted: sorted}
				err = w.conn.insert(ctx, plan, src, st)
			}
		}
		// An insert is sent as it stands after its first attempt, which
		// lets the next insert collect: one that cannot be sent (its
		// server down, its table broken) never holds up the others.
		w.seal(ins)
		end := time.Now()
		w.observe(ins, rep, attempt, start, end, err, dups)
		if err == nil {
			ins.acked = end
			if ins.sorted {
				s.sortedInserts.Add(1)
			}
			rep.brk.success()
			w.sh.failing.Store(nil)
			w.sh.insertedRows.Add(int64(ins.rows))
			t.stats.insertedRows.Add(int64(ins.rows))
			s.insertedRows.Add(int64(ins.rows))
			s.inserts.Add(1)
			return nil
		}
		w.closeConn()
		if ctx.Err() != nil {
			rep.brk.release()
			return ctx.Err()
		}
		s.insertErrors.Add(1)
		msg := fmt.Sprintf("insert into %s%s failed: %v", t.target.fullName(), w.sh.where(rep), err)
		w.sh.failing.Store(&msg)
		err = classify(err)
		if errors.As(err, new(*PermanentError)) {
			if schemaChanged(err) {
				adapted, aerr := w.adaptPlan(ctx, rep, t)
				if aerr == nil && !adapted.sameAs(plan) {
					s.log.Info("the table changed under queued rows; inserting them with their columns adapted",
						"table", t.target.fullName(), "shard", w.sh.name, "rows", ins.rows,
						"columns", strings.Join(adapted.target.columns, ", "), "err", err)
					plan = adapted
					continue
				}
				if aerr != nil {
					err = fmt.Errorf("%w (the rows cannot be adapted to the table as it is now: %v)", err, aerr)
				}
			}
			rep.brk.release()
			return fmt.Errorf("insert into %s%s: %w", t.target.fullName(), w.sh.where(rep), err)
		}
		if rep.brk.failure(time.Now(), s.cfg.Cluster.BreakerFailures, s.cfg.Cluster.BreakerCooldown) && len(w.sh.replicas) > 1 {
			s.breakerOpens.Add(1)
			s.log.Warn("replica circuit breaker open", "shard", w.sh.name, "replica", rep.addr,
				"cooldown", s.cfg.Cluster.BreakerCooldown)
		}
		w.sh.rotate(rep)
		wait := b.next(rand.Int64N)
		s.log.Warn("insert failed, retrying", "table", t.target.fullName(), "shard", w.sh.name,
			"replica", rep.addr, "rows", ins.rows, "attempt", attempt, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// adaptPlan describes the insert table on rep and returns the plan that
// inserts t's blocks into it as it is now, which the shard's later inserts
// of t use too. It tells the sink's OnSchemaChange function.
func (w *worker) adaptPlan(ctx context.Context, rep *replica, t *Table) (*insertPlan, error) {
	s := w.s
	if fn := s.onSchemaChange; fn != nil {
		fn(t.Name)
	}
	qctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	cols, err := s.describe(qctx, rep, t.target.database, t.target.table)
	if err != nil {
		return nil, err
	}
	p, err := adaptPlan(t, cols, s.serverSettings(qctx, rep)&settingNativeConversion != 0)
	if err != nil {
		return nil, err
	}
	t.plans.Store(w.sh, p)
	return p, nil
}

// observe tells the sink's OnInsert function about an attempt.
func (w *worker) observe(ins *openInsert, rep *replica, attempt int, start, end time.Time, err error, duplicated int64) {
	if duplicated > 0 && err == nil {
		ins.t.stats.deduplicated.Add(duplicated)
	}
	fn := w.s.onInsert
	if fn == nil {
		return
	}
	fn(&InsertEvent{Table: ins.t.target.fullName(), Shard: w.sh.name, Replica: rep.addr,
		Rows: ins.rows, Bytes: ins.bytes, Attempt: attempt, Start: start, End: end, Err: err,
		Deduplicated: duplicated, Segment: ins.segment(), parts: ins.parts})
}

// connect makes sure the worker's connection goes to rep.
func (w *worker) connect(ctx context.Context, rep *replica) error {
	if w.conn != nil && w.connRep == rep {
		return nil
	}
	w.closeConn()
	c, err := w.s.tr.open(ctx, rep)
	if err != nil {
		return err
	}
	w.conn, w.connRep = c, rep
	return nil
}

// hasOffsetRanges reports whether a part's chunk has acks and all of them
// know their offsets.
func hasOffsetRanges(p *part) bool {
	for _, a := range p.chunk.acks {
		if _, ok := a.(OffsetRange); !ok {
			return false
		}
	}
	return len(p.chunk.acks) > 0
}

// OffsetRange is implemented by acks that know which Kafka records their
// rows come from. When every ack of an insert implements it, and the server
// knows insert_deduplication_token (not 18.16), the sink sends a token
// derived from those ranges and the rows, the same on every retry, so that
// Replicated tables drop an insert that had in fact succeeded before the
// retry.
type OffsetRange interface {
	// Range returns the topic, partition and the first and last offsets
	// (inclusive) of the records the ack stands for.
	Range() (topic string, partition int32, first, last int64)
}

// dedupToken derives an insert's deduplication token from the target, the
// parts' offset ranges and their contents. It returns "" unless every part
// carries acks and all of them implement OffsetRange: without offsets the
// server's own content hash is no worse. The contents are part of the
// token because a batch's rows may be split over several chunks. Each of
// a column's buffers is hashed where it is, with no copy.
func (w *worker) dedupToken(t *Table, parts []*part) string {
	h := sha256.New()
	h.Write([]byte("sluice-dedup-v3\x00" + t.target.fullName() + "\x00"))
	var num [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(num[:], v)
		h.Write(num[:])
	}
	stream := func(b []byte) {
		sum := xxh3.Hash128(b)
		put(uint64(len(b)))
		put(sum.Lo)
		put(sum.Hi)
	}
	for _, p := range parts {
		if len(p.chunk.acks) == 0 {
			return ""
		}
		for _, a := range p.chunk.acks {
			r, ok := a.(OffsetRange)
			if !ok {
				return ""
			}
			topic, partition, first, last := r.Range()
			h.Write([]byte(topic + "\x00"))
			put(uint64(partition))
			put(uint64(first))
			put(uint64(last))
		}
		// The columns as decoded: encodeNative would also build the
		// LowCardinality dictionaries, a lookup per value.
		put(uint64(p.sub.rows))
		for _, c := range p.sub.cols {
			c.streams(stream)
		}
	}
	return "sluice-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// segmentToken is the deduplication token of an exactly-once segment's
// insert into t: derived from the segment (partition, offsets, module) and
// the table it goes to, never from the rows, so that every replay of the
// segment carries it.
func segmentToken(t *Table, segment string) string {
	h := sha256.Sum256([]byte("sluice-segment-v1\x00" + t.target.fullName() + "\x00" + segment))
	return "sluice-seg-" + hex.EncodeToString(h[:16])
}

// backoff is exponential backoff with full jitter.
type backoff struct {
	min, max time.Duration
	attempt  int
}

func (b *backoff) next(rnd func(int64) int64) time.Duration {
	d := b.min << b.attempt
	if d > b.max || d <= 0 {
		d = b.max
	} else {
		b.attempt++
	}
	return d/2 + time.Duration(rnd(int64(d/2)+1))
}
