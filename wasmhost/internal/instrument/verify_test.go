package instrument

import (
	"strings"
	"testing"

	wt "github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

// Every module of the tests, rewritten, passes verify.
func TestVerifyPassesRewrites(t *testing.T) {
	for _, wasm := range [][]byte{
		testModule(countTo, spin, grow, callSpin),
		wt.Module{Version: 1, Transform: []byte{0x00, 0x0B}, Extra: []wt.Func{spin}, Start: 1}.Build(),
		wt.TableGrow(wt.Table{Min: 1}), wt.StackOverflow(), wt.MemoryGrow(),
		wt.StdoutFlood(1, 16, 1),
	} {
		out, _, err := Rewrite(wasm)
		if err != nil {
			t.Fatal(err)
		}
		if err := verify(wasm, out); err != nil {
			t.Errorf("verify: %v", err)
		}
	}
}

// verify catches a rewrite that lets a guest instruction reach what the
// rewrite adds, or that changes the guest's code.
func TestVerifyCatches(t *testing.T) {
	// callspin calls spin and spin loops: the rewrite inserts a countdown
	// in both and the depth count in callspin.
	orig := testModule(countTo, spin, grow, callSpin)
	out, _, err := Rewrite(orig)
	if err != nil {
		t.Fatal(err)
	}
	g := uint32(0) // the module has no globals: the added ones are 0 to 4
	countdown := countSeq(g+2, 4+4)
	for _, tc := range []struct {
		name      string
		from, to  []byte
		wantError string
	}{
		// A guest instruction of countTo, local.get 1, reads the budget.
		{"guest reads an added global", []byte{0x20, 0x01, 0x41, 0x01, 0x6A}, []byte{0x23, 0x02, 0x41, 0x01, 0x6A}, "instruction 0x20 changed"},
		// The countdown after spin's loop writes the interrupt flag.
		{"countdown writes another global", append(countdown, 0x0C, 0x00), append(countSeq(g, 8), 0x0C, 0x00), "a loop without the countdown"},
		// grow's memory.grow left in place: a guest grow the host does not see.
		{"memory.grow not redirected", []byte{0x20, 0x00, 0x10, 0x09, 0x0B}, []byte{0x20, 0x00, 0x40, 0x00, 0x0B}, "not replaced by the call of $grow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := strings.Count(string(out), string(tc.from)); n != 1 {
				t.Fatalf("the rewritten module holds %x %d times; want once", tc.from, n)
			}
			tampered := []byte(strings.Replace(string(out), string(tc.from), string(tc.to), 1))
			if err := verify(orig, tampered); err == nil || !strings.Contains(err.Error(), tc.wantError) {
				t.Fatalf("verify of the tampered module: %v; want %q", err, tc.wantError)
			}
		})
	}
}
