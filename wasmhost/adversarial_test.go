package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The tests in this file run the adversarial modules of examples/adversarial
// and check how the host classifies what each does.

// wantTrap checks that err is a *TrapError with the given limit that
// mentions want.
func wantTrap(t *testing.T, err error, limit Limit, want string) *TrapError {
	t.Helper()
	var te *TrapError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v (%T), want a *TrapError", err, err)
	}
	if te.Limit != limit {
		t.Errorf("Limit = %q, want %q (err: %v)", te.Limit, limit, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("err = %q, want it to mention %q", err, want)
	}
	return te
}

// wantRows checks that a batch of plain values comes out as adv rows: the
// instance works.
func wantRows(t *testing.T, in *Instance, vals ...string) {
	t.Helper()
	out, err := in.Transform(context.Background(), values(vals...))
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	var want []result
	for i, v := range vals {
		want = append(want, result{rows: []string{fmt.Sprintf("0:offset=%d,value=%s", i, v)}})
	}
	if got := results(t, out); !reflect.DeepEqual(got, want) {
		t.Fatalf("results %+v, want %+v", got, want)
	}
}

// failedStaysFailed checks that an instance that trapped refuses later
// calls with the same error.
func failedStaysFailed(t *testing.T, in *Instance, first error) {
	t.Helper()
	_, err := in.Transform(context.Background(), values("a"))
	if err != first {
		t.Errorf("second call on a failed instance: %v, want the first error %v", err, first)
	}
}

func TestInfiniteLoop(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := load(t, r, "examples/adversarial/infinite-loop", Limits{Deadline: 300 * time.Millisecond})
	for _, v := range []string{"loop", "sleep"} {
		t.Run(v, func(t *testing.T) {
			in := instantiate(t, m, advInit)
			wantRows(t, in, "a", "b")
			start := time.Now()
			_, err := in.Transform(context.Background(), values("a", v, "b"))
			took := time.Since(start)
			te := wantTrap(t, err, LimitDeadline, "deadline exceeded: still running after 300ms")
			if !errors.Is(te, ErrDeadline) {
				t.Errorf("errors.Is(err, ErrDeadline) is false: %v", err)
			}
			if took < 300*time.Millisecond || took > 2*time.Second {
				t.Errorf("interrupted after %v; the deadline is 300ms", took)
			}
			failedStaysFailed(t, in, err)
			wantRows(t, instantiate(t, m, advInit), "c", "d")
		})
	}
}

func TestContextCancelInterrupts(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := load(t, r, "examples/adversarial/infinite-loop", Limits{Deadline: time.Minute})
	in := instantiate(t, m, advInit)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := in.Transform(ctx, values("loop"))
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("interrupted after %v", took)
	}
	wantTrap(t, err, "", "interrupted")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want it to wrap context.DeadlineExceeded", err)
	}
}

func TestMemoryBomb(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := load(t, r, "examples/adversarial/memory-bomb", Limits{MemoryBytes: 64 << 20})
	in := instantiate(t, m, advInit)
	wantRows(t, in, "a")
	_, err := in.Transform(context.Background(), values("a", "bomb"))
	te := wantTrap(t, err, LimitMemory, "memory limit reached: a memory.grow past 64 MiB failed, then: wasm error: unreachable")
	if !errors.Is(te, ErrMemoryLimit) {
		t.Errorf("errors.Is(err, ErrMemoryLimit) is false")
	}
	failedStaysFailed(t, in, err)
	wantRows(t, instantiate(t, m, advInit), "a", "b")
}

func TestProcExit(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := load(t, r, "examples/adversarial/proc-exit", Limits{})
	in := instantiate(t, m, advInit)
	_, err := in.Transform(context.Background(), values("a", "exit"))
	wantTrap(t, err, "", "sluice_transform: proc_exit(3)")
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 3 {
		t.Errorf("err = %v, want an ExitError with code 3", err)
	}
	wantRows(t, instantiate(t, m, advInit), "a")
}

