package testinfra

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Server is a kind of ClickHouse server the tests run against.
type Server string

const (
	// Legacy is Debian's clickhouse-server 18.16 (protocol revision 54412):
	// no per-query settings over the native protocol before revision
	// 54420, no DateTime64, Map, JSON, insert_deduplication_token or async
	// inserts.
	Legacy Server = "18.16"
	// Modern is ClickHouse 26.9, the engine in PyPI's chdb-core, whose
	// clickhouse-local serves the native and HTTP interfaces on loopback.
	// It has no Keeper (no Replicated tables) and no TLS ports, and
	// defaults to async_insert=1.
	Modern Server = "26.9"
)

// Servers are the kinds of server the server matrix runs on, oldest first.
var Servers = []Server{Legacy, Modern}

// ChdbVersion is the chdb-core release scripts/deps.sh installs.
const ChdbVersion = "26.9.0"

// DefaultServer is the server ClickHouseOptions.Server defaults to:
// $SLUICE_CLICKHOUSE ("18.16" or "26.9"; "legacy" and "modern" also work),
// else Legacy. Setting it runs every test that does not pick a server
// against that one.
func DefaultServer() Server {
	switch v := strings.TrimSpace(os.Getenv("SLUICE_CLICKHOUSE")); strings.ToLower(v) {
	case "", "legacy", string(Legacy):
		return Legacy
	case "modern", string(Modern):
		return Modern
	default:
		return Server(v) // StartClickHouse reports it
	}
}

// DefaultChdbVenv is where scripts/deps.sh installs chdb-core: $SLUICE_CHDB,
// else ${SLUICE_CACHE:-$HOME/.cache/sluice}/chdb-26.9.0.
func DefaultChdbVenv() string {
	if d := os.Getenv("SLUICE_CHDB"); d != "" {
		return d
	}
	return filepath.Join(cacheDir(), "chdb-"+ChdbVersion)
}

