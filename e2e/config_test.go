package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testinfra"
)

// The config builder: the keys of sluice's YAML config (docs/config.md)
// that the suites set, as typed structs. A zero field is left out, so
// sluice applies its default.

type sluiceConfig struct {
	Kafka           kafkaConfig         `yaml:"kafka"`
	ClickHouse      clickhouseConfig    `yaml:"clickhouse"`
	DeadLetter      deadLetterConfig    `yaml:"dead_letter,omitempty"`
	Module          moduleConfig        `yaml:"module,omitempty"`
	Delivery        string              `yaml:"delivery,omitempty"`
	ShutdownTimeout duration            `yaml:"shutdown_timeout,omitempty"`
	Observability   observabilityConfig `yaml:"observability,omitempty"`
	Admin           adminConfig         `yaml:"admin,omitempty"`
	Tenants         []tenantConfig      `yaml:"tenants,omitempty"`
}

type kafkaConfig struct {
	Brokers          []string `yaml:"brokers"`
	Group            string   `yaml:"group"`
	Topics           []string `yaml:"topics,omitempty"`
	InstanceID       string   `yaml:"instance_id,omitempty"`
	SessionTimeout   duration `yaml:"session_timeout,omitempty"`
	CommitInterval   duration `yaml:"commit_interval,omitempty"`
	RevokeTimeout    duration `yaml:"revoke_timeout,omitempty"`
	MaxInflightBytes int64    `yaml:"max_inflight_bytes,omitempty"`
}

type clickhouseConfig struct {
	Addr                   string   `yaml:"addr"`
	RetryMax               duration `yaml:"retry_max,omitempty"`
	PermanentRetryInterval duration `yaml:"permanent_retry_interval,omitempty"`
}

type deadLetterConfig struct {
	Topic string `yaml:"topic,omitempty"`
}

// moduleConfig is the top-level module: a single pipeline's (path, tables,
// params) and every pipeline's cache_dir.
type moduleConfig struct {
	Path     string            `yaml:"path,omitempty"`
	Tables   []string          `yaml:"tables,omitempty"`
	Params   map[string]string `yaml:"params,omitempty"`
	CacheDir string            `yaml:"cache_dir,omitempty"`
}

type observabilityConfig struct {
	// Listen is an address, or "off".
	Listen string `yaml:"listen,omitempty"`
}

type adminConfig struct {
	Listen      string   `yaml:"listen,omitempty"`
	StoreDir    string   `yaml:"store_dir,omitempty"`
	AdminTokens []string `yaml:"admin_tokens,omitempty"`
}

type tenantConfig struct {
	ID                string           `yaml:"id"`
	Tokens            []string         `yaml:"tokens,omitempty"`
	MaxInflightBytes  int64            `yaml:"max_inflight_bytes,omitempty"`
	Limits            limitsConfig     `yaml:"limits,omitempty"`
	MaxTrapsPerMinute int              `yaml:"max_traps_per_minute,omitempty"`
	TrapCooldown      duration         `yaml:"trap_cooldown,omitempty"`
	Pipelines         []pipelineConfig `yaml:"pipelines"`
}

type limitsConfig struct {
	MemoryBytes    uint64   `yaml:"memory_bytes,omitempty"`
	Deadline       duration `yaml:"deadline,omitempty"`
	MaxOutputBytes int      `yaml:"max_output_bytes,omitempty"`
	MaxRecordBytes int      `yaml:"max_record_bytes,omitempty"`
}

type pipelineConfig struct {
	Name   string               `yaml:"name"`
	Topics []string             `yaml:"topics"`
	Tables []string             `yaml:"tables"`
	Module pipelineModuleConfig `yaml:"module"`
}

type pipelineModuleConfig struct {
	Path   string            `yaml:"path"`
	Params map[string]string `yaml:"params,omitempty"`
}

// duration is written as Go writes a duration ("500ms", "1m30s"), which
// is how sluice reads one.
type duration time.Duration

func (d duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// writeConfig marshals cfg to YAML at path.
func writeConfig(t *testing.T, path string, cfg *sluiceConfig) {
	t.Helper()
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// tokenHash is a token as the config lists it.
func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func fileSHA256(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestSuiteConfigsParse: the config each suite writes is one sluice
// accepts, every key known and every value valid, checked with its own
// parser without a server. (The suites' runs check the same through the
// binary, minutes later.)
func TestSuiteConfigsParse(t *testing.T) {
	fake := &env{kafka: &testinfra.Kafka{Addr: "127.0.0.1:9092"}, ch: &testinfra.ClickHouse{Addr: "127.0.0.1:9000"}}
	chaos := func(eo bool) *sluiceConfig {
		r := &chaosRun{prof: chaosProfile{shutdown: 10 * time.Second, eo: eo}, dir: "/run", group: "chaos-s1", dlq: "chaos-s1-dlq",
			acme: chaosTenant{id: "acme", topic: "chaos-s1-acme", table: "chaos_acme_s1"},
			beta: chaosTenant{id: "beta", topic: "chaos-s1-beta", table: "chaos_beta_s1"},
			env:  &chaosEnv{env: fake, v1: "/v1.wasm", cacheDir: "/cache"}}
		return r.config("a", "127.0.0.1:7001")
	}
	hostile := []isoPipeline{
		{name: "grow", module: "/table-grow.wasm", table: "adv", run: "mix1"},
		{name: "initfail", module: "/init-fails-later.wasm", table: "a_events", params: map[string]string{"table": "a_events"}, run: "mix1"},
	}
	iso := func(a []isoPipeline, b bool) *sluiceConfig {
		return isoConfig(fake.kafka.Addr, fake.ch.Addr, "mix1", "/cache", "/store", "127.0.0.1:7002", "127.0.0.1:7003", "/log-normalize.wasm", a, b)
	}
	fault := func(eo bool) *sluiceConfig {
		return faultConfig(fake.kafka.Addr, fake.ch.Addr, "kill9", "t_kill9", "logs_kill9", "/log-normalize.wasm", "/cache", "a", eo)
	}
	for name, cfg := range map[string]*sluiceConfig{
		"faults": fault(false), "faults exactly once": fault(true),
		"chaos": chaos(false), "chaos exactly once": chaos(true),
		"isolation solo": iso(nil, true), "isolation mix": iso(hostile, true), "isolation member 2": iso(hostile[:1], false),
	} {
		raw, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := engine.ParseConfig(raw, func(string) (string, bool) { return "", false })
		if err != nil {
			t.Errorf("%s: %v\n%s", name, err, raw)
			continue
		}
		// A value that reached the parsed config, from each part.
		if got.Kafka.Group != cfg.Kafka.Group || got.ClickHouse.Addr != cfg.ClickHouse.Addr || len(got.Tenants) != len(cfg.Tenants) ||
			got.ShutdownTimeout != time.Duration(cfg.ShutdownTimeout) || got.Delivery != cfg.Delivery && cfg.Delivery != "" {
			t.Errorf("%s: parsed %+v from\n%s", name, got, raw)
		}
	}
}
