package clickhouse

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Ack is told when the rows it stands for are durably inserted. An Ack may
// also implement OffsetRange.
type Ack interface {
	// Done is called once per chunk that carried the ack's rows, after the
	// inserts holding that chunk's rows (one per shard with routing shards)
	// all succeeded.
	Done()
}

// RecordTime is an Ack that knows when its oldest record was written (its
// Kafka timestamp): an insert whose rows are that far behind lingers longer
// (Config.BacklogInsertLinger).
type RecordTime interface {
	// OldestRecord is the oldest record's time; zero when unknown.
	OldestRecord() time.Time
}

// Chunk is a sealed block on its way to the server, with the acks of the
// records whose rows it holds. Make it with NewChunk; the sink owns it and
// its block once it is sent.
type Chunk struct {
	block *Block
	acks  []Ack

	// segment, when set, names the exactly-once segment the chunk's rows
	// come from (see NewSegmentChunk).
	segment string

	// pending counts the chunk's parts not yet inserted.
	pending atomic.Int32
	// sealed is when Send was called, for ChunkTiming.
	sealed time.Time
}

// NewChunk seals block with the acks of the records whose rows it holds.
func NewChunk(block *Block, acks []Ack) *Chunk { return &Chunk{block: block, acks: acks} }

// NewSegmentChunk is NewChunk for the rows of one exactly-once segment:
// a run of one partition's records whose rows for each table must land in
// one insert of their own, however often the insert is tried or replayed.
// Each of the chunk's parts is inserted alone, never merged with another
// chunk's, with an insert_deduplication_token derived from segment and the
// table only: a replay of the segment that rebuilds its rows, even rows that
// differ, carries the same token, and the server drops it when the first
// insert landed.
func NewSegmentChunk(block *Block, acks []Ack, segment string) *Chunk {
	return &Chunk{block: block, acks: acks, segment: segment}
}

// Segment is the chunk's exactly-once segment, "" for none.
func (c *Chunk) Segment() string { return c.segment }

// Block is the chunk's rows.
func (c *Chunk) Block() *Block { return c.block }

// Acks are the acks the chunk releases once its rows are inserted.
func (c *Chunk) Acks() []Ack { return c.acks }

// ErrClosed is returned by Send and Table after Close.
var ErrClosed = errors.New("clickhouse sink closed")

// Sink writes chunks to ClickHouse. Create it with New, start its workers
// with Run, send chunks with Send, and end it with Close.
type Sink struct {
	cfg Config
	// backlogGap: past insert_linger, a backlog insert ends once no chunk
	// has come for this long (insert_linger; tests set it).
	backlogGap time.Duration
	log        *slog.Logger
	tr         transport
	endpoint   *replica // addr / http_addr: schema and cluster discovery
	single     *shard   // routing endpoint and distributed: the one shard

	// mu guards shards, clusters and closed; Send and Stats take it
	// only briefly.
	mu       sync.Mutex
	shards   []*shard
	clusters map[string]*cluster
	closed   bool
	closing  chan struct{}
	added    chan struct{} // a shard was added while Run may be running
	// senders counts Sends in progress; Add only under mu while !closed.
	senders sync.WaitGroup

	// parked holds the inserts of tables that failed permanently, per
	// table and shard, each retried by its own goroutine (see park);
	// guarded by mu.
	parked     map[parkKey]*parkedInserts
	background sync.WaitGroup // parked-insert retriers; Run waits for them
	runCtx     context.Context

	tablesMu  sync.Mutex // serializes discovery
	tables    map[string]*Table
	tableList []*Table // guarded by mu, for Stats
	pools     sync.Map // *Table → *sync.Pool of emptied blocks

	insertedRows   atomic.Int64
	insertedChunks atomic.Int64
	inserts        atomic.Int64
	insertErrors   atomic.Int64
	sortedInserts  atomic.Int64
	breakerOpens   atomic.Int64
	inflightParts  atomic.Int64 // queued or being inserted

	onInsert func(*InsertEvent)
	onChunk  func(*Chunk, ChunkTiming)
	// onSchemaChange is told the table's name when an insert failed as if
	// the table's schema had changed.
	onSchemaChange func(table string)
}