// cacheDir is ${SLUICE_CACHE:-$HOME/.cache/sluice}.
func cacheDir() string {
	if d := os.Getenv("SLUICE_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "sluice")
}

// Version is a ClickHouse release as version() reports it.
type Version struct {
	Major, Minor, Patch int
	Full                string // e.g. "26.9.2.1"
}

// ParseVersion reads "18.16.1" or "26.9.2.1".
func ParseVersion(s string) (Version, error) {
	f := strings.Split(s, ".")
	if len(f) < 2 {
		return Version{}, fmt.Errorf("version %q is not major.minor[.patch…]", s)
	}
	v := Version{Full: s}
	for i, p := range []*int{&v.Major, &v.Minor, &v.Patch} {
		if i >= len(f) {
			break
		}
		n, err := strconv.Atoi(f[i])
		if err != nil {
			return Version{}, fmt.Errorf("version %q: %w", s, err)
		}
		*p = n
	}
	return v, nil
}

// AtLeast reports whether v is major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

func (v Version) String() string { return v.Full }

// Capabilities are what a server can do that tests and sluice adapt to,
// as the server reported them on its first start.
type Capabilities struct {
	// QuerySettings: the native protocol carries per-query settings at the
	// revision sluice speaks (false for 18.16, whose revision 54412 is
	// below the 54420 ch-go needs; HTTP always carries them).
	QuerySettings bool
	// DedupToken: the insert_deduplication_token setting exists.
	DedupToken bool
	// AsyncInsert: the async_insert setting exists.
	AsyncInsert bool
	// QueryLog: system.query_log is enabled (Modern's config enables it).
	QueryLog bool
	// Types are the data type families the server knows, of those sluice
	// tests: DateTime64, Date32, Bool, IPv4, IPv6, Map, JSON, Int128,
	// UInt128, Int256, UInt256, Decimal256, Object.
	Types map[string]bool
}

// Capabilities reports what c's server can do.
func (c *ClickHouse) Capabilities() Capabilities { return c.caps }

// HasType reports whether the server knows the data type family name.
func (c *ClickHouse) HasType(name string) bool { return c.caps.Types[name] }

// probedTypes are the type families Capabilities.Types asks about.
var probedTypes = []string{"DateTime64", "Date32", "Bool", "IPv4", "IPv6", "Map", "JSON",
	"Int128", "UInt128", "Int256", "UInt256", "Decimal256", "Object"}

// probe fills c.Version and c.caps from the running server.
func (c *ClickHouse) probe(ctx context.Context) error {
	v, err := c.Query(ctx, "SELECT version()")
	if err != nil {
		return err
	}
	if c.Version, err = ParseVersion(strings.TrimSpace(v)); err != nil {
		return err
	}
	quoted := make([]string, len(probedTypes))
	for i, t := range probedTypes {
		quoted[i] = "'" + t + "'"
	}
	types, err := c.Query(ctx, "SELECT name FROM system.data_type_families WHERE name IN ("+strings.Join(quoted, ",")+")")
	if err != nil {
		return err
	}
	settings, err := c.Query(ctx, "SELECT name FROM system.settings WHERE name IN ('insert_deduplication_token', 'async_insert')")
	if err != nil {
		return err
	}
	c.caps = Capabilities{
		QuerySettings: c.Version.AtLeast(19, 1),
		QueryLog:      c.Server == Modern,
		Types:         map[string]bool{},
	}
	for _, name := range strings.Fields(types) {
		c.caps.Types[name] = true
	}
	for _, name := range strings.Fields(settings) {
		switch name {
		case "insert_deduplication_token":
			c.caps.DedupToken = true
		case "async_insert":
			c.caps.AsyncInsert = true
		}
	}
	return nil
}

//go:embed chdb_serve.py
var chdbServeScript string

// chdbLauncher is the launcher's file name in a Modern server's Dir.
const chdbLauncher = "chdb_serve.py"

// writeModernConfig writes config.xml (read by clickhouse-local from its
// working directory), users.xml and the launcher into c.Dir.
func (c *ClickHouse) writeModernConfig() error {
	for _, d := range []string{"data", "user_files", "format_schemas", "log"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return err
		}
	}
	p := func(elems ...string) string { return xmlText(filepath.Join(append([]string{c.Dir}, elems...)...)) }
	// No <log>: clickhouse-local wrote it at trace level whatever <level>
	// said (95 KB for 20 queries here); the error log is what a failing
	// test shows.
	config := fmt.Sprintf(`<?xml version="1.0"?>
<!-- Written by sluice internal/testinfra for a test-only ClickHouse %s (chdb-core clickhouse-local). -->
<clickhouse>
    <logger>
        <level>warning</level>
        <errorlog>%s</errorlog>
        <size>100M</size>
        <count>2</count>
        <console>false</console>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>%d</tcp_port>
    <http_port>%d</http_port>
    <user_files_path>%s/</user_files_path>
    <format_schema_path>%s/</format_schema_path>
    <users_config>users.xml</users_config>
    <default_profile>default</default_profile>
    <timezone>%s</timezone>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_table_size_to_drop>0</max_table_size_to_drop>
    <max_partition_size_to_drop>0</max_partition_size_to_drop>
    <query_log>
        <database>system</database>
        <table>query_log</table>
        <flush_interval_milliseconds>1000</flush_interval_milliseconds>
    </query_log>
    <remote_servers>%s</remote_servers>
    <kafka>
        <auto_offset_reset>smallest</auto_offset_reset>
    </kafka>
%s
</clickhouse>
`, Modern, p("log", "clickhouse-server.err.log"),
		c.TCPPort, c.HTTPPort, p("user_files"), p("format_schemas"),
		xmlText(c.opts.Timezone), c.opts.RemoteServers, c.opts.ExtraConfig)

	users := fmt.Sprintf(`<?xml version="1.0"?>
<clickhouse>
    <profiles>
        <default>
            <max_memory_usage>4000000000</max_memory_usage>
            <load_balancing>random</load_balancing>
%s
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>::/0</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
            <access_management>1</access_management>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</clickhouse>
`, c.opts.ProfileSettings)
	for name, body := range map[string]string{"config.xml": config, "users.xml": users, chdbLauncher: chdbServeScript} {
		if err := os.WriteFile(filepath.Join(c.Dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}
