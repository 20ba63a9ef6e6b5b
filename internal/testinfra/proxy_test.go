package testinfra

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// listenT listens on a free loopback port and closes the listener when t
// ends.
func listenT(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func proxyT(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := StartProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestProxyLatency sends lines through a proxy with a latency to a server
// that answers each, and checks both directions against the latency as a
// lower bound: every line reaches the server, and every answer the client,
// no sooner than the latency after it was sent. A loaded machine can only
// make them later.
func TestProxyLatency(t *testing.T) {
	const latency = 80 * time.Millisecond
	ln := listenT(t)
	type arrival struct{ received, answered time.Time }
	arrivals := make(chan arrival, 16)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			a := arrival{received: time.Now()}
			a.answered = time.Now()
			if _, err := c.Write(append([]byte("re: "), line...)); err != nil {
				return
			}
			arrivals <- a
		}
	}()
	p := proxyT(t, ln.Addr().String())
	p.SetLatency(latency)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for i := range 4 {
		line := []byte{'q', byte('0' + i), '\n'}
		sent := time.Now()
		if _, err := c.Write(line); err != nil {
			t.Fatal(err)
		}
		answer, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		if want := "re: " + string(line); string(answer) != want {
			t.Fatalf("answer %q, want %q", answer, want)
		}
		a := <-arrivals
		if d := a.received.Sub(sent); d < latency {
			t.Errorf("line %d reached the server %v after it was sent; the latency is %v", i, d, latency)
		}
		if d := back.Sub(a.answered); d < latency {
			t.Errorf("answer %d reached the client %v after it was sent; the latency is %v", i, d, latency)
		}
		if d := back.Sub(sent); d < 2*latency {
			t.Errorf("round trip %d took %v; it must take at least twice the latency, %v", i, d, 2*latency)
		}
	}
}

// TestProxyLatencyKeepsBandwidth streams 8 MiB through a proxy with a
// latency: it arrives intact and in order, no sooner than the latency, and
// in much less time than a proxy that waited out the latency after each
// read would take. Such a proxy reads at most 32 KiB at a time, so it
// would need at least 256 latencies; the bound allowed is a quarter of
// that, far above what the pipe needs (about one latency).
func TestProxyLatencyKeepsBandwidth(t *testing.T) {
	const (
		latency = 50 * time.Millisecond
		size    = 8 << 20
	)
	ln := listenT(t)
	type result struct {
		sum  [sha256.Size]byte
		n    int64
		last time.Time
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		h := sha256.New()
		n, _ := io.Copy(h, c)
		var res result
		copy(res.sum[:], h.Sum(nil))
		res.n, res.last = n, time.Now()
		got <- res
	}()
	p := proxyT(t, ln.Addr().String())
	p.SetLatency(latency)
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := io.Copy(c, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	res := <-got
	elapsed := res.last.Sub(start)
	if want := sha256.Sum256(data); res.n != size || res.sum != want {
		t.Fatalf("the server got %d bytes with another checksum; want the %d bytes sent, in order", res.n, size)
	}
	if elapsed < latency {
		t.Errorf("8 MiB arrived in %v, before the latency %v", elapsed, latency)
	}
	perReadSleep := size / (32 << 10) * latency
	if elapsed > perReadSleep/4 {
		t.Errorf("8 MiB took %v through a %v latency: the latency limits bandwidth (a wait per read would take at least %v)", elapsed, latency, perReadSleep)
	}
	t.Logf("8 MiB through a %v latency in %v", latency, elapsed)
}
