// Package loggen generates deterministic JSON log lines for the log-normalize
// example, its demo and its tests, together with the values the module is
// expected to derive from each line.
package loggen

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"time"
)

// Line is one generated log line and what normalizing it must give.
type Line struct {
	JSON []byte
	// Expected values.
	TS          time.Time
	Service     string
	Level       string
	Template    string
	Fingerprint uint64
	Msg         string
	Attrs       map[string]string
}

// levelSpellings maps the spellings producers use to the normalized level.
var levelSpellings = []struct{ raw, norm string }{
	{"INFO", "info"}, {"info", "info"}, {"I", "info"}, {"Information", "info"},
	{"WARNING", "warn"}, {"warn", "warn"}, {"W", "warn"}, {"Warn", "warn"},
	{"ERROR", "error"}, {"err", "error"}, {"E", "error"},
	{"DEBUG", "debug"}, {"D", "debug"}, {"debug", "debug"},
	{"TRACE", "trace"}, {"FATAL", "fatal"}, {"CRITICAL", "fatal"},
}

// templates use {num}, {hex}, {uuid}, {ip}, {str} where the generator puts a
// value that the module must turn into the matching placeholder.
var templates = []string{
	"user {num} logged in from {ip}",
	"request {uuid} took {num} ms",
	"cache miss for key {str}",
	"connection to {ip} closed after {num} bytes",
	"flushed {num} rows to shard {num}",
	"trace {hex} exceeded budget",
	"payment {uuid} declined: code {num}",
	"retrying job {hex} in {num} seconds",
	"health check ok",
	"disk usage at {num} percent on volume {str}",
	"session {hex} expired for user {num}",
	"upstream {ip} returned status {num}",
}

var placeholders = map[string]string{
	"{num}": "<num>", "{hex}": "<hex>", "{uuid}": "<uuid>", "{ip}": "<ip>", "{str}": "<str>",
}

var services = []string{"checkout", "auth", "search", "billing", "gateway", "inventory"}

// Epoch is the timestamp of line 0; line i is i milliseconds later.
var Epoch = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// Generate returns line i of the deterministic stream seeded by seed.
func Generate(seed uint64, i int) Line {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	tmpl := templates[r.IntN(len(templates))]
	msg := fill(r, tmpl)
	tpl := tmpl
	for k, v := range placeholders {
		tpl = strings.ReplaceAll(tpl, k, v)
	}
	lv := levelSpellings[r.IntN(len(levelSpellings))]
	svc := services[r.IntN(len(services))]
	ts := Epoch.Add(time.Duration(i) * time.Millisecond)
	attrs := map[string]string{
		"seq":    fmt.Sprint(i),
		"region": []string{"eu-west-1", "us-east-1", "ap-south-1"}[r.IntN(3)],
	}
	doc := map[string]any{
		"ts": ts.Format(time.RFC3339Nano), "level": lv.raw, "service": svc, "msg": msg,
		"seq": i, "region": attrs["region"],
	}
	if r.IntN(4) == 0 {
		doc["retry"] = true
		attrs["retry"] = "true"
	}
	js, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	h := fnv.New64a()
	h.Write([]byte(tpl))
	return Line{
		JSON: js, TS: ts.Truncate(time.Second), Service: svc, Level: lv.norm,
		Template: tpl, Fingerprint: h.Sum64(), Msg: msg, Attrs: attrs,
	}
}

func fill(r *rand.Rand, tmpl string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		b.WriteString(tmpl[:i])
		j := strings.IndexByte(tmpl[i:], '}')
		switch tmpl[i : i+j+1] {
		case "{num}":
			fmt.Fprint(&b, r.IntN(100000))
		case "{hex}":
			fmt.Fprintf(&b, "%012x", (r.Uint64()&0xffffffffff)<<8|0x1a)
		case "{uuid}":
			fmt.Fprintf(&b, "%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff)
		case "{ip}":
			fmt.Fprintf(&b, "%d.%d.%d.%d", 10+r.IntN(200), r.IntN(256), r.IntN(256), 1+r.IntN(254))
		case "{str}":
			fmt.Fprintf(&b, "\"k%d\"", r.IntN(1000))
		}
		tmpl = tmpl[i+j+1:]
	}
}
