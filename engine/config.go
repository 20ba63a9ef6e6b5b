package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

// Config is a pipeline's configuration, read from YAML by LoadConfig.
type Config struct {
	// Kafka is the consumer: the brokers, the group, the topics and the
	// memory budget between poll and commit.
	Kafka KafkaConfig `yaml:"kafka"`
	// Module is the normalization module and the tables it writes. With
	// tenants, path, tables and params belong to each tenant pipeline
	// instead, and the other keys apply to every tenant's modules.
	Module ModuleConfig `yaml:"module"`
	// ClickHouse is the server the rows are inserted into. The tables must
	// exist before sluice starts: it reads their columns at startup, and a
	// missing table fails startup, naming it.
	ClickHouse clickhouse.Config `yaml:"clickhouse"`
	// DeadLetter is where records the module cannot normalize go.
	DeadLetter DeadLetterConfig `yaml:"dead_letter"`
	// Observability configures the metrics/health listener and traces.
	Observability ObservabilityConfig `yaml:"observability"`
	// Delivery is "at_least_once" (default): a record is committed once its
	// rows landed, and a crash, broker restart or rebalance inserts what
	// was in flight again. "exactly_once" records each insert's offsets in
	// the group's fenced offset commit before inserting it and replays a
	// recorded insert with the same deduplication token, so that no row
	// lands twice; it needs ClickHouse 22.2 or later and tables that keep
	// a deduplication window of at least 1000 inserts, checked at startup
	// (see docs/operations.md, "Exactly-once delivery").
	Delivery string `yaml:"delivery"`
	// ShutdownTimeout bounds the drain on SIGTERM: flush, insert, commit.
	// Default 30s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// Tenants, when given, replace module and kafka.topics: each tenant's
	// pipelines name their topics, allowed tables and module (see
	// docs/tenancy.md).
	Tenants []TenantConfig `yaml:"tenants"`
	// Admin is the module admin API and store, for tenants.
	Admin AdminConfig `yaml:"admin"`
	// MemoryLimit is the process's memory budget in bytes: the Go heap and
	// the modules' linear memory together. The Go runtime's soft memory
	// limit, which makes the garbage collector work harder as the heap
	// nears it, is memory_limit less the linear memory the module
	// instances have mapped (sluice_module_memory_bytes), followed every
	// 100 ms as instances grow and close. The heap keeps at least half of
	// memory_limit: when the modules' memory passes the other half, sluice
	// logs a warning and the process may pass memory_limit; raise it, or
	// lower module.limits.memory_bytes or the number of partitions the
	// process consumes (each partition's worker keeps an instance).
	// Default: 2 × kafka.max_inflight_bytes (with tenants: the sum of the
	// pipelines' budgets) + 192 MiB. -1 disables it. With GOMEMLIMIT set,
	// sluice leaves the runtime's limit to it, and GOMEMLIMIT covers the
	// Go heap only. The sluice binary sets the limit
	// (runtime/debug.SetMemoryLimit); New leaves the process's settings
	// alone, so that a program embedding the engine keeps its own.
	MemoryLimit int64 `yaml:"memory_limit"`
	// StuckCalls configures the catching of module calls that their
	// deadline did not stop.
	StuckCalls StuckCallConfig `yaml:"stuck_calls"`
}

