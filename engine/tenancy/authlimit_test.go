package tenancy

import (
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// serve sends GET /v1/whoami from remote with token (none if empty)
// straight to the handler.
func (a *testAPI) serve(remote, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/v1/whoami", nil)
	req.RemoteAddr = remote
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	a.handler.ServeHTTP(rec, req)
	return rec
}

// authOp is one request of a generated sequence: after the clock moves
// on by advance, a client at address addr sends token (an index into
// authTokens; the first three are right).
type authOp struct {
	addr    int
	token   int
	advance time.Duration
}

// authTokens are the tokens a generated client sends: three right ones,
// none, and wrong ones.
var authTokens = []string{adminToken, acmeToken, globexToken, "", "wrong-1", "wrong-2", "wrong-3", "wrong-4", "wrong-5", "wrong-6", "wrong-7", "wrong-8"}

// authAddrs are the client addresses a generated sequence uses, each with
// the address its wrong tokens count against: an IPv4 address (mapped into
// IPv6 or not), or an IPv6 address's /64, from which one host can pick
// addresses at will.
var authAddrs = func() []struct{ remote, counted string } {
	var out []struct{ remote, counted string }
	add := func(remote, counted string) { out = append(out, struct{ remote, counted string }{remote, counted}) }
	for i := range 16 {
		add(fmt.Sprintf("198.51.100.%d:%d", i+1, 40000+i), fmt.Sprintf("198.51.100.%d", i+1))
	}
	add("[::ffff:198.51.100.1]:40100", "198.51.100.1")
	add("[::ffff:c633:6402]:40101", "198.51.100.2")
	add("[2001:db8:1:2::1]:443", "2001:db8:1:2::/64")
	add("[2001:db8:1:2:ffff:ffff:ffff:ffff]:443", "2001:db8:1:2::/64")
	add("[2001:db8:1:2:8a2e:370:7334:1]:1", "2001:db8:1:2::/64")
	add("[2001:db8:1:3::1]:443", "2001:db8:1:3::/64")
	add("[2001:db8:1:3::1%eth0]:443", "2001:db8:1:3::/64")
	add("[2001:db8:ffff::1]:443", "2001:db8:ffff::/64")
	return out
}()

// authLimitCase is a generated sequence and the limiter it runs against.
type authLimitCase struct {
	burst    int
	interval time.Duration
	maxKeys  int
	ops      []authOp
}

// checkAuthSequence runs c's requests through the handler on a clock of
// its own and checks, after each: a right token is answered 200, always;
// a wrong or missing one 401 or 429 (with Retry-After); in any stretch of
// time d, each address and each wrong token got at most burst + d/interval
// 401s (twice that when the limiter ran out of room for keys and shared
// its overflow bucket), all keys together at most (maxKeys + 1) times
// that; while the limiter has room for every key, a wrong token gets 401
// exactly when a token bucket of its own per address and per token would
// allow it; and the limiter tracks at most maxKeys addresses and maxKeys
// token ids.
func checkAuthSequence(t *testing.T, c authLimitCase) {
	t.Helper()
	api := &testAPI{t: t, store: openT(t, t.TempDir()), engine: &fakeActivator{}}
	h, err := NewServer(ServerOptions{Store: api.store, Auth: mustAuth(t), Tenants: testTenants, Validator: fakeValidator{},
		Audit: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := h.(*server)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	s.authFail = newFailureLimiter(c.burst, c.interval, c.maxKeys)
	api.handler = h

	accepted := map[string][]time.Time{} // key → times of its 401s
	model := map[string]*modelBucket{}
	seen := map[string]bool{}
	distinct := map[byte]int{} // keys seen, per kind
	key := func(kind byte, k string) string {
		kk := string(kind) + k
		if !seen[kk] {
			seen[kk] = true
			distinct[kind]++
		}
		return kk
	}
	for i, op := range c.ops {
		now = now.Add(op.advance)
		token := authTokens[op.token]
		rec := api.serve(authAddrs[op.addr].remote, token)
		where := fmt.Sprintf("request %d (address %d, token %q, at %v)", i, op.addr, token, now.Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
		if op.token < 3 {
			if rec.Code != http.StatusOK {
				t.Fatalf("%s: a right token got %d: %s", where, rec.Code, rec.Body)
			}
			continue
		}
		keys := []string{key('a', authAddrs[op.addr].counted)}
		if token != "" {
			keys = append(keys, key('t', token))
		}
		// The model's buckets say what the answer must be while the
		// limiter has room for every key; at the edge (a float rounding
		// away from 1) either answer does.
		minTokens := math.Inf(1)
		for _, k := range keys {
			b, ok := model[k]
			if !ok {
				b = &modelBucket{tokens: float64(c.burst)}
				model[k] = b
			}
			b.tokens = min(float64(c.burst), b.tokens+float64(now.Sub(b.at))/float64(c.interval))
			b.at = now
			minTokens = min(minTokens, b.tokens)
		}
		roomy := distinct['a'] <= c.maxKeys && distinct['t'] <= c.maxKeys
		switch rec.Code {
		case http.StatusUnauthorized:
			if roomy && minTokens < 1-1e-6 {
				t.Fatalf("%s: 401, but its address or token had spent its budget (%.3f failures left)", where, minTokens)
			}
			for _, k := range keys {
				accepted[k] = append(accepted[k], now)
				model[k].tokens--
			}
		case http.StatusTooManyRequests:
			if ra, err := strconv.Atoi(rec.Header().Get("Retry-After")); err != nil || ra < 1 {
				t.Fatalf("%s: 429 with Retry-After %q", where, rec.Header().Get("Retry-After"))
			}
			if roomy && minTokens > 1+1e-6 {
				t.Fatalf("%s: 429, but its address and token had %.3f failures left", where, minTokens)
			}
		default:
			t.Fatalf("%s: a wrong token got %d: %s", where, rec.Code, rec.Body)
		}
		for _, set := range []*limiterSet{s.authFail.byAddr, s.authFail.byToken} {
			if len(set.byKey) > c.maxKeys || set.order.Len() != len(set.byKey) {
				t.Fatalf("%s: the limiter tracks %d keys (%d in order), at most %d allowed", where, len(set.byKey), set.order.Len(), c.maxKeys)
			}
		}
	}
	// budget is what one bucket allows in a stretch of time d.
	budget := func(d time.Duration) float64 { return float64(c.burst) + float64(d)/float64(c.interval) + 1e-6 }
	for _, kind := range []byte{'a', 't'} {
		name := map[byte]string{'a': "address", 't': "token"}[kind]
		share := 1.0
		if distinct[kind] > c.maxKeys {
			share = 2 // its own bucket and the overflow
		}
		var all []time.Time
		for k, ts := range accepted {
			if k[0] != kind {
				continue
			}
			all = append(all, ts...)
			if n, d, over := maxInStretch(ts, func(d time.Duration) float64 { return share * budget(d) }); over {
				t.Fatalf("%s %q: %d 401s within %v, over %.0f× the budget of %.2f", name, k[1:], n, d, share, budget(d))
			}
		}
		slices.SortFunc(all, time.Time.Compare)
		keys := float64(c.maxKeys + 1)
		if n, d, over := maxInStretch(all, func(d time.Duration) float64 { return keys * budget(d) }); over {
			t.Fatalf("all %s keys together: %d 401s within %v, over %d budgets of %.2f", name, n, d, c.maxKeys+1, budget(d))
		}
	}
}

// modelBucket is the test's own token bucket of a key.
type modelBucket struct {
	tokens float64
	at     time.Time
}

// maxInStretch finds a stretch of the sorted times ts holding more than
// limit of its length allows.
func maxInStretch(ts []time.Time, limit func(time.Duration) float64) (n int, d time.Duration, over bool) {
	for i := range ts {
		for j := i; j < len(ts); j++ {
			if d := ts[j].Sub(ts[i]); float64(j-i+1) > limit(d) {
				return j - i + 1, d, true
			}
		}
	}
	return 0, 0, false
}

// genAuthCase draws a sequence: a few addresses and tokens (sometimes more
// than the limiter has room for), right tokens among wrong ones, the clock
// still or moving by parts of an interval or many.
func genAuthCase(rng *rand.Rand) authLimitCase {
	c := authLimitCase{burst: 1 + rng.IntN(5), interval: time.Second, maxKeys: []int{1, 2, 4, 64}[rng.IntN(4)]}
	addrs, wrong := 1+rng.IntN(len(authAddrs)), 1+rng.IntN(len(authTokens)-4)
	steps := []time.Duration{0, 0, 0, time.Millisecond, c.interval / 8, c.interval / 2, c.interval, 3 * c.interval, time.Duration(c.burst) * c.interval}
	for range 50 + rng.IntN(400) {
		op := authOp{addr: rng.IntN(addrs), advance: steps[rng.IntN(len(steps))]}
		if rng.IntN(4) == 0 {
			op.token = rng.IntN(3)
		} else {
			op.token = 3 + rng.IntN(wrong+1) // none, or a wrong one
		}
		c.ops = append(c.ops, op)
	}
	return c
}

// TestAuthLimiterProperties runs generated request sequences through the
// handler (see checkAuthSequence for what must hold).
func TestAuthLimiterProperties(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 50
	}
	for seed := range n {
		c := genAuthCase(rand.New(rand.NewPCG(uint64(seed), 46)))
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { checkAuthSequence(t, c) })
	}
}

// FuzzAuthLimiter is TestAuthLimiterProperties with sequences from the
// fuzzer: each 3 bytes are a request's address, token and clock step.
func FuzzAuthLimiter(f *testing.F) {
	f.Add(uint8(3), uint8(2), []byte{0, 4, 0, 0, 4, 0, 0, 4, 0, 0, 4, 0, 0, 1, 0, 0, 4, 0})
	f.Add(uint8(1), uint8(1), []byte{0, 4, 0, 1, 5, 0, 2, 6, 0, 3, 7, 0, 4, 8, 0, 0, 0, 0, 5, 9, 2, 6, 10, 0})
	f.Add(uint8(2), uint8(4), []byte{0, 3, 0, 0, 3, 0, 0, 3, 0, 0, 2, 0, 0, 3, 8, 0, 3, 0})
	f.Fuzz(func(t *testing.T, burst, maxKeys uint8, data []byte) {
		c := authLimitCase{burst: 1 + int(burst%6), interval: time.Second, maxKeys: 1 + int(maxKeys%8)}
		for i := 0; i+2 < len(data) && len(c.ops) < 500; i += 3 {
			c.ops = append(c.ops, authOp{addr: int(data[i]) % len(authAddrs), token: int(data[i+1]) % len(authTokens),
				advance: time.Duration(data[i+2]) * c.interval / 8})
		}
		checkAuthSequence(t, c)
	})
}

// Behind one proxy address, clients with right tokens are served while
// others flood wrong ones, concurrently: not one right token is refused.
func TestAPIRightTokensThroughAProxyUnderAFlood(t *testing.T) {
	api := newTestAPI(t, func(o *ServerOptions) { o.AuthFailureBurst, o.AuthFailureInterval = 10, time.Hour })
	const proxy = "10.0.0.1:443"
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]map[int]int{"right": {}, "wrong": {}}
	for g := range 6 {
		wg.Go(func() {
			for i := range 300 {
				kind, tok := "wrong", fmt.Sprintf("flood-%d-%d", g, i)
				if g < 2 {
					kind, tok = "right", []string{acmeToken, globexToken}[g]
				}
				code := api.serve(proxy, tok).Code
				mu.Lock()
				codes[kind][code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if codes["right"][http.StatusOK] != 600 {
		t.Errorf("right tokens behind the proxy: %v, want 600 × 200", codes["right"])
	}
	if codes["wrong"][http.StatusUnauthorized] != 10 || codes["wrong"][http.StatusTooManyRequests] != 1190 {
		t.Errorf("wrong tokens behind the proxy: %v, want 10 × 401 and the rest 429", codes["wrong"])
	}
}

// BenchmarkAuthLimiterFull is a wrong token from a new address with a new
// token id each time, the limiter full of keys that have not recovered
// (the overflow path an attacker rotating both takes), and reports the
// heap the full limiter holds per key.
func BenchmarkAuthLimiterFull(b *testing.B) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := newFailureLimiter(10, time.Second, maxTrackedKeys)
	now := time.Now()
	for i := range maxTrackedKeys {
		for range 10 {
			l.failed(fmt.Sprintf("2001:db8::%x", i), fmt.Sprintf("sha256:%012x", i), now)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / float64(2*maxTrackedKeys)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("sha256:%012x", maxTrackedKeys+i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		l.failed(keys[i%len(keys)], keys[(i+1)%len(keys)], now)
	}
	b.StopTimer()
	if n := len(l.byAddr.byKey) + len(l.byToken.byKey); n != 2*maxTrackedKeys {
		b.Fatalf("the limiter holds %d keys, want %d", n, 2*maxTrackedKeys)
	}
	b.ReportMetric(perKey, "heap-B/key")
}
