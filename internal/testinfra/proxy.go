package testinfra

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections on a loopback port to a target address,
// optionally limiting the bandwidth of each direction, swallowing a
// server's answers or dropping every connection. Tests use it to make a
// server slow, or an insert's outcome unknown to the client, without
// changing the server.
type Proxy struct {
	Addr   string
	target string
	ln     net.Listener
	rate   atomic.Int64 // bytes per second per direction; 0 = unlimited
	// swallowAfter > 0: a connection that has sent more than this many
	// bytes to the target gets nothing more back from it.
	swallowAfter atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartProxy listens on a free loopback port and forwards to target.
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// SetRate limits each direction of each connection to bytesPerSec
// (0 removes the limit).
func (p *Proxy) SetRate(bytesPerSec int64) { p.rate.Store(bytesPerSec) }

// SwallowResponsesAfter makes every connection that has sent more than n
// bytes to the target (counted from its start) receive nothing more from
// it: what the target answers is read and dropped. A client then cannot
// tell that a large request succeeded. 0 turns it off for what the target
// sends from then on.
func (p *Proxy) SwallowResponsesAfter(n int64) { p.swallowAfter.Store(n) }

// DropConnections closes every connection being forwarded; the proxy keeps
// accepting new ones.
func (p *Proxy) DropConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		var sent atomic.Int64 // client to target
		p.wg.Add(2)
		go p.pipe(up, c, &sent, nil)
		go p.pipe(c, up, nil, &sent)
	}
}

// pipe copies src to dst. Client to target, it adds to count; target to
// client, it drops what arrives once sent passes the swallow threshold.
func (p *Proxy) pipe(dst, src net.Conn, count, sent *atomic.Int64) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if rate := p.rate.Load(); rate > 0 {
				time.Sleep(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
			}
			if count != nil {
				count.Add(int64(n))
			}
			swallow := false
			if sent != nil {
				limit := p.swallowAfter.Load()
				swallow = limit > 0 && sent.Load() > limit
			}
			if !swallow {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// Close stops listening, drops every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}
