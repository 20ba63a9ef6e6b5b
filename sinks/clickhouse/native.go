package clickhouse

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
)

// compatRevision is the protocol revision sluice speaks to servers older than
// modernRevision. ch-go encodes the client-info part of a query the way
// servers from revision 54420 on expect; older servers (18.16 is 54412) read
// it differently and fail with UNKNOWN_SETTING. At 54031 no client info and no
// per-query settings are sent, which those servers accept.
const (
	compatRevision = 54031
	modernRevision = 54420
	// lowCardinalityRevision is the first that carries LowCardinality
	// columns as such (DBMS_MIN_REVISION_WITH_LOW_CARDINALITY_TYPE).
	lowCardinalityRevision = 54405
)

// clientName is the name sluice gives itself in the protocol's hello.
const clientName = "sluice"

// nativeTransport inserts over ClickHouse's native protocol with ch-go.
type nativeTransport struct {
	cfg *Config
	tls *tls.Config // nil without TLS; cloned per server name
	log *slog.Logger
}

func (nt *nativeTransport) newReplica(addr string) (*replica, error) {
	if addr == "" {
		addr = nt.cfg.Addr
	}
	return &replica{addr: addr, dialer: &dialer{cfg: nt.cfg, tls: nt.tls, addr: addr}}, nil
}

func (nt *nativeTransport) open(ctx context.Context, rep *replica) (conn, error) {
	c, err := rep.dialer.dial(ctx)
	if err != nil {
		return nil, err
	}
	return &nativeConn{c: c, rep: rep, log: nt.log, compressed: compressionFor(nt.cfg.Compression, rep.addr) != "none"}, nil
}

func (nt *nativeTransport) canSendSettings(rep *replica) bool {
	_, rev := rep.dialer.Server()
	return proto.FeatureSettingsSerializedAsStrings.In(rev)
}

// query runs a statement whose result columns are all String.
func (nt *nativeTransport) query(ctx context.Context, rep *replica, sql string) ([][]string, error) {
	c, err := rep.dialer.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var (
		res  proto.Results
		rows [][]string
	)
	q := ch.Query{
		Body:   sql,
		Result: res.Auto(),
		OnResult: func(ctx context.Context, b proto.Block) error {
			cols := make([]*proto.ColStr, len(res))
			for i, r := range res {
				s, ok := r.Data.(*proto.ColStr)
				if !ok {
					return fmt.Errorf("%s: column %s is %s, want String", sql, r.Name, r.Data.Type())
				}
				cols[i] = s
			}
			for i := 0; i < b.Rows; i++ {
				row := make([]string, len(cols))
				for j, c := range cols {
					row[j] = c.Row(i)
				}
				rows = append(rows, row)
			}
			return nil
		},
	}
	if err := c.Do(ctx, q); err != nil {
		return nil, err
	}
	return rows, nil
}

func (nt *nativeTransport) close() {}

// nativeConn is one worker's connection to one replica, kept across inserts.
type nativeConn struct {
	c   *client
	rep *replica
	log *slog.Logger
	// compressed: blocks are compressed, so ch-go encodes each into a
	// buffer of its own before sending it.
	compressed bool
	// arena holds what a joined block computes (array offsets,
	// LowCardinality granules) until the block is sent.
	arena proto.Buffer
	// blocks is how many blocks the last insert sent.
	blocks int
	// mismatch is the column of the last insert the server wanted as
	// another type (checkHeader), if any; reopen: c was closed by that
	// check, and is dialled again before the next insert.
	mismatch *headerMismatchError
	reopen   bool
	// compat, at compatRevision, carries the inserts of plans a server
	// that does not convert columns wanted another type for
	// (insertPlan.converted).
	compat *client
}

// maxArena bounds what a joined block computes into its connection's
// arena, and what the arena keeps between inserts.
const maxArena = 16 << 20

// maxCompressedBlock bounds a joined block on a compressed connection:
// ch-go encodes and compresses each block in memory, and keeps its buffer
// at the size of the largest. A plain connection sends the parts' buffers
// as they are.
const maxCompressedBlock = 8 << 20

