package clickhouse

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

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
)

// dialer opens native connections to one server, remembering the protocol
// revision that works with it.
type dialer struct {
	cfg  *Config
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
		ClientName:      "sluice",
		DialTimeout:     d.cfg.DialTimeout,
		ReadTimeout:     d.cfg.ReadTimeout,
		ProtocolVersion: revision,
	}
	switch d.cfg.Compression {
	case "lz4":
		o.Compression = ch.CompressionLZ4
	case "zstd":
		o.Compression = ch.CompressionZSTD
	case "none":
		o.Compression = ch.CompressionDisabled
	}
	if d.cfg.TLS {
		o.TLS = &tls.Config{ServerName: hostOf(d.addr), InsecureSkipVerify: d.cfg.TLSInsecureSkipVerify} //nolint:gosec // opt-in
	}
	return o
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

// dial opens a connection, negotiating the protocol revision on first use.
func (d *dialer) dial(ctx context.Context) (*ch.Client, error) {
	d.mu.Lock()
	rev := d.revision
	d.mu.Unlock()
	if rev != 0 {
		return ch.Dial(ctx, d.options(rev))
	}
	c, err := ch.Dial(ctx, d.options(0))
	if err != nil {
		return nil, err
	}
	hello := c.ServerInfo()
	rev = proto.Version
	if hello.Revision < modernRevision {
		rev = compatRevision
		_ = c.Close()
		if c, err = ch.Dial(ctx, d.options(rev)); err != nil {
			return nil, err
		}
	}
	d.mu.Lock()
	d.revision, d.server = rev, hello
	d.mu.Unlock()
	return c, nil
}

// Server reports the server's hello and the revision sluice speaks with it.
func (d *dialer) Server() (proto.ServerHello, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.server, d.revision
}

// PermanentError is an insert or schema error that retrying cannot fix: the
// pipeline stops with it rather than retry forever or drop rows.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// permanentCodes are server errors caused by the data or the schema.
var permanentCodes = []proto.Error{
	proto.ErrUnknownTable, proto.ErrUnknownDatabase, proto.ErrNoSuchColumnInTable,
	proto.ErrTypeMismatch, proto.ErrUnknownIdentifier, proto.ErrIllegalColumn,
	proto.ErrTooLargeStringSize, proto.ErrCannotParseText, proto.ErrCannotParseNumber,
	proto.ErrCannotParseDate, proto.ErrCannotParseDatetime, proto.ErrCannotParseUUID,
	proto.ErrDatabaseAccessDenied, proto.ErrAuthenticationFailed, proto.ErrUnknownUser,
	proto.ErrRequiredPassword, proto.ErrWrongPassword, proto.ErrReadonly,
}

// classify wraps permanent errors in *PermanentError and leaves the rest,
// which are retried.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var perm *PermanentError
	if errors.As(err, &perm) {
		return err
	}
	if exc, ok := ch.AsException(err); ok && exc.IsCode(permanentCodes...) {
		return &PermanentError{Err: err}
	}
	return err
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

func (b *backoff) reset() { b.attempt = 0 }

// describe reads a table's columns from the server.
func describe(ctx context.Context, c *ch.Client, database, table string) ([]Column, error) {
	var (
		res  proto.Results
		cols []Column
	)
	q := ch.Query{
		Body:   fmt.Sprintf("DESCRIBE TABLE %s.%s", quoteIdent(database), quoteIdent(table)),
		Result: res.Auto(),
		OnResult: func(ctx context.Context, b proto.Block) error {
			if len(res) < 3 {
				return fmt.Errorf("DESCRIBE returned %d columns", len(res))
			}
			names, ok1 := res[0].Data.(*proto.ColStr)
			types, ok2 := res[1].Data.(*proto.ColStr)
			kinds, ok3 := res[2].Data.(*proto.ColStr)
			if !ok1 || !ok2 || !ok3 {
				return fmt.Errorf("DESCRIBE returned unexpected column types")
			}
			for i := 0; i < names.Rows(); i++ {
				cols = append(cols, Column{Name: names.Row(i), Type: types.Row(i), DefaultKind: kinds.Row(i)})
			}
			return nil
		},
	}
	if err := c.Do(ctx, q); err != nil {
		return nil, classify(err)
	}
	if len(cols) == 0 {
		return nil, &PermanentError{Err: fmt.Errorf("table %s.%s has no columns", database, table)}
	}
	return cols, nil
}