// KafkaConfig says what to consume.
type KafkaConfig struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string `yaml:"brokers"`
	// Group is the consumer group id. Required.
	Group string `yaml:"group"`
	// Topics to consume. Required without tenants; with tenants, leave it
	// out: each tenant pipeline lists its topics.
	Topics []string `yaml:"topics"`
	// InstanceID enables static group membership: a restarted process with
	// the same id takes its partitions back at once instead of waiting for the
	// session timeout. Give each process its own. Default: none.
	InstanceID string `yaml:"instance_id"`
	// SessionTimeout is how long the group waits for a silent member before
	// reassigning its partitions. Default 45s (the broker's default).
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// ClientID names this client to the brokers. Default "sluice".
	ClientID string `yaml:"client_id"`
	// StartOffset is where a partition with no committed offset starts:
	// "earliest" (default) or "latest".
	StartOffset string `yaml:"start_offset"`
	// CommitInterval is how often acknowledged offsets are committed.
	// Default 1s.
	CommitInterval time.Duration `yaml:"commit_interval"`
	// ConnectTimeout bounds the first contact with the brokers at startup.
	// Default 5s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// MaxPollRecords bounds the records taken in one poll. Default 10000.
	MaxPollRecords int `yaml:"max_poll_records"`
	// RevokeTimeout bounds how long a revoked partition's in-flight rows
	// may take to be inserted before its offsets are committed. Default 20s.
	RevokeTimeout time.Duration `yaml:"revoke_timeout"`
	// MaxInflightBytes is the memory budget of records between poll and
	// commit (each record counts its key, value and headers twice plus 256
	// bytes until it is transformed, then once until every record fetched
	// with it is transformed and its dead letters produced, and the rows
	// made of it from when they are made until they land: an estimate of
	// what it holds). Fetching pauses when it is
	// reached and resumes below half of it; it is checked after each poll,
	// so one poll (max_poll_records) may go past it. Default 128 MiB.
	MaxInflightBytes int64 `yaml:"max_inflight_bytes"`
	// FetchMaxBytes bounds one fetch response. Default MaxInflightBytes/8,
	// at most 32 MiB.
	FetchMaxBytes int32 `yaml:"fetch_max_bytes"`
	// FetchMaxWait is how long the broker holds a fetch with no data. A
	// partition resumed after backpressure is fetched only once the fetch in
	// flight returns, so with idle topics beside busy ones this bounds how
	// late a resume takes effect. Default 100ms.
	FetchMaxWait time.Duration `yaml:"fetch_max_wait"`
}

// ObservabilityConfig configures metrics, health and traces.
type ObservabilityConfig struct {
	// Listen is the address of the /metrics, /healthz and /readyz server.
	// Default "127.0.0.1:9464"; "off" disables it.
	Listen string `yaml:"listen"`
	// Traces configures OpenTelemetry tracing; every field falls back to the
	// standard OTEL_* environment variables.
	Traces telemetry.TracesConfig `yaml:"traces"`
}

// DeadLetterConfig configures the dead-letter topic.
type DeadLetterConfig struct {
	// Topic receives every record the module fails on, with the reason in
	// its headers. Empty: a failing record stops the pipeline instead, naming
	// the record. Required with tenants: without it one tenant's
	// unprocessable record would stop every tenant's pipelines.
	Topic string `yaml:"topic"`
}

// ModuleConfig names the normalization module and its targets.
type ModuleConfig struct {
	// Path of the .wasm file. A relative path is relative to the working
	// directory, not to the config file. Required without tenants.
	Path string `yaml:"path"`
	// Name tags the module in logs and errors. Default: the file name
	// without .wasm.
	Name string `yaml:"name"`
	// Params are passed to the module at init.
	Params map[string]string `yaml:"params"`
	// Tables are the ClickHouse tables the module writes, in the order of
	// the module's table indexes. Each must exist in clickhouse.database.
	// Required without tenants.
	Tables []string `yaml:"tables"`
	// Limits bound each instance of the module.
	Limits ModuleLimits `yaml:"limits"`
	// MaxBatchRecords and MaxBatchBytes bound one call into the module: a
	// larger poll is handed over in several calls. They bound the guest's
	// memory. Defaults 1000 records and 1 MiB.
	MaxBatchRecords int `yaml:"max_batch_records"`
	MaxBatchBytes   int `yaml:"max_batch_bytes"`
	// MaxTrapsPerMinute is how many poison records (records that fail
	// alone on a fresh instance: a trap, a deadline or memory breach) and
	// failed instance starts a minute one partition's instances of a module
	// may have before that partition is paused for TrapCooldown and
	// readiness turns false; the failed calls of the partition's last
	// minute may also take at most this many plus one times the deadline.
	// It is counted per partition, so that one partition's poison records
	// do not pause the module's other partitions. Default 20.
	MaxTrapsPerMinute int `yaml:"max_traps_per_minute"`
	// TrapCooldown is how long a crash-looping module's partitions stay
	// paused before it is tried again. Default 30s.
	TrapCooldown time.Duration `yaml:"trap_cooldown"`
	// CallSlots is how many module calls (sluice_init and
	// sluice_transform, of every tenant) run at once. When calls wait, a
	// freed slot goes to the tenant with the fewest calls running, so that
	// tenants with work share the slots equally, whatever their number of
	// partitions. Default: the number of CPUs Go uses (GOMAXPROCS).
	CallSlots int `yaml:"call_slots"`
	// CacheDir keeps compiled modules across restarts. Default: the user's
	// cache directory + /sluice/wasm; "off" disables it. With the admin
	// API, the compiled code of modules that neither the module store
	// holds nor a pipeline runs (a refused upload, a deleted version) is
	// removed from it; one directory serves one process.
	CacheDir string `yaml:"cache_dir"`
}

