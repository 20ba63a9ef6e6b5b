package engine

import (
	"context"
	"sync"
)

// callSlots shares the CPU that module code runs on among tenants. Every
// call into a module (sluice_init and sluice_transform) holds one of n
// slots, one per core by default (module.call_slots). While slots are free
// a call takes one at once, so a tenant alone may use them all. When calls
// wait, a freed slot goes to the waiting tenant with the fewest calls
// running, the longest waiting first among equals: k tenants that all have
// work each get n/k of the slots, however many partitions or pipelines each
// has. A call holds its slot at most its deadline, so a tenant waits for a
// slot at most one deadline of another tenant's module.
type callSlots struct {
	mu      sync.Mutex
	free    int
	running map[string]int // calls holding a slot, by tenant
	waiting []*slotWaiter  // in arrival order
}

type slotWaiter struct {
	tenant  string
	granted chan struct{} // closed when the slot is this waiter's
}

func newCallSlots(n int) *callSlots {
	return &callSlots{free: max(n, 1), running: map[string]int{}}
}

// acquire waits for a slot for tenant, or for ctx to end.
func (s *callSlots) acquire(ctx context.Context, tenant string) error {
	s.mu.Lock()
	if s.free > 0 && len(s.waiting) == 0 {
		s.free--
		s.running[tenant]++
		s.mu.Unlock()
		return nil
	}
	w := &slotWaiter{tenant: tenant, granted: make(chan struct{})}
	s.waiting = append(s.waiting, w)
	s.mu.Unlock()
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-w.granted:
			// Granted as ctx ended: hand the slot on.
			s.releaseLocked(tenant)
		default:
			for i, o := range s.waiting {
				if o == w {
					s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
					break
				}
			}
		}
		return ctx.Err()
	}
}

// release gives back a slot acquire returned for tenant.
func (s *callSlots) release(tenant string) {
	s.mu.Lock()
	s.releaseLocked(tenant)
	s.mu.Unlock()
}

func (s *callSlots) releaseLocked(tenant string) {
	if s.running[tenant]--; s.running[tenant] == 0 {
		delete(s.running, tenant)
	}
	s.free++
	for s.free > 0 && len(s.waiting) > 0 {
		best := 0
		for i, w := range s.waiting[1:] {
			if s.running[w.tenant] < s.running[s.waiting[best].tenant] {
				best = i + 1
			}
		}
		w := s.waiting[best]
		s.waiting = append(s.waiting[:best], s.waiting[best+1:]...)
		s.free--
		s.running[w.tenant]++
		close(w.granted)
	}
}
