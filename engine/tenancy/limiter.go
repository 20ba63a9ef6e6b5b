package tenancy

import (
	"container/list"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// failureLimiter limits wrong tokens per client address and per token id,
// each key a token bucket of burst failures at once, then one per
// interval. It is asked only after a token was found wrong: a right
// token is never limited, whoever else shares its address.
//
// Its memory is bounded: each of the two kinds of keys is tracked up to
// maxKeys at once, least recently failed first out, and only once its
// bucket is full again (when forgetting it loses nothing). A key that
// finds no room shares one overflow bucket with every other such key, so
// rotating addresses or tokens past maxKeys buys no more than one more
// bucket's worth of failures over all of them.
type failureLimiter struct {
	mu       sync.Mutex
	every    rate.Limit
	burst    int
	interval time.Duration
	byAddr   *limiterSet
	byToken  *limiterSet
}

// maxTrackedKeys bounds the addresses, and separately the token ids, whose
// failures the limiter tracks: about 220 bytes of heap each
// (BenchmarkAuthLimiterFull).
const maxTrackedKeys = 10000

func newFailureLimiter(burst int, interval time.Duration, maxKeys int) *failureLimiter {
	l := &failureLimiter{every: rate.Every(interval), burst: burst, interval: interval}
	l.byAddr = l.newSet(maxKeys)
	l.byToken = l.newSet(maxKeys)
	return l
}

// failed counts a wrong token sent from addr, whose id is tokenID (empty
// when there was no token), and reports whether it is within both keys'
// budgets. If it is not, nothing is counted, and wait is how long until
// it would be, and over says which key or keys are out of budget ("from
// this address", "with this token" or both).
func (l *failureLimiter) failed(addr, tokenID string, now time.Time) (wait time.Duration, over string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.byAddr.get(addr, now)
	var t *rate.Limiter
	if tokenID != "" {
		t = l.byToken.get(tokenID, now)
	}
	aWait, tWait := l.waitFor(a, now), l.waitFor(t, now)
	switch {
	case aWait > 0 && tWait > 0:
		return max(aWait, tWait), "from this address and with this token"
	case aWait > 0:
		return aWait, "from this address"
	case tWait > 0:
		return tWait, "with this token"
	}
	a.AllowN(now, 1)
	if t != nil {
		t.AllowN(now, 1)
	}
	return 0, ""
}

// waitFor is how long until b has a failure to spend; 0 if it has one
// now, or if b is nil.
func (l *failureLimiter) waitFor(b *rate.Limiter, now time.Time) time.Duration {
	if b == nil {
		return 0
	}
	tokens := b.TokensAt(now)
	if tokens >= 1 {
		return 0
	}
	return max(time.Duration((1-tokens)*float64(l.interval)), time.Nanosecond)
}

// limiterSet is one kind of key's buckets, most recently failed first.
type limiterSet struct {
	l        *failureLimiter
	max      int
	order    *list.List // of *limiterEntry
	byKey    map[string]*list.Element
	overflow *rate.Limiter // for the keys that found no room
}

type limiterEntry struct {
	key string
	lim *rate.Limiter
}

func (l *failureLimiter) newSet(maxKeys int) *limiterSet {
	return &limiterSet{l: l, max: maxKeys, order: list.New(), byKey: map[string]*list.Element{},
		overflow: rate.NewLimiter(l.every, l.burst)}
}

// get returns key's bucket, tracking it if there is room, or the overflow
// bucket if there is none. l.mu is held.
func (s *limiterSet) get(key string, now time.Time) *rate.Limiter {
	if e, ok := s.byKey[key]; ok {
		s.order.MoveToFront(e)
		return e.Value.(*limiterEntry).lim
	}
	if s.order.Len() >= s.max {
		// The least recently failed key is the likeliest to be full again;
		// if it is not, none may be forgotten without losing its count.
		back := s.order.Back()
		if back == nil || back.Value.(*limiterEntry).lim.TokensAt(now) < float64(s.l.burst) {
			return s.overflow
		}
		delete(s.byKey, back.Value.(*limiterEntry).key)
		s.order.Remove(back)
	}
	lim := rate.NewLimiter(s.l.every, s.l.burst)
	s.byKey[key] = s.order.PushFront(&limiterEntry{key: key, lim: lim})
	return lim
}

// clientAddr is the address a request's wrong tokens count against: its
// peer's IP, or for IPv6 the peer's /64, from which one host can usually
// pick addresses at will. Forwarding headers are not trusted: they are the
// client's to set.
func clientAddr(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	a := ap.Addr().Unmap()
	if a.Is4() {
		return a.String()
	}
	p, err := a.WithZone("").Prefix(64)
	if err != nil {
		return a.String()
	}
	return p.String()
}
