package testinfra

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections on a loopback port to a target address,
// optionally limiting the bandwidth of each direction, delaying every byte
// by a fixed latency, swallowing a server's answers or dropping every
// connection. Tests use it to make a server slow or far away, or an
// insert's outcome unknown to the client, without changing the server.
type Proxy struct {
	Addr   string
	target string
	ln     net.Listener
	rate   atomic.Int64 // bytes per second per direction; 0 = unlimited
	// latency is the one-way delay, in nanoseconds, of each direction.
	latency atomic.Int64
	// swallowAfter > 0: a connection that has sent more than this many
	// bytes to the target gets nothing more back from it.
	swallowAfter atomic.Int64
	// toTarget counts the bytes of every connection to the target.
	toTarget atomic.Int64

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

// SetLatency delays each direction of each connection by d: every byte
// read from one side is written to the other d after it was read, in
// order. The delay is in the pipe, as a long link's: bytes that arrive
// while earlier ones are on their way are read at once and follow them d
// later, so a latency does not limit bandwidth (SetRate does that). A
// round trip through the proxy takes at least 2d. It applies to the bytes
// read from then on; 0 removes it.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(max(d, 0))) }

// SwallowResponsesAfter makes every connection that has sent more than n
// bytes to the target (counted from its start) receive nothing more from
// it: what the target answers is read and dropped. A client then cannot
// tell that a large request succeeded. 0 turns it off for what the target
// sends from then on.
func (p *Proxy) SwallowResponsesAfter(n int64) { p.swallowAfter.Store(n) }

// BytesToTarget is how many bytes the proxy has read from its clients for
// the target, over every connection so far.
func (p *Proxy) BytesToTarget() int64 { return p.toTarget.Load() }

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

// segment is what one read returned, due for writing at due.
type segment struct {
	data []byte
	due  time.Time
}

// inFlightSegments bounds the reads one direction holds while they wait
// out the latency (at most 32 KiB each). When it is reached the reader
// stops reading, as a link's window would stop the sender.
const inFlightSegments = 1024

// pipe copies src to dst: it reads src and hands what it read, stamped
// with when it is due, to a writer goroutine that writes it to dst at
// that time. Client to target, it adds to count; target to client, it
// drops what arrives once sent passes the swallow threshold.
func (p *Proxy) pipe(dst, src net.Conn, count, sent *atomic.Int64) {
	defer p.wg.Done()
	segments := make(chan segment, inFlightSegments)
	writerDone := make(chan struct{})
	p.wg.Add(1)
	go p.deliver(dst, src, segments, writerDone)
	defer close(segments)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if rate := p.rate.Load(); rate > 0 {
				time.Sleep(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
			}
			if count != nil {
				count.Add(int64(n))
				p.toTarget.Add(int64(n))
			}
			swallow := false
			if sent != nil {
				limit := p.swallowAfter.Load()
				swallow = limit > 0 && sent.Load() > limit
			}
			if !swallow {
				s := segment{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(time.Duration(p.latency.Load()))}
				select {
				case segments <- s:
				case <-writerDone:
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// deliver writes each segment to dst once it is due, in the order read.
// When the reader is done (segments closed) or a write fails, it closes
// both connections: what the reader had read is written first.
func (p *Proxy) deliver(dst, src net.Conn, segments <-chan segment, done chan<- struct{}) {
	defer p.wg.Done()
	defer func() {
		close(done)
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	for s := range segments {
		if wait := time.Until(s.due); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := dst.Write(s.data); err != nil {
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
