package tenancy

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// failureLimiter counts authentication failures per client IP as a token
// bucket: burst failures at once, then one per interval.
type failureLimiter struct {
	burst    float64
	interval time.Duration

	mu      sync.Mutex
	clients map[string]*failureBucket
}

type failureBucket struct {
	tokens float64 // failures still allowed
	at     time.Time
}

// maxTrackedClients bounds the limiter's memory; past it, the buckets that
// are full again (whose clients have not failed lately) are dropped.
const maxTrackedClients = 10000

func newFailureLimiter(burst int, interval time.Duration) *failureLimiter {
	return &failureLimiter{burst: float64(burst), interval: interval, clients: map[string]*failureBucket{}}
}

// refill brings b's tokens to now. l.mu is held.
func (l *failureLimiter) refill(b *failureBucket, now time.Time) {
	b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.interval))
	b.at = now
}

// blocked returns how long ip must wait before its token is looked at, 0
// if it need not.
func (l *failureLimiter) blocked(ip string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.clients[ip]
	if b == nil {
		return 0
	}
	l.refill(b, now)
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(l.interval))
}

// failed counts a wrong token from ip.
func (l *failureLimiter) failed(ip string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.clients[ip]
	if b == nil {
		if len(l.clients) >= maxTrackedClients {
			for k, c := range l.clients {
				if l.refill(c, now); c.tokens >= l.burst {
					delete(l.clients, k)
				}
			}
			for k := range l.clients { // still full: drop any one
				if len(l.clients) < maxTrackedClients {
					break
				}
				delete(l.clients, k)
			}
		}
		b = &failureBucket{tokens: l.burst, at: now}
		l.clients[ip] = b
	}
	l.refill(b, now)
	b.tokens = max(0, b.tokens-1)
}

// clientIP is the request's peer address without its port. Forwarding
// headers are not trusted: they are the client's to set.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
