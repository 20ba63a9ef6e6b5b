package clickhouse

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/ch-go/compress"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/internal/chsql"
)

// httpTransport inserts with "INSERT … FORMAT Native" over HTTP(S). One
// http.Client (and so one pool of keep-alive connections) serves every
// replica and worker.
type httpTransport struct {
	cfg    *Config
	client *http.Client
	base   *url.URL // http_addr
}

func newHTTPTransport(cfg *Config, tlsConf *tls.Config) (*httpTransport, error) {
	base, err := httpBaseURL(cfg.HTTPAddr, cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("clickhouse.http_addr: %w", err)
	}
	if base.Scheme == "https" && tlsConf == nil {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConf,
		TLSHandshakeTimeout:   cfg.DialTimeout,
		ResponseHeaderTimeout: cfg.ReadTimeout,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   cfg.InsertsPerShard + 2,
		// Below ClickHouse's keep_alive_timeout (3s on 18.16, 10s later),
		// so that a pooled connection is rarely one the server is closing.
		IdleConnTimeout:    2 * time.Second,
		DisableCompression: true,
	}
	return &httpTransport{cfg: cfg, client: &http.Client{Transport: tr}, base: base}, nil
}

// newReplica returns the replica at native address addr; its HTTP address
// is cluster.http_addrs[addr], or addr's host with cluster.http_port (by
// default the port of http_addr). An empty addr is http_addr itself.
func (ht *httpTransport) newReplica(addr string) (*replica, error) {
	if addr == "" {
		u := *ht.base
		return &replica{addr: u.Host, url: &u}, nil
	}
	if h, ok := ht.cfg.Cluster.HTTPAddrs[addr]; ok {
		u, err := httpBaseURL(h, ht.cfg.TLS)
		if err != nil {
			return nil, err
		}
		if !strings.Contains(h, "://") {
			u.Scheme = ht.base.Scheme
		}
		return &replica{addr: addr, url: u}, nil
	}
	port := ht.base.Port()
	if ht.cfg.Cluster.HTTPPort != 0 {
		port = fmt.Sprint(ht.cfg.Cluster.HTTPPort)
	}
	if port == "" {
		port = "8123"
		if ht.base.Scheme == "https" {
			port = "8443"
		}
	}
	u := *ht.base
	u.Host = net.JoinHostPort(hostOf(addr), port)
	return &replica{addr: addr, url: &u}, nil
}

func (ht *httpTransport) open(ctx context.Context, rep *replica) (conn, error) {
	return &httpConn{ht: ht, rep: rep}, nil
}

func (ht *httpTransport) canSendSettings(*replica) bool { return true }

func (ht *httpTransport) close() { ht.client.CloseIdleConnections() }

// do posts body to the replica with params and returns the response body.
func (ht *httpTransport) do(ctx context.Context, rep *replica, params url.Values, body io.Reader, getBody func() (io.ReadCloser, error), key string) ([]byte, error) {
	u := *rep.url
	params.Set("database", ht.cfg.Database)
	u.RawQuery = params.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.GetBody = getBody
	req.Header.Set("X-ClickHouse-User", ht.cfg.User)
	if ht.cfg.Password != "" {
		req.Header.Set("X-ClickHouse-Key", ht.cfg.Password)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if key != "" {
		// Lets net/http resend the request on a pooled connection the
		// server closed before it read anything; the insert is retried
		// unchanged anyway.
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := ht.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, newServerError(resp.StatusCode, resp.Header.Get("X-ClickHouse-Exception-Code"), b)
	}
	if rerr != nil {
		return nil, fmt.Errorf("read response: %w", rerr)
	}
	return b, nil
}

// query runs a statement and parses its TabSeparated answer.
func (ht *httpTransport) query(ctx context.Context, rep *replica, sql string) ([][]string, error) {
	body := sql + " FORMAT TabSeparated"
	b, err := ht.do(ctx, rep, url.Values{}, strings.NewReader(body), nil, "")
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, nil
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		fields := strings.Split(line, "\t")
		for i, f := range fields {
			fields[i] = chsql.Unescape(f)
		}
		rows = append(rows, fields)
	}
	return rows, nil
}

// httpConn is a worker's handle on one replica; the connections themselves
// are pooled by the transport.
type httpConn struct {
	ht  *httpTransport
	rep *replica
}

