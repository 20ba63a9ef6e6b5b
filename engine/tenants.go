package engine

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/engine/tenancy"
)

// TenantConfig is one tenant: who it is, what it may consume and write, its
// modules' limits, and the hashes of its API tokens.
type TenantConfig struct {
	// ID names the tenant in the API, logs and metrics. Required.
	ID string `yaml:"id"`
	// Tokens are the tenant's API tokens, hashed: "sha256:<hex>" (sluice
	// token hash prints it). The tokens themselves are never stored.
	Tokens []string `yaml:"tokens"`
	// Limits bound each instance of the tenant's modules; unset fields take
	// module.limits.
	Limits ModuleLimits `yaml:"limits"`
	// MaxInflightBytes is the tenant's share of memory between poll and
	// commit, per pipeline: fetching of a pipeline's topics pauses at it
	// without affecting other pipelines. Default: kafka.max_inflight_bytes
	// divided by the number of pipelines of all tenants.
	MaxInflightBytes int64 `yaml:"max_inflight_bytes"`
	// MaxTrapsPerMinute and TrapCooldown override module's for the tenant's
	// modules: a crash-looping module burns at most (MaxTrapsPerMinute + 1)
	// × limits.deadline of CPU per partition before it is paused for
	// TrapCooldown.
	MaxTrapsPerMinute int           `yaml:"max_traps_per_minute"`
	TrapCooldown      time.Duration `yaml:"trap_cooldown"`
	// Pipelines are the tenant's topic → module → tables routes. Required.
	Pipelines []TenantPipelineConfig `yaml:"pipelines"`
}

// TenantPipelineConfig is one route of a tenant.
type TenantPipelineConfig struct {
	// Name names the pipeline in the API. Required.
	Name string `yaml:"name"`
	// Topics are consumed into this pipeline's module. Required; a topic
	// belongs to one pipeline.
	Topics []string `yaml:"topics"`
	// Tables are the tables the pipeline's module may write, handed to it
	// at init in this order. Required.
	Tables []string `yaml:"tables"`
	// Module is the module to run until one is activated through the
	// admin API (the store's active version wins). Optional: without one,
	// the pipeline's topics are consumed from the first activation on.
	Module TenantModuleConfig `yaml:"module"`
}

// TenantModuleConfig is a pipeline's initial module.
type TenantModuleConfig struct {
	// Path of the .wasm file, relative to the working directory if it is
	// not absolute. Default: none, the pipeline waits for an activation.
	Path string `yaml:"path"`
	// Params are passed at init to every module the pipeline runs, this
	// one and those activated through the admin API.
	Params map[string]string `yaml:"params"`
}

// AdminConfig is the module admin API.
type AdminConfig struct {
	// Listen is the API's own listener, host:port. Empty disables the API.
	Listen string `yaml:"listen"`
	// TLS serves the API over HTTPS with this certificate and key.
	TLS AdminTLS `yaml:"tls"`
	// StoreDir keeps uploaded modules and the manifest of active
	// versions. Required with tenants.
	StoreDir string `yaml:"store_dir"`
	// MaxModuleBytes caps an upload. Default 32 MiB.
	MaxModuleBytes int64 `yaml:"max_module_bytes"`
	// CheckTimeout bounds the check of an upload or an activation
	// (compile, ABI, init with the live schemas, dry run): past it the
	// check is stopped, the client gets 503 and nothing changes. Default
	// 60s.
	CheckTimeout time.Duration `yaml:"check_timeout"`
	// AdminTokens are the hashes of the tokens that manage every tenant.
	AdminTokens []string `yaml:"admin_tokens"`
}

