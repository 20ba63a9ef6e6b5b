package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The chaos harness runs the real sluice binary with two tenants against the
// real broker and ClickHouse, injects faults at moments drawn from a seed,
// restarts sluice whenever it exits (as systemd's Restart=always would), and
// then checks delivery with its own reading of Kafka's committed offsets,
// the tables and the dead-letter topic: nothing here calls sluice's code.

// chaosProfile sizes a chaos run.
type chaosProfile struct {
	name       string
	seeds      []uint64
	rate       int           // records/s per tenant while the faults run
	minRecords int           // per tenant, at least
	extraFault int           // faults drawn on top of one of each kind
	hold       [2]float64    // seconds a fault lasts, min and max
	gap        [2]float64    // seconds between faults, min and max
	stall      time.Duration // quiescence: committed offsets still for this long
	quiesceMax time.Duration // quiescence: at most this long
	flow       time.Duration // between faults, wait at most this long for a commit
	shutdown   time.Duration // sluice's shutdown_timeout
	skip       []string      // fault kinds left out (SLUICE_CHAOS_SKIP)
	// eo runs sluice with delivery: exactly_once on ClickHouse 26.9, into
	// tables with a deduplication window (SLUICE_CHAOS_DELIVERY): a seed
	// then also fails on any duplicate.
	eo bool
}

func chaosProfileFromEnv(t *testing.T) chaosProfile {
	p := chaosProfile{
		name: "reduced", rate: 25, minRecords: 1000, hold: [2]float64{1.5, 3}, gap: [2]float64{0.3, 1.5},
		stall: 30 * time.Second, quiesceMax: 90 * time.Second, flow: 10 * time.Second, shutdown: 10 * time.Second,
	}
	n := 2
	if os.Getenv("SLUICE_CHAOS") == "full" {
		p = chaosProfile{
			name: "full", rate: 100, minRecords: 10_000, extraFault: 2, hold: [2]float64{2, 6}, gap: [2]float64{0.5, 3},
			stall: 45 * time.Second, quiesceMax: 3 * time.Minute, flow: 20 * time.Second, shutdown: 10 * time.Second,
		}
		n = 50
	}
	if v := os.Getenv("SLUICE_CHAOS_SEEDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("SLUICE_CHAOS_SEEDS=%q: want a count of seeds", v)
		}
	}
	switch v := os.Getenv("SLUICE_CHAOS_DELIVERY"); v {
	case "", "at_least_once":
	case "exactly_once":
		p.eo = true
	default:
		t.Fatalf("SLUICE_CHAOS_DELIVERY=%q: want at_least_once or exactly_once", v)
	}
	if v := os.Getenv("SLUICE_CHAOS_SKIP"); v != "" {
		for _, k := range strings.Split(v, ",") {
			if !slices.Contains(chaosKinds, k) {
				t.Fatalf("SLUICE_CHAOS_SKIP: %q is not one of %v", k, chaosKinds)
			}
			p.skip = append(p.skip, k)
		}
	}
	first := uint64(1)
	if v := os.Getenv("SLUICE_CHAOS_SEED"); v != "" {
		var err error
		if first, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("SLUICE_CHAOS_SEED=%q: want a number", v)
		}
	}
	for i := range n {
		p.seeds = append(p.seeds, first+uint64(i))
	}
	return p
}

// The fault kinds. Each seed runs every kind once, in an order and at
// moments drawn from the seed, plus extraFault more drawn at random.
const (
	faultKill9         = "kill9"           // kill -9 of a sluice instance
	faultTermCHDown    = "sigterm_ch_down" // SIGTERM to sluice while ClickHouse is stopped
	faultCHStop        = "ch_stop"         // ClickHouse stopped (SIGTERM), then started
	faultCHFreeze      = "ch_freeze"       // ClickHouse kill -STOP, then kill -CONT
	faultCHKill        = "ch_kill"         // ClickHouse kill -9, then started
	faultBrokerRestart = "broker_restart"  // the Kafka broker stopped and started
	faultRebalance     = "rebalance"       // a second instance joins, then leaves
	faultInitFail      = "init_fail"       // tenant acme activates a module whose later instances refuse init (and, half of the time, b joins and leaves meanwhile)
	faultOversized     = "oversized_dlq"   // a record too large for the dead-letter producer
	faultDropColumn    = "drop_column"     // tenant beta's table loses a column, then gets it back
)

var chaosKinds = []string{faultKill9, faultTermCHDown, faultCHStop, faultCHFreeze, faultCHKill,
	faultBrokerRestart, faultRebalance, faultInitFail, faultOversized, faultDropColumn}

type chaosFault struct {
	kind string
	gap  time.Duration // wait before it
	hold time.Duration // how long it lasts
	pick int           // a free draw (which instance, which partition)
}

func (f chaosFault) String() string {
	return fmt.Sprintf("%s(+%.1fs, %.1fs)", f.kind, f.gap.Seconds(), f.hold.Seconds())
}

// chaosPlan draws a seed's faults.
func chaosPlan(rng *rand.Rand, p chaosProfile) []chaosFault {
	var all []string
	for _, k := range chaosKinds {
		if !slices.Contains(p.skip, k) {
			all = append(all, k)
		}
	}
	kinds := append([]string(nil), all...)
	for i := 0; i < p.extraFault && len(all) > 0; i++ {
		kinds = append(kinds, all[rng.IntN(len(all))])
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	secs := func(r [2]float64) time.Duration {
		return time.Duration((r[0] + rng.Float64()*(r[1]-r[0])) * float64(time.Second))
	}
	var plan []chaosFault
	for _, k := range kinds {
		plan = append(plan, chaosFault{kind: k, gap: secs(p.gap), hold: secs(p.hold), pick: rng.IntN(1 << 20)})
	}
	return plan
}