// ModuleLimits are the sandbox limits of a module's instances. A breach
// fails the instance, which is replaced; the batch is bisected and the
// record that causes it is dead-lettered.
type ModuleLimits struct {
	// MemoryBytes caps an instance's linear memory. Default 128 MiB.
	MemoryBytes uint64 `yaml:"memory_bytes"`
	// Deadline bounds one call into the module (one batch). Default 5s.
	Deadline time.Duration `yaml:"deadline"`
	// MaxRowsPerRecord caps the rows one record may produce. Default 1000.
	MaxRowsPerRecord int `yaml:"max_rows_per_record"`
	// MaxOutputBytes caps one call's output. Default 64 MiB.
	MaxOutputBytes int `yaml:"max_output_bytes"`
	// MaxRecordBytes caps one input record (key, value, headers); a larger
	// record is dead-lettered without reaching the module. Default 4 MiB.
	MaxRecordBytes int `yaml:"max_record_bytes"`
}

func (l ModuleLimits) validate(key string) error {
	if l.Deadline < 0 || l.MaxRowsPerRecord < 0 || l.MaxOutputBytes < 0 || l.MaxRecordBytes < 0 {
		return fmt.Errorf("%s: deadline, max_rows_per_record, max_output_bytes and max_record_bytes must be positive", key)
	}
	if v := l.MemoryBytes; v != 0 && (v < 64<<10 || v > 4<<30) {
		return fmt.Errorf("%s.memory_bytes: %d is not between 64 KiB and 4 GiB", key, v)
	}
	return nil
}

// or returns l with its unset fields taken from d.
func (l ModuleLimits) or(d ModuleLimits) ModuleLimits {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.Deadline == 0 {
		l.Deadline = d.Deadline
	}
	if l.MaxRowsPerRecord == 0 {
		l.MaxRowsPerRecord = d.MaxRowsPerRecord
	}
	if l.MaxOutputBytes == 0 {
		l.MaxOutputBytes = d.MaxOutputBytes
	}
	if l.MaxRecordBytes == 0 {
		l.MaxRecordBytes = d.MaxRecordBytes
	}
	return l
}

func (l ModuleLimits) wasmhost() wasmhost.Limits {
	return wasmhost.Limits{
		MemoryBytes: l.MemoryBytes, Deadline: l.Deadline, MaxRowsPerRecord: l.MaxRowsPerRecord,
		MaxOutputBytes: l.MaxOutputBytes, MaxRecordBytes: l.MaxRecordBytes,
	}
}

// LoadConfig reads a YAML config file, substituting ${VAR} and
// ${VAR:-default} from the environment, and validates it.
func LoadConfig(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	cfg, err := ParseConfig(raw, os.LookupEnv)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	if cfg.Module.Path != "" && !filepath.IsAbs(cfg.Module.Path) {
		// A relative module path is relative to the working directory, as on
		// the command line.
		cfg.Module.Path = filepath.Clean(cfg.Module.Path)
	}
	return cfg, nil
}

