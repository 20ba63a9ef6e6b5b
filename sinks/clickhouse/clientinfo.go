package clickhouse

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
)

// A server that speaks a revision from 54405 (the first that carries
// LowCardinality columns as such) to 54419, as 18.16 does (54412), reads a
// query's client info from revision 54032 on; ch-go writes it only from
// 54420 on. Speaking such a revision through ch-go alone, the server reads
// the settings where the client info should be and fails the query with
// UNKNOWN_SETTING. clientInfoConn mends that under ch-go: armed before
// each query, it puts the client info, encoded for the revision, into the
// query packet of the first write after, right after the query's ID. So
// sluice can send LowCardinality columns to such a server in their own
// serialization, which spares the server hashing every value into a
// dictionary of its own.

// clientInfoRevision reports whether sluice speaks a server's revision
// through clientInfoConn.
func clientInfoRevision(rev int) bool { return rev >= lowCardinalityRevision && rev < modernRevision }

// clientInfoConn is a connection whose next query packet gets the client
// info ch-go leaves out at its revision.
type clientInfoConn struct {
	net.Conn
	revision int
	armed    atomic.Bool
	buf      []byte
}

// arm makes the next write hold a query packet, to which the client info is
// added.
func (c *clientInfoConn) arm() { c.armed.Store(true) }

func (c *clientInfoConn) Write(p []byte) (int, error) {
	// Most writes are an insert's blocks: a plain load passes them.
	if !c.armed.Load() || !c.armed.Swap(false) {
		return c.Conn.Write(p)
	}
	at, id, err := queryPacketID(p)
	if err != nil {
		_ = c.Conn.Close()
		return 0, err
	}
	info := proto.ClientInfo{
		Query:           proto.ClientQueryInitial,
		InitialQueryID:  id,
		InitialAddress:  c.Conn.LocalAddr().String(),
		Interface:       proto.InterfaceTCP,
		ClientName:      proto.Name + " " + clientName, // as ch-go names itself in its hello
		ProtocolVersion: c.revision,
	}
	b := proto.Buffer{Buf: append(c.buf[:0], p[:at]...)}
	info.EncodeAware(&b, c.revision)
	b.Buf = append(b.Buf, p[at:]...)
	c.buf = b.Buf
	if cap(c.buf) > maxArena {
		c.buf = nil
	}
	if _, err := c.Conn.Write(b.Buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// queryPacketID reads the start of a query packet (its code and the
// query's ID) and returns where the ID ends, and the ID.
func queryPacketID(p []byte) (int, string, error) {
	code, n := binary.Uvarint(p)
	if n <= 0 || proto.ClientCode(code) != proto.ClientCodeQuery {
		return 0, "", errors.New("sluice: the write after a query is armed does not start with a query packet")
	}
	size, m := binary.Uvarint(p[n:])
	if m <= 0 || size > uint64(len(p)-n-m) {
		return 0, "", errors.New("sluice: a query packet's ID is not whole in its first write")
	}
	at := n + m + int(size)
	return at, string(p[n+m : at]), nil
}

// clientInfoDialer dials for ch-go a connection wrapped in clientInfoConn,
// doing TLS itself when configured (ch-go takes only a *net.Dialer with
// TLS).
type clientInfoDialer struct {
	revision int
	tls      *tls.Config
	// timeout bounds the connection and the TLS handshake, as ch-go's
	// own dialer's does.
	timeout time.Duration
	conn    *clientInfoConn // the last dialled
}

func (d *clientInfoDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if d.tls != nil {
		tc := tls.Client(c, d.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		c = tc
	}
	d.conn = &clientInfoConn{Conn: c, revision: d.revision}
	return d.conn, nil
}

// client is a ch-go client and, at a revision that needs it, the
// connection that adds the client info to its queries.
type client struct {
	*ch.Client
	info     *clientInfoConn
	revision int // the revision spoken
}

// Do runs a query, arming the connection first when it needs the client
// info added.
func (c *client) Do(ctx context.Context, q ch.Query) error {
	if c.info != nil {
		c.info.arm()
		// A query that failed before its packet went leaves nothing armed.
		defer c.info.armed.Store(false)
	}
	return c.Client.Do(ctx, q)
}

// headerMismatchError is a column the server wants as another type than
// the one sluice encoded.
type headerMismatchError struct {
	column, sent, server string
}

func (e *headerMismatchError) Error() string {
	return fmt.Sprintf("column %s: sluice encoded it as %s, the server wants %s", e.column, e.sent, e.server)
}

// checkHeader makes the columns of an insert's first block check the
// server's header before ch-go sends them: ch-go hands each column that
// takes it (proto.Inferable) the type the server wants for it, and a
// column sent as another type fails the insert with a
// headerMismatchError before any block goes. The checks stand in input's
// elements until the insert puts its next block there.
// On a mismatch it closes conn, on which ch-go would otherwise wait for
// the server's answer to an insert the server waits for the blocks of.
// The mismatch is also kept in *seen: ch-go may report the closed
// connection instead.
func checkHeader(input proto.Input, conn net.Conn, seen **headerMismatchError) {
	for i := range input {
		input[i].Data = &headerCheck{ColInput: input[i].Data, name: input[i].Name, conn: conn, seen: seen}
	}
}

// headerCheck is a column of an insert's first block that checks the
// server's type for it, and encodes as the column it holds.
type headerCheck struct {
	proto.ColInput
	name string
	conn net.Conn
	seen **headerMismatchError
}

func (h *headerCheck) Infer(t proto.ColumnType) error {
	if sent := h.ColInput.Type(); sent != t {
		e := &headerMismatchError{column: h.name, sent: string(sent), server: string(t)}
		*h.seen = e
		_ = h.conn.Close()
		return e
	}
	return nil
}

func (h *headerCheck) Prepare() error {
	if p, ok := h.ColInput.(proto.Preparable); ok {
		return p.Prepare()
	}
	return nil
}

func (h *headerCheck) EncodeState(b *proto.Buffer) {
	if e, ok := h.ColInput.(proto.StateEncoder); ok {
		e.EncodeState(b)
	}
}
