package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCallSlotsShareAmongTenants: tenant A has eight partitions whose
// module calls each hold a slot for a while, tenant B one. With two slots,
// B gets a slot whenever it waits, so it makes about as many calls as all
// of A's partitions together; in arrival order it would get about one in
// eight.
func TestCallSlotsShareAmongTenants(t *testing.T) {
	s := newCallSlots(2)
	var calls [2]atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	call := func(tenant string, i int) {
		defer wg.Done()
		for !stop.Load() {
			if err := s.acquire(context.Background(), tenant); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
			calls[i].Add(1)
			s.release(tenant)
		}
	}
	wg.Add(9)
	for range 8 {
		go call("a", 0)
	}
	go call("b", 1)
	for calls[1].Load() < 200 {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	a, b := calls[0].Load(), calls[1].Load()
	t.Logf("calls: a %d over 8 partitions, b %d over one", a, b)
	if b*3 < a {
		t.Errorf("tenant b made %d calls beside a's %d: less than a third of a's, not its share", b, a)
	}
}

// TestCallSlotsTenantAloneUsesAll: a tenant alone takes every free slot at
// once, and a cancelled wait gives its place up.
func TestCallSlotsTenantAloneUsesAll(t *testing.T) {
	s := newCallSlots(3)
	for range 3 {
		if err := s.acquire(context.Background(), "a"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := s.acquire(ctx, "b"); err == nil {
		t.Fatal("a fourth call got a slot of three")
	}
	s.mu.Lock()
	waiting := len(s.waiting)
	s.mu.Unlock()
	if waiting != 0 {
		t.Fatalf("%d waiters left after the wait was cancelled", waiting)
	}
	s.release("a")
	if err := s.acquire(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s.release("a")
	}
	s.release("b")
	if s.free != 3 || len(s.running) != 0 {
		t.Fatalf("after every release: %d free, running %v", s.free, s.running)
	}
}