// ParseConfig parses and validates a YAML config. lookup resolves ${VAR}.
func ParseConfig(raw []byte, lookup func(string) (string, bool)) (Config, error) {
	expanded, err := expandEnv(string(raw), lookup)
	if err != nil {
		return Config{}, err
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader([]byte(expanded)))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("empty config")
		}
		return Config{}, withSourceLines(err, expanded)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// validated returns cfg with its defaults applied and every field checked,
// leaving cfg itself and the slices it shares with its caller unchanged:
// New keeps the result, which nothing changes afterwards.
func validated(cfg Config) (Config, error) {
	cfg.Tenants = slices.Clone(cfg.Tenants)
	for i := range cfg.Tenants {
		cfg.Tenants[i].Pipelines = slices.Clone(cfg.Tenants[i].Pipelines)
	}
	err := cfg.Validate()
	return cfg, err
}

// Validate applies defaults and checks every field, naming the one at fault.
func (c *Config) Validate() error {
	k := &c.Kafka
	if len(k.Brokers) == 0 {
		return fmt.Errorf("kafka.brokers is required")
	}
	if k.Group == "" {
		return fmt.Errorf("kafka.group is required")
	}
	if len(c.Tenants) > 0 {
		if err := c.validateTenants(); err != nil {
			return err
		}
	} else {
		if err := c.Admin.validate(false); err != nil {
			return err
		}
		if len(k.Topics) == 0 {
			return fmt.Errorf("kafka.topics is required")
		}
	}
	if k.ClientID == "" {
		k.ClientID = "sluice"
	}
	switch k.StartOffset {
	case "":
		k.StartOffset = "earliest"
	case "earliest", "latest":
	default:
		return fmt.Errorf("kafka.start_offset: %q is not earliest or latest", k.StartOffset)
	}
	if k.SessionTimeout == 0 {
		k.SessionTimeout = 45 * time.Second
	}
	if k.SessionTimeout < 0 {
		return fmt.Errorf("kafka.session_timeout must be positive")
	}
	if k.CommitInterval == 0 {
		k.CommitInterval = time.Second
	}
	if k.ConnectTimeout == 0 {
		k.ConnectTimeout = 5 * time.Second
	}
	if k.RevokeTimeout == 0 {
		k.RevokeTimeout = 20 * time.Second
	}
	if k.MaxPollRecords == 0 {
		k.MaxPollRecords = 10000
	}
	if k.MaxInflightBytes == 0 {
		k.MaxInflightBytes = 128 << 20
	}
	if k.MaxInflightBytes < 1<<20 {
		return fmt.Errorf("kafka.max_inflight_bytes: at least 1 MiB, got %d", k.MaxInflightBytes)
	}
	if k.FetchMaxBytes == 0 {
		k.FetchMaxBytes = int32(min(k.MaxInflightBytes/8, 32<<20))
	}
	if k.FetchMaxWait == 0 {
		k.FetchMaxWait = 100 * time.Millisecond
	}
	if k.FetchMaxWait < 0 {
		return fmt.Errorf("kafka.fetch_max_wait must be positive")
	}
	if k.FetchMaxBytes < 0 {
		return fmt.Errorf("kafka.fetch_max_bytes must be positive")
	}
	if k.CommitInterval < 0 || k.ConnectTimeout < 0 || k.RevokeTimeout < 0 || k.MaxPollRecords < 0 {
		return fmt.Errorf("kafka: commit_interval, connect_timeout, revoke_timeout and max_poll_records must be positive")
	}
	m := &c.Module
	if len(c.Tenants) == 0 {
		if m.Path == "" {
			return fmt.Errorf("module.path is required")
		}
		if m.Name == "" {
			m.Name = strings.TrimSuffix(filepath.Base(m.Path), ".wasm")
		}
		if len(m.Tables) == 0 {
			return fmt.Errorf("module.tables is required")
		}
		if len(m.Tables) > 65535 {
			return fmt.Errorf("module.tables: at most 65535 tables")
		}
	}
	if err := m.Limits.validate("module.limits"); err != nil {
		return err
	}
	if m.MaxBatchRecords == 0 {
		m.MaxBatchRecords = 1000
	}
	if m.MaxBatchBytes == 0 {
		m.MaxBatchBytes = 1 << 20
	}
	if m.MaxBatchRecords < 0 || m.MaxBatchBytes < 0 {
		return fmt.Errorf("module.max_batch_records and module.max_batch_bytes must be positive")
	}
	if m.MaxTrapsPerMinute == 0 {
		m.MaxTrapsPerMinute = 20
	}
	if m.TrapCooldown == 0 {
		m.TrapCooldown = 30 * time.Second
	}
	if m.MaxTrapsPerMinute < 0 || m.TrapCooldown < 0 {
		return fmt.Errorf("module.max_traps_per_minute and module.trap_cooldown must be positive")
	}
	if m.CallSlots == 0 {
		m.CallSlots = runtime.GOMAXPROCS(0)
	}
	if m.CallSlots < 0 {
		return fmt.Errorf("module.call_slots must be positive")
	}
	if m.CacheDir == "" {
		if dir, err := os.UserCacheDir(); err == nil {
			m.CacheDir = filepath.Join(dir, "sluice", "wasm")
		}
	}
	if c.Observability.Listen == "" {
		c.Observability.Listen = "127.0.0.1:9464"
	}
	if err := c.Observability.Traces.Validate(os.Getenv); err != nil {
		return err
	}
	if c.MemoryLimit == 0 {
		c.MemoryLimit = 2*c.inflightBudget() + 192<<20
	}
	switch c.Delivery {
	case "":
		c.Delivery = DeliveryAtLeastOnce
	case DeliveryAtLeastOnce, DeliveryExactlyOnce:
	default:
		return fmt.Errorf("delivery: %q is not one of %s, %s", c.Delivery, DeliveryAtLeastOnce, DeliveryExactlyOnce)
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.ShutdownTimeout < 0 {
		return fmt.Errorf("shutdown_timeout must be positive")
	}
	if err := c.validateStuckCalls(); err != nil {
		return err
	}
	return c.ClickHouse.Validate()
}

// expandEnv substitutes ${VAR} and ${VAR:-default}; $$ is a literal $. An
// unset variable without a default is an error naming it.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	line := 1
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\n' {
			line++
		}
		if c != '$' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '{':
		default:
			b.WriteByte(c)
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			return "", fmt.Errorf("line %d: unterminated ${", line)
		}
		expr := s[i+2 : i+2+end]
		name, def, hasDef := strings.Cut(expr, ":-")
		if !validVarName(name) {
			return "", fmt.Errorf("line %d: ${%s}: %q is not a variable name", line, expr, name)
		}
		v, ok := lookup(name)
		switch {
		case ok && (v != "" || !hasDef):
			b.WriteString(v)
		case hasDef:
			b.WriteString(def)
		default:
			return "", fmt.Errorf("line %d: environment variable %s is not set (use ${%s:-default} for a default)", line, name, name)
		}
		i += 2 + end
	}
	return b.String(), nil
}

func validVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// withSourceLines quotes the config line that each YAML error points at, so
// that an error such as a bad duration names its key.
func withSourceLines(err error, src string) error {
	lines := strings.Split(src, "\n")
	msg := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n")
	var out []string
	for _, m := range strings.Split(msg, "\n") {
		m = strings.TrimSpace(m)
		var n int
		if _, scanErr := fmt.Sscanf(m, "line %d:", &n); scanErr == nil && n >= 1 && n <= len(lines) {
			m = fmt.Sprintf("%s (at %q)", m, strings.TrimSpace(lines[n-1]))
		}
		out = append(out, m)
	}
	return errors.New(strings.Join(out, "; "))
}