func TestPanicEvery1000(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := load(t, r, "examples/adversarial/panic-every-1000", Limits{})

	t.Run("recovered by the SDK", func(t *testing.T) {
		in := instantiate(t, m, advInit)
		b := &Batch{Topic: "t"}
		for i := range 2500 {
			b.Records = append(b.Records, Record{Offset: int64(i), Value: []byte("v")})
		}
		out, err := in.Transform(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		res := results(t, out)
		if len(res) != 2500 {
			t.Fatalf("%d results", len(res))
		}
		for i, r := range res {
			switch {
			case i%1000 == 999:
				if want := fmt.Sprintf("panic: panic-every-1000: offset %d", i); r.err != want {
					t.Errorf("record %d: %+v, want error %q", i, r, want)
				}
			case r.err != "" || len(r.rows) != 1:
				t.Errorf("record %d: %+v, want one row", i, r)
			}
		}
	})
	t.Run("panic on another goroutine", func(t *testing.T) {
		in := instantiate(t, m, advInit)
		_, err := in.Transform(context.Background(), values("a", "crash"))
		// The Go runtime dies with runtime.abort, an unreachable.
		wantTrap(t, err, "", "wasm error: unreachable\nwasm stack trace:\n\t.runtime.abort(i32) i32\n\t.runtime.fatalpanic")
		wantRows(t, instantiate(t, m, advInit), "a")
	})
	t.Run("unreachable", func(t *testing.T) {
		in := instantiate(t, m, advInit)
		_, err := in.Transform(context.Background(), values("a", "trap"))
		wantTrap(t, err, "", "wasm error: unreachable\nwasm stack trace:\n\t.main.unreachable")
		wantRows(t, instantiate(t, m, advInit), "a")
	})
}

func TestMalformedRows(t *testing.T) {
	r := newTestRuntime(t, Config{})
	lim := Limits{MaxRowsPerRecord: 3, MaxOutputBytes: 64 << 10}
	m := load(t, r, "examples/adversarial/malformed-rows", lim)

	t.Run("bad RowBinary passes the framing", func(t *testing.T) {
		in := instantiate(t, m, advInit)
		out, err := in.Transform(context.Background(), values("a", "bad", "fanout:3"))
		if err != nil {
			t.Fatal(err)
		}
		got := results(t, out)
		want := []result{
			{rows: []string{"0:offset=0,value=a"}},
			{rows: []string{"0:offset=1 bad value "}}, // the sink's decoder fails this record alone
			{rows: []string{"0:offset=2,value=fanout:3", "0:offset=2,value=fanout:3", "0:offset=2,value=fanout:3"}},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("results %+v, want %+v", got, want)
		}
	})
	t.Run("error message capped", func(t *testing.T) {
		in := instantiate(t, m, advInit)
		out, err := in.Transform(context.Background(), values("longerr"))
		if err != nil {
			t.Fatal(err)
		}
		res, _ := out.Next()
		if !strings.HasPrefix(res.Err, "long error long error") || !strings.HasSuffix(res.Err, " …(truncated)") ||
			len(res.Err) != MaxErrorMessage+len(" …(truncated)") {
			t.Errorf("error of %d bytes: …%q", len(res.Err), res.Err[max(0, len(res.Err)-30):])
		}
	})
	for _, tt := range []struct {
		value    string
		limit    Limit
		want     string
		sentinel error
	}{
		{"badframe", "", "malformed output: record 1 row 0: length 1048576 past the end", ErrMalformedOutput},
		{"fanout:4", LimitOutputRows, "output limit exceeded: record 1 produced 4 rows; the limit is 3 per record", ErrOutputLimit},
		{"big:70000", LimitOutputBytes, "output limit exceeded: 70047 bytes of output for 2 records; the limit is 65536", ErrOutputLimit},
	} {
		t.Run(tt.value, func(t *testing.T) {
			in := instantiate(t, m, advInit)
			_, err := in.Transform(context.Background(), values("a", tt.value))
			te := wantTrap(t, err, tt.limit, tt.want)
			if !errors.Is(te, tt.sentinel) {
				t.Errorf("errors.Is(%v, %v) is false", err, tt.sentinel)
			}
			wantRows(t, instantiate(t, m, advInit), "a")
		})
	}
}

func TestForbiddenImport(t *testing.T) {
	r := newTestRuntime(t, Config{})
	_, err := r.Load(context.Background(), "forbidden-import", moduleWasm(t, "examples/adversarial/forbidden-import"))
	want := "module forbidden-import: imports env.whatever: only wasi_snapshot_preview1 and sluice imports are allowed"
	if err == nil || err.Error() != want {
		t.Fatalf("Load: %v, want %q", err, want)
	}
}

func TestOversizedRecords(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := load(t, r, "wasmhost/testdata/upper", Limits{MaxRecordBytes: 10})
	in := instantiate(t, m, advInit)
	b := values("short", "much too long", "ok")
	b.Records[2].Headers = []Header{{Key: "k", Value: []byte("1234567")}} // 2+8 bytes: at the limit
	out, err := in.Transform(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	want := []result{
		{rows: []string{"0:offset=0,value=SHORT"}},
		{err: "record of 13 bytes is over the module's limit of 10 bytes (key, value and headers); it was not passed to the module"},
		{rows: []string{"0:offset=2,value=OK"}},
	}
	if got := results(t, out); !reflect.DeepEqual(got, want) {
		t.Errorf("results %+v, want %+v", got, want)
	}
	// A batch of oversized records only never reaches the module.
	out, err = in.Transform(context.Background(), values("much too long", "also much too long"))
	if err != nil {
		t.Fatal(err)
	}
	want = []result{
		{err: "record of 13 bytes is over the module's limit of 10 bytes (key, value and headers); it was not passed to the module"},
		{err: "record of 18 bytes is over the module's limit of 10 bytes (key, value and headers); it was not passed to the module"},
	}
	if got := results(t, out); !reflect.DeepEqual(got, want) {
		t.Errorf("results %+v, want %+v", got, want)
	}
	// The instance still works after them (upper-case values come out as they are).
	wantRows(t, in, "A", "B")
}