func (hc *httpConn) close() {}

func (hc *httpConn) insert(ctx context.Context, plan *insertPlan, src *partSource, s insertSettings) error {
	params := url.Values{"query": {plan.target.httpQuery}}
	method := compressionFor(hc.ht.cfg.Compression, hc.rep.url.Host)
	if method != "none" {
		params.Set("decompress", "1")
	}
	if s.dedupViews {
		params.Set("deduplicate_blocks_in_dependent_materialized_views", "1")
	}
	if s.dedupToken != "" {
		params.Set("insert_deduplication_token", s.dedupToken)
	}
	if s.distributedSync {
		params.Set("insert_distributed_sync", "1")
	}
	if s.asyncInsertOff {
		params.Set("async_insert", "0")
	}
	// net/http may still read a body after Do returned (an answer that
	// came before the whole body was sent); every body is finished before
	// insert returns, so that a retry never shares parts or buffers with a
	// reader of the previous attempt.
	var bodies []*nativeBody
	body := func(src *partSource) *nativeBody {
		b := newNativeBody(ctx, plan, src, method)
		bodies = append(bodies, b)
		return b
	}
	var (
		getBody func() (io.ReadCloser, error)
		key     string
	)
	if !src.stream {
		// A body of known parts can be sent again: net/http may then
		// resend it on a pooled connection the server had closed.
		getBody = func() (io.ReadCloser, error) { return body(&partSource{ins: src.ins}), nil }
		key = s.requestKey
	}
	_, err := hc.ht.do(ctx, hc.rep, params, body(src), getBody, key)
	for _, b := range bodies {
		_ = b.Close()
	}
	return err
}

// compressFrame is the most uncompressed bytes in one compressed frame of
// an HTTP body, as ClickHouse's own clients frame them.
const compressFrame = 1 << 20

// nativeBody streams parts as Native blocks, each encoded (and compressed)
// only when the previous one has been read, so an insert never holds a
// second copy of its rows; a streaming source hands out parts as they are
// queued, and the request body (chunked) ends when the insert does.
type nativeBody struct {
	ctx  context.Context
	plan *insertPlan
	src  *partSource
	// mu is held by Read and Close: Close waits for a Read in progress,
	// and a closed body reads nothing more.
	mu     sync.Mutex
	out    []byte // what Read hands out next
	closed bool
	*bodyBuffers
}

// bodyBuffers are a body's encoding and compression buffers, pooled.
type bodyBuffers struct {
	method string
	buf    proto.Buffer
	comp   *compress.Writer
	framed []byte
}

var bodyPool sync.Pool

func newNativeBody(ctx context.Context, plan *insertPlan, src *partSource, method string) *nativeBody {
	bb, _ := bodyPool.Get().(*bodyBuffers)
	if bb == nil || bb.method != method {
		bb = &bodyBuffers{method: method}
		switch method {
		case "lz4":
			bb.comp = compress.NewWriter(compress.LevelZero, compress.LZ4)
		case "zstd":
			bb.comp = compress.NewWriter(compress.LevelZero, compress.ZSTD)
		}
	}
	return &nativeBody{ctx: ctx, plan: plan, src: src, bodyBuffers: bb}
}

// Close ends the body (net/http closes it when done with it; insert closes
// every body it made before it returns) and returns its buffers to the pool.
func (b *nativeBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		b.out = nil
		bodyPool.Put(b.bodyBuffers)
		b.bodyBuffers = nil
	}
	return nil
}

func (b *nativeBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.ErrClosedPipe
	}
	for len(b.out) == 0 {
		p := b.src.next(b.ctx)
		if p == nil {
			return 0, io.EOF
		}
		b.buf.Reset()
		if err := p.sub.encodeNative(b.plan, &b.buf); err != nil {
			return 0, err
		}
		b.out = b.buf.Buf
		if b.comp != nil {
			b.framed = b.framed[:0]
			for data := b.buf.Buf; len(data) > 0; {
				n := min(len(data), compressFrame)
				if err := b.comp.Compress(data[:n]); err != nil {
					return 0, err
				}
				b.framed = append(b.framed, b.comp.Data...)
				data = data[n:]
			}
			b.out = b.framed
		}
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}