// New validates cfg and connects to the server, retrying with backoff until
// cfg.ConnectTimeout; an unreachable server is an error that says so.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Sink{
		cfg:      cfg,
		log:      log,
		clusters: map[string]*cluster{},
		closing:  make(chan struct{}),
		added:    make(chan struct{}, 1),
		tables:   map[string]*Table{},
		parked:   map[parkKey]*parkedInserts{},
	}
	tlsConf, err := s.tlsConfig()
	if err != nil {
		return nil, err
	}
	switch s.cfg.Transport {
	case TransportNative:
		s.tr = &nativeTransport{cfg: &s.cfg, tls: tlsConf, log: log}
	case TransportHTTP:
		if s.tr, err = newHTTPTransport(&s.cfg, tlsConf); err != nil {
			return nil, err
		}
	}
	if s.endpoint, err = s.tr.newReplica(""); err != nil {
		return nil, err
	}
	version, err := s.queryRetry(ctx, s.endpoint, "SELECT version()")
	if err != nil {
		s.tr.close()
		return nil, err
	}
	attrs := []any{"transport", s.cfg.Transport, "addr", s.endpoint.addr, "routing", s.cfg.Routing}
	if len(version) == 1 && len(version[0]) == 1 {
		attrs = append(attrs, "version", version[0][0])
	}
	if s.endpoint.dialer != nil {
		hello, rev := s.endpoint.dialer.Server()
		attrs = append(attrs, "revision", hello.Revision, "protocol", rev)
	}
	log.Info("connected to ClickHouse", attrs...)
	if s.cfg.Routing != RoutingShards {
		s.single = s.newShard("", 0, 1, []*replica{s.endpoint})
		s.shards = append(s.shards, s.single)
		if s.cfg.DistributedSync && !s.tr.canSendSettings(s.endpoint) {
			log.Warn("clickhouse.distributed_sync cannot be sent to this server over the native protocol (per-query settings need revision 54429); set insert_distributed_sync=1 in the user's profile")
		}
	}
	return s, nil
}

func (s *Sink) tlsConfig() (*tls.Config, error) {
	if !s.cfg.TLS && !strings.HasPrefix(s.cfg.HTTPAddr, "https://") {
		return nil, nil
	}
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         s.cfg.TLSServerName,
		InsecureSkipVerify: s.cfg.TLSInsecureSkipVerify, //nolint:gosec // opt-in
	}
	if s.cfg.TLSCAFile != "" {
		pem, err := os.ReadFile(s.cfg.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("clickhouse.tls_ca_file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("clickhouse.tls_ca_file: %s holds no PEM certificate", s.cfg.TLSCAFile)
		}
	}
	return c, nil
}

// queryRetry runs a metadata query, retrying retryable errors with backoff
// until cfg.ConnectTimeout.
func (s *Sink) queryRetry(ctx context.Context, rep *replica, sql string) ([][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	b := backoff{min: s.cfg.RetryMin, max: 2 * time.Second}
	for {
		rows, err := s.tr.query(ctx, rep, sql)
		if err == nil {
			return rows, nil
		}
		if err := classify(err); errors.As(err, new(*PermanentError)) {
			return nil, fmt.Errorf("clickhouse %s: %w", rep.addr, err)
		}
		wait := b.next(rand.Int64N)
		s.log.Warn("ClickHouse not reachable, retrying", "addr", rep.addr, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("clickhouse %s unreachable after %s: %w", rep.addr, s.cfg.ConnectTimeout, err)
		case <-time.After(wait):
		}
	}
}

// Settings a replica may or may not know (replica.settings).
const (
	settingsAsked      = 1 << iota // the server has answered
	settingDedupToken              // insert_deduplication_token
	settingAsyncInsert             // async_insert
	// input_format_native_allow_types_conversion: the Native format
	// converts a column to the table's type (e.g. T to LowCardinality(T)).
	settingNativeConversion
)

// serverSettings reports which of the per-insert settings sluice may send
// rep knows, asking the server once (system.settings); 0 when settings
// cannot reach it (18.16 over native) or the question failed, which is
// asked again on the next insert.
func (s *Sink) serverSettings(ctx context.Context, rep *replica) int32 {
	v, _ := s.askSettings(ctx, rep)
	return v
}

// askSettings is serverSettings with the error of a question that failed,
// for callers that must tell "the server does not know it" from "the
// server could not be asked".
func (s *Sink) askSettings(ctx context.Context, rep *replica) (int32, error) {
	if !s.tr.canSendSettings(rep) {
		return 0, nil
	}
	if v := rep.settings.Load(); v&settingsAsked != 0 {
		return v, nil
	}
	rows, err := s.tr.query(ctx, rep, "SELECT name FROM system.settings WHERE name IN "+
		"('insert_deduplication_token', 'async_insert', 'input_format_native_allow_types_conversion')")
	if err != nil {
		return 0, err
	}
	v := int32(settingsAsked)
	for _, r := range rows {
		switch {
		case len(r) != 1:
		case r[0] == "insert_deduplication_token":
			v |= settingDedupToken
		case r[0] == "async_insert":
			v |= settingAsyncInsert
		case r[0] == "input_format_native_allow_types_conversion":
			v |= settingNativeConversion
		}
	}
	rep.settings.Store(v)
	return v, nil
}

// dedupSupported reports whether rep takes insert_deduplication_token and
// dedup_token is not off.
func (s *Sink) dedupSupported(ctx context.Context, rep *replica) bool {
	return s.cfg.DedupToken != "off" && s.serverSettings(ctx, rep)&settingDedupToken != 0
}

func (s *Sink) newShard(name string, num, weight int, replicas []*replica) *shard {
	sh := &shard{name: name, num: num, weight: weight, replicas: replicas,
		queue: make(chan *part, s.cfg.QueueCapacity), collect: make(chan struct{}, 1)}
	sh.collect <- struct{}{}
	return sh
}

// addShards registers new shards, whose workers Run starts.
func (s *Sink) addShards(shards []*shard) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.shards = append(s.shards, shards...)
	select {
	case s.added <- struct{}{}:
	default:
	}
	return nil
}

