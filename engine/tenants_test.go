package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/tenancy"
)

var tenantsYAML = `
kafka:
  brokers: [127.0.0.1:9092]
  group: g
clickhouse:
  addr: 127.0.0.1:9000
dead_letter:
  topic: dlq
module:
  limits:
    deadline: 2s
admin:
  listen: 127.0.0.1:9470
  store_dir: /var/lib/sluice/modules
  admin_tokens: ["` + tenancy.HashToken("admin") + `"]
tenants:
  - id: acme
    tokens: ["` + tenancy.HashToken("acme") + `"]
    limits:
      memory_bytes: 16777216
    max_traps_per_minute: 5
    pipelines:
      - name: logs
        topics: [acme-logs, acme-audit]
        tables: [acme_logs]
        module:
          path: ./modules/../acme.wasm
          params: {mode: strict}
  - id: beta
    pipelines:
      - name: events
        topics: [beta-events]
        tables: [beta_events, beta_errors]
`

func TestParseTenants(t *testing.T) {
	cfg, err := ParseConfig([]byte(tenantsYAML), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.topics(), ","); got != "acme-logs,acme-audit,beta-events" {
		t.Errorf("topics consumed = %q", got)
	}
	acme := cfg.Tenants[0]
	if acme.Pipelines[0].Module.Path != "acme.wasm" || acme.Pipelines[0].Module.Params["mode"] != "strict" {
		t.Errorf("acme pipeline: %+v", acme.Pipelines[0])
	}
	lim := acme.Limits.or(cfg.Module.Limits)
	if lim.MemoryBytes != 16<<20 || lim.Deadline != 2*time.Second {
		t.Errorf("acme limits over module.limits = %+v, want memory from the tenant and deadline from module", lim)
	}
	// Without budgets of their own, the two pipelines share
	// kafka.max_inflight_bytes, and the memory limit follows their sum.
	if b := cfg.pipelineBudget(cfg.Tenants[1]); b != 64<<20 {
		t.Errorf("beta's pipeline budget = %d, want half of the default 128 MiB", b)
	}
	if cfg.MemoryLimit != 2*128<<20+192<<20 {
		t.Errorf("memory_limit default = %d, want 2 × 128 MiB + 192 MiB", cfg.MemoryLimit)
	}
	if cfg.Admin.MaxModuleBytes != 32<<20 {
		t.Errorf("admin.max_module_bytes default = %d", cfg.Admin.MaxModuleBytes)
	}
	// Validate runs again in New: it must accept its own output.
	if err := cfg.Validate(); err != nil {
		t.Errorf("second Validate: %v", err)
	}
	if got := strings.Join(cfg.topics(), ","); got != "acme-logs,acme-audit,beta-events" || len(cfg.Kafka.Topics) != 0 {
		t.Errorf("topics consumed after a second Validate = %q, kafka.topics %q", got, cfg.Kafka.Topics)
	}
}

func TestTenantConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ edit, old, new, want string }{
		{"topics in kafka", "  group: g\n", "  group: g\n  topics: [x]\n", "kafka.topics: with tenants"},
		{"module path at top", "module:\n", "module:\n  path: m.wasm\n", "module: path, tables and params belong to each tenant pipeline"},
		{"no store", "  store_dir: /var/lib/sluice/modules\n", "", "admin.store_dir is required"},
		{"no dead letter", "dead_letter:\n  topic: dlq\n", "", "dead_letter.topic is required with tenants"},
		{"bad token hash", `tokens: ["` + tenancy.HashToken("acme") + `"]`, `tokens: ["plaintext"]`, "tenants[acme].tokens[0]"},
		{"bad admin token", `admin_tokens: ["` + tenancy.HashToken("admin") + `"]`, `admin_tokens: ["sha256:xyz"]`, "admin.admin_tokens[0]"},
		{"duplicate topic", "topics: [beta-events]", "topics: [acme-logs]", "tenants[beta].pipelines[events].topics: topic acme-logs already belongs to acme/logs"},
		{"bad tenant id", "- id: beta", "- id: Beta Corp", "tenants[1].id"},
		{"duplicate tenant", "- id: beta", "- id: acme", "tenants[1].id: tenant acme is listed twice"},
		{"no tables", "tables: [beta_events, beta_errors]", "tables: []", "tenants[beta].pipelines[events].tables is required"},
		{"bad limit", "memory_bytes: 16777216", "memory_bytes: 1", "tenants[acme].limits.memory_bytes"},
		{"tls half", "  listen: 127.0.0.1:9470\n", "  listen: 127.0.0.1:9470\n  tls: {cert_file: c.pem}\n", "admin.tls: cert_file and key_file go together"},
	} {
		raw := strings.Replace(tenantsYAML, tc.old, tc.new, 1)
		if raw == tenantsYAML {
			t.Fatalf("%s: edit did not apply", tc.edit)
		}
		_, err := ParseConfig([]byte(raw), env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.edit, err, tc.want)
		}
	}
	// The admin API needs tenants.
	_, err := ParseConfig([]byte(minimal+"admin:\n  listen: 127.0.0.1:1\n"), env(map[string]string{"CH_ADDR": "x:1"}))
	if err == nil || !strings.Contains(err.Error(), "admin: the module admin API needs tenants") {
		t.Errorf("admin without tenants: %v", err)
	}
}

// TestValidatedLeavesTheCallersConfig: New validates a copy of its config;
// the caller's value, and the tenant slices it shares with that copy, are
// not changed by the defaults validation applies.
func TestValidatedLeavesTheCallersConfig(t *testing.T) {
	cfg := Config{Kafka: KafkaConfig{Brokers: []string{"127.0.0.1:9092"}, Group: "g"},
		DeadLetter: DeadLetterConfig{Topic: "dlq"},
		Admin:      AdminConfig{StoreDir: t.TempDir()},
		Tenants: []TenantConfig{{ID: "acme", Pipelines: []TenantPipelineConfig{{Name: "logs", Topics: []string{"logs"},
			Tables: []string{"logs"}, Module: TenantModuleConfig{Path: "./mods/../acme.wasm"}}}}}}
	cfg.ClickHouse.Addr = "127.0.0.1:9000"
	got, err := validated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Tenants[0].Pipelines[0].Module.Path; p != "acme.wasm" {
		t.Errorf("validated module path %q, want it cleaned", p)
	}
	if p := cfg.Tenants[0].Pipelines[0].Module.Path; p != "./mods/../acme.wasm" {
		t.Errorf("the caller's module path became %q", p)
	}
	if cfg.Kafka.ClientID != "" || cfg.MemoryLimit != 0 {
		t.Errorf("the caller's config got defaults: client id %q, memory limit %d", cfg.Kafka.ClientID, cfg.MemoryLimit)
	}
}