// blockJoiner hands out an insert's parts as blocks, one at a time, for
// ch-go sends a block before it asks for the next: each block takes parts
// while what they compute into the arena (their LowCardinality granules,
// encoded as each part joins, and their array offsets) stays within
// maxArena, and on a compressed connection while they hold at most
// maxCompressedBlock bytes, and joins their columns. So the arena holds
// one block's worth at a time, whatever the rows, and a table's usual
// insert goes as one block.
type blockJoiner struct {
	nc      *nativeConn
	plan    *insertPlan
	columns func(*subBlock, proto.Input)
	parts   []*part // not sent yet
}

// next returns the next block's input, nil once every part has gone. It
// takes back the arena first: the block before it has been sent.
func (j *blockJoiner) next() proto.Input {
	nc := j.nc
	nc.arena.Buf = nc.arena.Buf[:0]
	var inputs []proto.Input
	size, offsets := 0, 0
	for _, p := range j.parts {
		if len(inputs) > 0 && nc.compressed && size+p.sub.size() > maxCompressedBlock {
			break
		}
		before := len(nc.arena.Buf)
		in := j.plan.input(p.sub)
		j.columns(p.sub, in)
		n := 0
		for i := range in {
			in[i].Data = prepare(in[i].Data, &nc.arena)
			n += offsetBytes(in[i].Data)
		}
		if len(inputs) > 0 && len(nc.arena.Buf)+offsets+n > maxArena {
			// Its granules go again with the next block.
			nc.arena.Buf = nc.arena.Buf[:before]
			break
		}
		inputs = append(inputs, in)
		size, offsets = size+p.sub.size(), offsets+n
	}
	if len(inputs) == 0 {
		return nil
	}
	joined, ok := joinInputs(inputs, &nc.arena)
	if !ok {
		// A column of these parts cannot be joined: the first part goes
		// alone.
		j.parts = j.parts[1:]
		return inputs[0]
	}
	j.parts = j.parts[len(inputs):]
	return joined
}

// joinInputs joins the same columns of several parts into one block's
// input; false when a column's parts are not of one joinable kind.
func joinInputs(inputs []proto.Input, arena *proto.Buffer) (proto.Input, bool) {
	if len(inputs) == 1 {
		return inputs[0], true
	}
	joined := make(proto.Input, len(inputs[0]))
	for i := range joined {
		cols := make([]proto.ColInput, len(inputs))
		rows := 0
		for j := range inputs {
			cols[j] = inputs[j][i].Data
			rows += cols[j].Rows()
		}
		if !joinable(cols) {
			return nil, false
		}
		jc := joinedColumn{parts: cols, rows: rows, arena: arena}
		var data proto.ColInput = &jc
		if _, ok := cols[0].(proto.StateEncoder); ok {
			data = &joinedLowCardinality{jc}
		}
		joined[i] = proto.InputColumn{Name: inputs[0][i].Name, Data: data}
	}
	return joined, true
}

func (nc *nativeConn) close() {
	_ = nc.c.Close()
	if nc.compat != nil {
		_ = nc.compat.Close()
	}
}

// emptyColumn has no rows; it ends a streamed insert.
type emptyColumn struct{}

func (emptyColumn) Type() proto.ColumnType     { return proto.ColumnTypeString }
func (emptyColumn) Rows() int                  { return 0 }
func (emptyColumn) EncodeColumn(*proto.Buffer) {}
func (emptyColumn) WriteColumn(*proto.Writer)  {}
func (emptyColumn) Reset()                     {}

