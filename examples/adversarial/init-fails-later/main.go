// Command init-fails-later is an adversarial sluice module that passes the
// checks made at activation but whose later instances may refuse init: init
// fails whenever the wall-clock second divided by the period is odd, so
// an instance created to replace a failed one, or by a restarted process,
// fails init half of the time. The period is main.version "period=N" in
// seconds (default 4; wasmbuild.BuildVersion sets it). A record whose offset
// is 63 mod 64 makes it call os.Exit(3), failing the instance, so
// replacements happen while it runs.
//
// Every other record becomes one row of the table named by the "table"
// parameter (default "events"):
//
//	CREATE TABLE events (topic String, partition Int32, offset Int64, version String, value String)
//	ENGINE = MergeTree ORDER BY (topic, partition, offset)
package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

var version = "period=4"

func init() { sluice.Run(&module{}) }

func main() {}

type module struct{ events *sluice.Table }

func period() int64 {
	if v, ok := strings.CutPrefix(version, "period="); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 4
}

func (m *module) Init(cfg *sluice.Config) (err error) {
	if (time.Now().Unix()/period())%2 == 1 {
		return errors.New("init-fails-later: refusing init in an odd window")
	}
	name, ok := cfg.Param("table")
	if !ok {
		name = "events"
	}
	if m.events, err = cfg.Table(name); err != nil {
		return err
	}
	return m.events.Expect(sluice.Col("topic", "String"), sluice.Col("partition", "Int32"),
		sluice.Col("offset", "Int64"), sluice.Col("version", "String"), sluice.Col("value", "String"))
}

func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
	if rec.Offset%64 == 63 {
		os.Exit(3)
	}
	return out.Row(m.events).String(rec.Topic).Int32(rec.Partition).Int64(rec.Offset).
		String("init-fails-later").Bytes(rec.Value).End()
}
