package tenancy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
)

// readBody reads a request body of at most limit bytes, or answers 413
// (at once when Content-Length says so, else as soon as the body passes
// limit),
// or 503 when the bodies held by all requests would pass MaxBodyMemory.
// The body is held as it arrives, never by its declared length. release
// gives its memory back to the budget.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, ev *auditEvent, limit int64, what string) (body []byte, release func(), ok bool) {
	if r.ContentLength > limit {
		s.fail(w, r, ev, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s of %d bytes is over the limit of %d bytes", what, r.ContentLength, limit))
		return nil, nil, false
	}
	var held int64
	release = func() { s.bodies.release(held) }
	src := http.MaxBytesReader(w, r.Body, limit)
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			// Grow by doubling, reserving the growth first.
			grow := max(int64(cap(buf)), 512)
			if !s.bodies.acquire(grow) {
				release()
				w.Header().Set("Retry-After", "1")
				s.fail(w, r, ev, http.StatusServiceUnavailable, fmt.Sprintf("the server is receiving too many request bodies at once (limit %d bytes); retry later", s.opts.MaxBodyMemory))
				return nil, nil, false
			}
			held += grow
			buf = slices.Grow(buf, int(grow))
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, release, true
		}
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			release()
			s.fail(w, r, ev, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s is over the limit of %d bytes", what, limit))
			return nil, nil, false
		case err != nil:
			release()
			s.fail(w, r, ev, http.StatusBadRequest, fmt.Sprintf("reading the %s: %v", what, err))
			return nil, nil, false
		}
	}
}

// byteBudget bounds the bytes held by all requests together.
type byteBudget struct {
	limit int64
	mu    sync.Mutex
	held  int64
}

// acquire takes n bytes of the budget, or reports that they are not there.
func (b *byteBudget) acquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held+n > b.limit {
		return false
	}
	b.held += n
	return true
}

func (b *byteBudget) heldBytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
}