// insert sends the parts as one INSERT. When the insert's parts are all at
// hand they go as few blocks as the connection allows (blockJoiner); a
// streaming insert sends a block per part, ch-go asking src for the next
// one as it goes, and the server squashes them.
func (nc *nativeConn) insert(ctx context.Context, plan *insertPlan, src *partSource, s insertSettings) error {
	if nc.reopen {
		// The header check closed it; the insert before went at
		// compatRevision.
		c, err := nc.rep.dialer.dial(ctx)
		if err != nil {
			return err
		}
		nc.c, nc.reopen = c, false
	}
	if nc.c.IsClosed() {
		return errConnClosed
	}
	if nc.c.info != nil && plan.converted.Load() {
		c, err := nc.compatClient(ctx)
		if err != nil {
			return err
		}
		return nc.send(ctx, c, plan, src, s)
	}
	nc.mismatch = nil
	err := nc.send(ctx, nc.c, plan, src, s)
	mismatch := nc.mismatch
	if err == nil || mismatch == nil {
		return err
	}
	// The server wants a column as another type than the one sluice
	// encoded (the table changed, or a LowCardinality sluice sends as its
	// inner type): nothing was sent. At compatRevision the server converts
	// it, so the insert goes again from its first part over a connection
	// at that revision, as the plan's later inserts do; those of other
	// plans keep the server's revision.
	nc.reopen = true
	if !plan.converted.Swap(true) {
		nc.log.Info("the server wants a column as another type than sluice encoded; the table's inserts go at a protocol revision where the server converts",
			"table", plan.target.fullName(), "addr", nc.rep.addr, "revision", compatRevision, "err", mismatch)
	}
	c, derr := nc.compatClient(ctx)
	if derr != nil {
		return fmt.Errorf("%w; connecting at revision %d: %w", mismatch, compatRevision, derr)
	}
	src.i = 0
	return nc.send(ctx, c, plan, src, s)
}

// compatClient is the connection's second client, at compatRevision,
// dialled when first needed.
func (nc *nativeConn) compatClient(ctx context.Context) (*client, error) {
	if nc.compat != nil && !nc.compat.IsClosed() {
		return nc.compat, nil
	}
	c, err := nc.rep.dialer.dialAt(ctx, compatRevision)
	if err != nil {
		return nil, err
	}
	nc.compat = c
	return c, nil
}

// send sends the parts src hands out as one INSERT over c.
func (nc *nativeConn) send(ctx context.Context, c *client, plan *insertPlan, src *partSource, s insertSettings) (err error) {
	// From revision 54405 on, the server reads LowCardinality columns in
	// their own serialization: sluice sends LowCardinality(String) and
	// LowCardinality(Nullable(String)), alone or as an Array's elements, as
	// a dictionary of the part's distinct values and a key per value, which spares the server hashing
	// every value into a dictionary of its own and both sides compressing
	// the values row by row. Older revisions get the inner type, which
	// the server converts.
	lc := c.revision >= lowCardinalityRevision
	columns := func(sub *subBlock, input proto.Input) {
		if !lc {
			return
		}
		for i := range input {
			input[i].Data = sub.lowCardinality(plan, i, input[i].Data)
		}
	}
	q := ch.Query{Body: plan.target.insertSQL}
	if !src.stream {
		j := &blockJoiner{nc: nc, plan: plan, columns: columns, parts: src.ins.parts}
		blocks := j.next
		if e := src.sorted; e != nil && e.start(plan, src.ins, nc.compressed, lc) {
			blocks = e.next
			defer func() {
				if werr := e.finish(); err == nil && werr != nil {
					err = fmt.Errorf("writing a sorted column: %w", werr)
				}
			}()
		}
		input := slices.Clone(blocks())
		q.Input, nc.blocks = input, 1
		q.OnInput = func(context.Context) error {
			next := blocks()
			if next == nil {
				input[0].Data = emptyColumn{}
				return io.EOF
			}
			copy(input, next)
			nc.blocks++
			return nil
		}
		defer func() {
			nc.arena.Buf = nc.arena.Buf[:0]
			if cap(nc.arena.Buf) > maxArena {
				nc.arena.Buf = nil
			}
		}()
	} else {
		first := src.next(ctx).sub
		input := plan.input(first)
		columns(first, input)
		q.Input, nc.blocks = input, 1
		q.OnInput = func(ctx context.Context) error {
			p := src.next(ctx)
			if p == nil {
				input[0].Data = emptyColumn{}
				return io.EOF
			}
			nc.blocks++
			for i := range input {
				input[i].Data = plan.column(p.sub, i)
			}
			columns(p.sub, input)
			return nil
		}
	}
	if s.dedupToken != "" {
		q.Settings = append(q.Settings, ch.Setting{Key: "insert_deduplication_token", Value: s.dedupToken, Important: true})
	}
	if s.dedupViews {
		q.Settings = append(q.Settings, ch.Setting{Key: "deduplicate_blocks_in_dependent_materialized_views", Value: "1", Important: true})
	}
	if s.duplicated != nil {
		q.OnProfileEvents = func(_ context.Context, evs []ch.ProfileEvent) error {
			for _, e := range evs {
				if e.Name == "DuplicatedInsertedBlocks" && e.Type == proto.ProfileIncrement {
					*s.duplicated += e.Value
				}
			}
			return nil
		}
	}
	if s.distributedSync {
		q.Settings = append(q.Settings, ch.Setting{Key: "insert_distributed_sync", Value: "1", Important: true})
	}
	if s.asyncInsertOff {
		q.Settings = append(q.Settings, ch.Setting{Key: "async_insert", Value: "0", Important: true})
	}
	if c.info != nil {
		// The server reads each column as the type sluice names, not
		// converting it to the table's: a block of another type fails
		// the insert (and may take 18.16 down). ch-go hands the server's
		// header to the first block's columns before it sends any.
		checkHeader(q.Input, c.info, &nc.mismatch)
	}
	return c.Do(ctx, q)
}