// AdminTLS names the API's certificate files (PEM).
type AdminTLS struct {
	// CertFile is the certificate chain, KeyFile its private key; give both
	// or neither. Default: none, the API serves plain HTTP.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

func (a *AdminConfig) validate(tenants bool) error {
	if !tenants {
		if a.Listen != "" || a.StoreDir != "" || len(a.AdminTokens) > 0 {
			return fmt.Errorf("admin: the module admin API needs tenants")
		}
		return nil
	}
	if a.StoreDir == "" {
		return fmt.Errorf("admin.store_dir is required with tenants")
	}
	a.StoreDir = filepath.Clean(a.StoreDir)
	if (a.TLS.CertFile == "") != (a.TLS.KeyFile == "") {
		return fmt.Errorf("admin.tls: cert_file and key_file go together")
	}
	if a.MaxModuleBytes == 0 {
		a.MaxModuleBytes = 32 << 20
	}
	if a.MaxModuleBytes < 0 {
		return fmt.Errorf("admin.max_module_bytes must be positive")
	}
	if a.CheckTimeout == 0 {
		a.CheckTimeout = 60 * time.Second
	}
	if a.CheckTimeout < 0 {
		return fmt.Errorf("admin.check_timeout must be positive")
	}
	for i, h := range a.AdminTokens {
		if _, err := tenancy.NewAuth([]string{h}, nil); err != nil {
			return fmt.Errorf("admin.admin_tokens[%d]: %w", i, err)
		}
	}
	return nil
}

// topics are the topics the pipeline consumes: kafka.topics, or with
// tenants those of every tenant pipeline, in order.
func (c *Config) topics() []string {
	if len(c.Tenants) == 0 {
		return c.Kafka.Topics
	}
	var out []string
	for _, t := range c.Tenants {
		for _, pl := range t.Pipelines {
			out = append(out, pl.Topics...)
		}
	}
	return out
}

// validateTenants checks the tenants; their pipelines name the topics
// consumed (see topics).
func (c *Config) validateTenants() error {
	if c.Module.Path != "" || len(c.Module.Tables) > 0 || len(c.Module.Params) > 0 {
		return fmt.Errorf("module: path, tables and params belong to each tenant pipeline when tenants are configured (module keeps the defaults: limits, batching, cache_dir)")
	}
	if len(c.Kafka.Topics) > 0 {
		return fmt.Errorf("kafka.topics: with tenants, topics are listed per tenant pipeline")
	}
	if err := c.Admin.validate(true); err != nil {
		return err
	}
	if c.DeadLetter.Topic == "" {
		return fmt.Errorf("dead_letter.topic is required with tenants: without it one tenant's unprocessable record would stop every tenant's pipelines")
	}
	seenTenant := map[string]bool{}
	topicOwner := map[string]string{}
	for i := range c.Tenants {
		t := &c.Tenants[i]
		key := fmt.Sprintf("tenants[%d]", i)
		if err := tenancy.ValidName(t.ID); err != nil {
			return fmt.Errorf("%s.id: %w", key, err)
		}
		if seenTenant[t.ID] {
			return fmt.Errorf("%s.id: tenant %s is listed twice", key, t.ID)
		}
		seenTenant[t.ID] = true
		key = fmt.Sprintf("tenants[%s]", t.ID)
		for j, h := range t.Tokens {
			if _, err := tenancy.NewAuth(nil, map[string][]string{t.ID: {h}}); err != nil {
				return fmt.Errorf("%s.tokens[%d]: %w", key, j, err)
			}
		}
		if err := t.Limits.validate(key + ".limits"); err != nil {
			return err
		}
		if t.MaxInflightBytes < 0 || (t.MaxInflightBytes > 0 && t.MaxInflightBytes < 1<<20) {
			return fmt.Errorf("%s.max_inflight_bytes: at least 1 MiB, got %d", key, t.MaxInflightBytes)
		}
		if t.MaxTrapsPerMinute < 0 || t.TrapCooldown < 0 {
			return fmt.Errorf("%s: max_traps_per_minute and trap_cooldown must be positive", key)
		}
		if len(t.Pipelines) == 0 {
			return fmt.Errorf("%s.pipelines is required", key)
		}
		seenPipe := map[string]bool{}
		for j := range t.Pipelines {
			pl := &t.Pipelines[j]
			pkey := fmt.Sprintf("%s.pipelines[%d]", key, j)
			if err := tenancy.ValidName(pl.Name); err != nil {
				return fmt.Errorf("%s.name: %w", pkey, err)
			}
			if seenPipe[pl.Name] {
				return fmt.Errorf("%s.name: pipeline %s is listed twice", pkey, pl.Name)
			}
			seenPipe[pl.Name] = true
			pkey = fmt.Sprintf("%s.pipelines[%s]", key, pl.Name)
			if len(pl.Topics) == 0 {
				return fmt.Errorf("%s.topics is required", pkey)
			}
			for _, topic := range pl.Topics {
				if owner, ok := topicOwner[topic]; ok {
					return fmt.Errorf("%s.topics: topic %s already belongs to %s", pkey, topic, owner)
				}
				topicOwner[topic] = t.ID + "/" + pl.Name
			}
			if len(pl.Tables) == 0 {
				return fmt.Errorf("%s.tables is required", pkey)
			}
			if len(pl.Tables) > 65535 {
				return fmt.Errorf("%s.tables: at most 65535 tables", pkey)
			}
			if pl.Module.Path != "" {
				pl.Module.Path = filepath.Clean(pl.Module.Path)
			}
		}
	}
	return nil
}

// pipelineBudget is the in-flight budget of each of t's pipelines.
func (c *Config) pipelineBudget(t TenantConfig) int64 {
	if t.MaxInflightBytes > 0 {
		return t.MaxInflightBytes
	}
	n := 0
	for _, t := range c.Tenants {
		n += len(t.Pipelines)
	}
	return max(c.Kafka.MaxInflightBytes/int64(max(n, 1)), 1<<20)
}

// inflightBudget is the sum of the pipelines' in-flight budgets.
func (c *Config) inflightBudget() int64 {
	if len(c.Tenants) == 0 {
		return c.Kafka.MaxInflightBytes
	}
	var sum int64
	for _, t := range c.Tenants {
		sum += c.pipelineBudget(t) * int64(len(t.Pipelines))
	}
	return sum
}