// Config returns the sink's configuration with defaults applied.
func (s *Sink) Config() Config { return s.cfg }

// NewBlock returns an empty block for a table returned by Table, reusing
// the buffers of blocks already inserted.
func (s *Sink) NewBlock(t *Table) *Block {
	if p, ok := s.pools.Load(t); ok {
		return p.(*sync.Pool).Get().(*Block)
	}
	return t.NewBlock()
}

func (s *Sink) releaseBlock(b *Block) {
	if p, ok := s.pools.Load(b.table); ok {
		b.table.recordShape(b)
		b.Reset()
		p.(*sync.Pool).Put(b)
	}
}

// Send queues a sealed chunk: with routing shards, each of its non-empty
// parts on its shard's queue. It waits while a queue it needs is full,
// which is how a slow server pushes back on the pipeline, and returns ctx's
// error if ctx ends first (parts already queued are still inserted, but the
// chunk is never acked). After Close, or when Close is called while it
// waits, it returns ErrClosed, and the chunk is never acked.
func (s *Sink) Send(ctx context.Context, c *Chunk) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.senders.Add(1)
	s.mu.Unlock()
	defer s.senders.Done()
	c.sealed = time.Now()
	b := c.block
	if b.Rows() == 0 {
		for _, a := range c.acks {
			a.Done()
		}
		s.releaseBlock(b)
		return nil
	}
	// Every part and its queue are picked before the first is queued: once
	// the last part is inserted the block goes back to the pool, where the
	// next Send may take and fill it while this one still looked at it.
	var (
		oneQueue [1]chan *part
		onePart  [1]*part
	)
	queues, parts := oneQueue[:0], onePart[:0]
	for i, p := range b.parts {
		if p.rows > 0 {
			if b.table.shards[i] == nil {
				return fmt.Errorf("table %s was not returned by this sink's Table", b.table.FullName())
			}
			queues = append(queues, b.table.shards[i].queue)
			parts = append(parts, &part{chunk: c, sub: p})
		}
	}
	c.pending.Store(int32(len(parts)))
	for i, p := range parts {
		s.inflightParts.Add(1)
		select {
		case queues[i] <- p:
		case <-ctx.Done():
			s.inflightParts.Add(-1)
			return ctx.Err()
		case <-s.closing:
			s.inflightParts.Add(-1)
			return ErrClosed
		}
	}
	return nil
}

// partDone acks a chunk once all of its parts are inserted; inserted is
// when the server acknowledged the insert that carried p.
func (s *Sink) partDone(p *part, inserted time.Time) {
	s.inflightParts.Add(-1)
	if p.chunk.pending.Add(-1) != 0 {
		return
	}
	if s.onChunk != nil {
		s.onChunk(p.chunk, ChunkTiming{Sealed: p.chunk.sealed, Taken: p.taken, Inserted: inserted})
	}
	for _, a := range p.chunk.acks {
		a.Done()
	}
	s.insertedChunks.Add(1)
	s.releaseBlock(p.chunk.block)
}

func (s *Sink) shardList() []*shard {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.shards)
}