var errConnClosed = fmt.Errorf("connection closed")

// dialer opens native connections to one server, remembering the protocol
// revision that works with it.
type dialer struct {
	cfg  *Config
	tls  *tls.Config
	addr string

	mu       sync.Mutex
	revision int // 0 until the first handshake
	server   proto.ServerHello
}

func (d *dialer) options(revision int) ch.Options {
	o := ch.Options{
		Address:         d.addr,
		Database:        d.cfg.Database,
		User:            d.cfg.User,
		Password:        d.cfg.Password,
		ClientName:      clientName,
		DialTimeout:     d.cfg.DialTimeout,
		ReadTimeout:     d.cfg.ReadTimeout,
		ProtocolVersion: revision,
	}
	switch compressionFor(d.cfg.Compression, d.addr) {
	case "lz4":
		o.Compression = ch.CompressionLZ4
	case "zstd":
		o.Compression = ch.CompressionZSTD
	case "none":
		o.Compression = ch.CompressionDisabled
	}
	if d.tls != nil {
		o.TLS = tlsFor(d.tls, hostOf(d.addr))
	}
	return o
}

// tlsFor returns base for server host: the configured server name, or host.
func tlsFor(base *tls.Config, host string) *tls.Config {
	c := base.Clone()
	if c.ServerName == "" {
		c.ServerName = host
	}
	return c
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

// dial opens a connection, negotiating the protocol revision on first use:
// the server's own from 54405 to 54419 (through clientInfoConn), else
// compatRevision below modernRevision, else ch-go's.
func (d *dialer) dial(ctx context.Context) (*client, error) {
	d.mu.Lock()
	rev := d.revision
	d.mu.Unlock()
	if rev != 0 {
		return d.dialAt(ctx, rev)
	}
	c, err := ch.Dial(ctx, d.options(0))
	if err != nil {
		return nil, err
	}
	hello := c.ServerInfo()
	rev = proto.Version
	cl := &client{Client: c, revision: rev}
	if hello.Revision < modernRevision {
		rev = compatRevision
		if clientInfoRevision(hello.Revision) {
			rev = hello.Revision
		}
		_ = c.Close()
		if cl, err = d.dialAt(ctx, rev); err != nil {
			return nil, err
		}
	}
	d.mu.Lock()
	d.revision, d.server = rev, hello
	d.mu.Unlock()
	return cl, nil
}

// dialAt opens a connection speaking revision rev.
func (d *dialer) dialAt(ctx context.Context, rev int) (*client, error) {
	o := d.options(rev)
	if !clientInfoRevision(rev) {
		c, err := ch.Dial(ctx, o)
		if err != nil {
			return nil, err
		}
		return &client{Client: c, revision: rev}, nil
	}
	cd := &clientInfoDialer{revision: rev, tls: o.TLS, timeout: o.DialTimeout}
	o.TLS, o.Dialer = nil, cd
	c, err := ch.Dial(ctx, o)
	if err != nil {
		if cd.conn != nil {
			_ = cd.conn.Close()
		}
		return nil, err
	}
	return &client{Client: c, info: cd.conn, revision: rev}, nil
}

// Server reports the server's hello and the revision sluice speaks with it.
func (d *dialer) Server() (proto.ServerHello, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.server, d.revision
}
