package clickhouse

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"
)

// recordConn is a net.Conn that keeps what is written to it.
type recordConn struct {
	net.Conn
	buf    bytes.Buffer
	closed bool
}

func (c *recordConn) Write(p []byte) (int, error) { return c.buf.Write(p) }
func (c *recordConn) Close() error                { c.closed = true; return nil }
func (c *recordConn) LocalAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
}

// TestClientInfoGoesIntoTheArmedQuery checks that an armed connection puts
// the client info, encoded for its revision, after the query's ID in the
// packet ch-go writes at that revision (which has none), leaves the rest of
// the write as it was, and passes unarmed writes through.
func TestClientInfoGoesIntoTheArmedQuery(t *testing.T) {
	const rev = 54412
	q := proto.Query{ID: "q-1", Body: "INSERT INTO t (a) VALUES", Stage: proto.StageComplete,
		Compression: proto.CompressionEnabled}
	var packet proto.Buffer
	q.EncodeAware(&packet, rev)
	tail := []byte{2, 0, 1, 2, 3} // a block after the query, in the same write

	rec := &recordConn{}
	c := &clientInfoConn{Conn: rec, revision: rev}
	if _, err := c.Write([]byte{4}); err != nil { // a ping, unarmed
		t.Fatal(err)
	}
	c.arm()
	n, err := c.Write(append(append([]byte(nil), packet.Buf...), tail...))
	if err != nil || n != len(packet.Buf)+len(tail) {
		t.Fatalf("armed write: %d, %v", n, err)
	}
	if _, err := c.Write([]byte{4}); err != nil {
		t.Fatal(err)
	}

	r := proto.NewReader(bytes.NewReader(rec.buf.Bytes()))
	mustU := func(want uint64) {
		t.Helper()
		if v, err := r.UVarInt(); err != nil || v != want {
			t.Fatalf("got %d, %v; want %d", v, err, want)
		}
	}
	mustU(4)
	mustU(uint64(proto.ClientCodeQuery))
	if id, err := r.Str(); err != nil || id != "q-1" {
		t.Fatalf("query ID %q, %v", id, err)
	}
	var info proto.ClientInfo
	if err := info.DecodeAware(r, rev); err != nil {
		t.Fatal(err)
	}
	if info.Query != proto.ClientQueryInitial || info.InitialQueryID != "q-1" || info.ClientName != proto.Name+" "+clientName ||
		info.ProtocolVersion != rev || info.Interface != proto.InterfaceTCP || info.InitialAddress != "127.0.0.1:40000" {
		t.Errorf("client info %+v", info)
	}
	// What follows the ID in ch-go's packet follows the client info.
	at, _, err := queryPacketID(packet.Buf)
	if err != nil {
		t.Fatal(err)
	}
	rest := make([]byte, len(packet.Buf)-at+len(tail)+1)
	if _, err := r.Read(rest); err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte(nil), packet.Buf[at:]...), tail...), 4)
	if !bytes.Equal(rest, want) {
		t.Errorf("after the client info:\n got % x\nwant % x", rest, want)
	}
}

// TestClientInfoArmedWriteMustBeAQuery checks that an armed connection
// refuses, and closes on, a write that does not start with a whole query
// packet's ID, rather than sending the server a packet it would misread.
func TestClientInfoArmedWriteMustBeAQuery(t *testing.T) {
	for name, p := range map[string][]byte{
		"ping":      {4},
		"empty":     {},
		"short ID":  {1, 10, 'a', 'b'},
		"bad count": {1, 0x80},
	} {
		rec := &recordConn{}
		c := &clientInfoConn{Conn: rec, revision: 54412}
		c.arm()
		if _, err := c.Write(p); err == nil || !rec.closed || rec.buf.Len() != 0 {
			t.Errorf("%s: err %v, closed %v, %d bytes written", name, err, rec.closed, rec.buf.Len())
		}
	}
}

// TestHeaderCheckRefusesAnotherType checks that a column the server wants
// as another type fails before it is encoded, keeps the mismatch and closes
// the connection, and that a column of the server's type passes.
func TestHeaderCheckRefusesAnotherType(t *testing.T) {
	rec := &recordConn{}
	var seen *headerMismatchError
	input := proto.Input{{Name: "v", Data: new(proto.ColInt32)}, {Name: "s", Data: new(proto.ColStr)}}
	checkHeader(input, rec, &seen)
	if err := input[1].Data.(proto.Inferable).Infer("String"); err != nil || rec.closed || seen != nil {
		t.Fatalf("String for String: %v, closed %v", err, rec.closed)
	}
	err := input[0].Data.(proto.Inferable).Infer("Int64")
	var m *headerMismatchError
	if !errors.As(err, &m) || seen != m || !rec.closed {
		t.Fatalf("Int32 for Int64: %v, kept %v, closed %v", err, seen, rec.closed)
	}
	if !strings.Contains(err.Error(), "column v: sluice encoded it as Int32, the server wants Int64") {
		t.Errorf("error %q", err)
	}
}

// TestClientInfoDialerBoundsTLSHandshake checks that the dialer gives up
// on a server that accepts the connection and never answers the TLS
// handshake, within its dial timeout, as ch-go's own dialer does.
func TestClientInfoDialerBoundsTLSHandshake(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent
		}
	}()
	d := &clientInfoDialer{revision: 54412, tls: &tls.Config{ServerName: "127.0.0.1"}, timeout: 100 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a TLS handshake nobody answered succeeded")
		}
	case <-time.After(time.Minute):
		t.Fatal("the dialer still waits on a TLS handshake nobody answers, after a minute with a 100 ms dial timeout")
	}
}