// QueueDepth is the number of queued chunk parts, over all shard queues
// (with one shard: the number of queued chunks).
func (s *Sink) QueueDepth() int {
	n := 0
	for _, sh := range s.shardList() {
		n += len(sh.queue)
	}
	return n
}

// QueueFull reports whether some shard queue is full, so that a Send
// needing it would wait.
func (s *Sink) QueueFull() bool {
	for _, sh := range s.shardList() {
		if len(sh.queue) == cap(sh.queue) {
			return true
		}
	}
	return false
}

// Close tells the workers that no more chunks come: a Send waiting for
// room returns ErrClosed, the workers insert what is queued, and Run
// returns. The queues themselves stay open, so that a Send racing with
// Close can never panic.
func (s *Sink) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	close(s.closing)
}

// Stats are the sink's counters.
type Stats struct {
	InsertedRows, InsertedChunks, Inserts, InsertErrors int64
	// SortedInserts counts inserts whose rows sluice put in the table's
	// key order (sort_rows).
	SortedInserts int64
	// QueueDepth is QueueDepth().
	QueueDepth int
	// BreakerOpens counts replica circuit breakers opening.
	BreakerOpens int64
	// Shards has one entry per shard queue.
	Shards []ShardStats
	// Tables has one entry per table in use, sorted by name.
	Tables []TableStats
}

// ShardStats describe one shard queue.
type ShardStats struct {
	// Name is "" for the single shard of routing endpoint/distributed,
	// else "shard N of cluster C".
	Name         string
	QueueDepth   int
	InsertedRows int64
	// Replica is where the shard's inserts go now; OpenBreakers counts its
	// replicas kept out by an open circuit breaker.
	Replica      string
	OpenBreakers int
	// Failing is true while the shard's last insert attempt failed.
	Failing bool
}

// Stats returns the sink's counters.
func (s *Sink) Stats() Stats {
	st := Stats{
		InsertedRows: s.insertedRows.Load(), InsertedChunks: s.insertedChunks.Load(),
		Inserts: s.inserts.Load(), InsertErrors: s.insertErrors.Load(), SortedInserts: s.sortedInserts.Load(),
		BreakerOpens: s.breakerOpens.Load(),
	}
	now := time.Now()
	for _, sh := range s.shardList() {
		ss := ShardStats{Name: sh.name, QueueDepth: len(sh.queue), InsertedRows: sh.insertedRows.Load(),
			Replica: sh.current().addr, Failing: sh.failing.Load() != nil}
		for _, r := range sh.replicas {
			if r.brk.isOpen(now) {
				ss.OpenBreakers++
			}
		}
		st.QueueDepth += ss.QueueDepth
		st.Shards = append(st.Shards, ss)
	}
	s.mu.Lock()
	for _, t := range s.tableList {
		st.Tables = append(st.Tables, TableStats{Name: t.FullName(), InsertedRows: t.stats.insertedRows.Load(),
			DeduplicatedBlocks: t.stats.deduplicated.Load()})
	}
	s.mu.Unlock()
	slices.SortFunc(st.Tables, func(a, b TableStats) int { return strings.Compare(a.Name, b.Name) })
	return st
}

// Run runs every shard's workers until Close has been called and the
// queues are drained, or ctx ends. An insert that fails permanently does
// not stop Run: it is parked with its table's other failed inserts and
// retried every PermanentRetryInterval (see Failing), while every other
// table flows. Shards discovered by Table while Run runs get their workers
// at once. Cancelling ctx abandons queued and parked chunks without acking
// them. Run returns an error naming what was not inserted.
func (s *Sink) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.mu.Lock()
	s.runCtx = ctx
	s.mu.Unlock()
	defer s.background.Wait()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		started  = map[*shard]bool{}
	)
	start := func() {
		for _, sh := range s.shardList() {
			if started[sh] {
				continue
			}
			started[sh] = true
			for range s.cfg.InsertsPerShard {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w := &worker{s: s, sh: sh}
					if err := w.run(ctx); err != nil {
						errOnce.Do(func() { firstErr = err; cancel(err) })
					}
				}()
			}
		}
	}
	start()
wait:
	for {
		select {
		case <-s.added:
			start()
		case <-s.closing:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	start()
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed && s.inflightParts.Load() == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if msg := s.parkedFailing(); msg != "" {
		return fmt.Errorf("clickhouse sink stopped with %d chunk parts not inserted: %s", s.inflightParts.Load(), msg)
	}
	return fmt.Errorf("clickhouse sink stopped with %d chunk parts not inserted", s.inflightParts.Load())
}
