package testinfra

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ClickHouseOptions configures StartClickHouse. The zero value is valid.
type ClickHouseOptions struct {
	// Server is which ClickHouse to start; default DefaultServer().
	Server Server
	// Binary is the clickhouse-server executable (Legacy); default: looked
	// up on PATH.
	Binary string
	// Chdb is the virtual environment holding chdb-core (Modern); default
	// DefaultChdbVenv().
	Chdb string
	// TCPPort and HTTPPort fix the native and HTTP ports; 0 picks free ones.
	// Fix them (see FreePorts) when a cluster definition must name a server
	// before it starts.
	TCPPort, HTTPPort int
	// RemoteServers is a raw XML fragment placed inside <remote_servers>,
	// e.g. "<two_shards><shard><replica><host>127.0.0.1</host><port>9000</port>
	// </replica></shard>…</two_shards>", for Distributed tables.
	RemoteServers string
	// ProfileSettings is a raw XML fragment added to the default profile in
	// users.xml, e.g. "<max_threads>2</max_threads>". Settings only one of
	// the servers knows make the other fail to start or to answer.
	ProfileSettings string
	// ExtraConfig is a raw XML fragment appended inside config.xml's root.
	ExtraConfig string
	// Timezone is the server's time zone; default "UTC".
	Timezone string
	// ReadyTimeout bounds the wait for the server to answer SELECT 1 after
	// each start; default 60s (the context's deadline also applies).
	ReadyTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL;
	// default 20s.
	StopTimeout time.Duration
}

// ClickHouse is a ClickHouse server child process with its own data
// directory: clickhouse-server (Legacy) or chdb-core's clickhouse-local
// serving TCP and HTTP (Modern).
type ClickHouse struct {
	Addr     string // host:port of the native TCP interface
	HTTPAddr string // host:port of the HTTP interface
	TCPPort  int
	HTTPPort int
	Dir      string // config, data and logs; removed by Close
	// Server is the kind of server; Version is what it reported on its
	// first start ("18.16.1", "26.9.2.1").
	Server  Server
	Version Version

	caps Capabilities
	opts ClickHouseOptions
	argv []string // the command that starts the server
	http *http.Client

	mu   sync.Mutex
	proc *process
}

// StartClickHouse writes a config for a fresh server into a new temporary
// directory, starts it and returns once it answers SELECT 1 over HTTP.
func StartClickHouse(ctx context.Context, opts ClickHouseOptions) (*ClickHouse, error) {
	if opts.Server == "" {
		opts.Server = DefaultServer()
	}
	var argv []string
	switch opts.Server {
	case Legacy:
		binary := opts.Binary
		if binary == "" {
			binary = "clickhouse-server"
		}
		path, err := exec.LookPath(binary)
		if err != nil {
			return nil, notInstalled("%s (ClickHouse 18.16) not found", binary)
		}
		argv = []string{path} // the config file is added below
	case Modern:
		venv := opts.Chdb
		if venv == "" {
			venv = DefaultChdbVenv()
		}
		python := filepath.Join(venv, "bin", "python")
		if !isExecutable(python) {
			return nil, notInstalled("no chdb-core %s venv at %s (ClickHouse %s)", ChdbVersion, venv, Modern)
		}
		argv = []string{python, chdbLauncher} // the data dir and HTTP port are added below
	default:
		return nil, fmt.Errorf("testinfra: unknown ClickHouse server %q (want %q or %q)", opts.Server, Legacy, Modern)
	}
	if opts.Timezone == "" {
		opts.Timezone = "UTC"
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 20 * time.Second
	}
	if err := fillPorts(&opts.TCPPort, &opts.HTTPPort); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-clickhouse-")
	if err != nil {
		return nil, err
	}
	c := &ClickHouse{
		Addr:     net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.TCPPort)),
		HTTPAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.HTTPPort)),
		TCPPort:  opts.TCPPort,
		HTTPPort: opts.HTTPPort,
		Dir:      dir,
		Server:   opts.Server,
		opts:     opts,
		argv:     argv,
		// No keep-alive: pooled connections go stale across Stop/Start and
		// ClickHouse's 3 s keep-alive timeout, and a POST is not retried.
		http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	}
	write := c.writeConfig
	switch opts.Server {
	case Legacy:
		c.argv = append(c.argv, "--config-file="+filepath.Join(dir, "config.xml"))
	case Modern:
		c.argv = append(c.argv, filepath.Join(dir, "data"), strconv.Itoa(opts.HTTPPort))
		write = c.writeModernConfig
	}
	if err := write(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := c.probe(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("testinfra: ask %s for its version and capabilities: %w", c.name(), err)
	}
	return c, nil
}

// SetRemoteServers rewrites the <remote_servers> of a running 18.16 server,
// which reloads its configuration files by itself within seconds: tests
// use it to add a shard to a cluster. 26.9's clickhouse-local reads its
// configuration only at start.
func (c *ClickHouse) SetRemoteServers(xml string) error {
	if c.Server != Legacy {
		return fmt.Errorf("testinfra: %s does not reload its cluster configuration", c.name())
	}
	c.opts.RemoteServers = xml
	return c.writeConfig()
}

func xmlText(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func (c *ClickHouse) writeConfig() error {
	for _, d := range []string{"data", "tmp", "user_files", "format_schemas", "log"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return err
		}
	}
	p := func(elems ...string) string { return xmlText(filepath.Join(append([]string{c.Dir}, elems...)...)) }
	config := fmt.Sprintf(`<?xml version="1.0"?>
<!-- Written by sluice internal/testinfra for a test-only clickhouse-server. -->
<yandex>
    <logger>
        <level>warning</level>
        <log>%s</log>
        <errorlog>%s</errorlog>
        <size>100M</size>
        <count>2</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>%d</tcp_port>
    <http_port>%d</http_port>
    <path>%s/</path>
    <tmp_path>%s/</tmp_path>
    <user_files_path>%s/</user_files_path>
    <format_schema_path>%s/</format_schema_path>
    <users_config>users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>%s</timezone>
    <max_connections>1024</max_connections>
    <max_concurrent_queries>100</max_concurrent_queries>
    <keep_alive_timeout>3</keep_alive_timeout>
    <mark_cache_size>134217728</mark_cache_size>
    <uncompressed_cache_size>134217728</uncompressed_cache_size>
    <mlock_executable>false</mlock_executable>
    <max_table_size_to_drop>0</max_table_size_to_drop>
    <max_partition_size_to_drop>0</max_partition_size_to_drop>
    <remote_servers>%s</remote_servers>
    <kafka>
        <auto_offset_reset>smallest</auto_offset_reset>
    </kafka>
%s
</yandex>
`, p("log", "clickhouse-server.log"), p("log", "clickhouse-server.err.log"),
		c.TCPPort, c.HTTPPort,
		p("data"), p("tmp"), p("user_files"), p("format_schemas"),
		xmlText(c.opts.Timezone), c.opts.RemoteServers, c.opts.ExtraConfig)

	users := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>4000000000</max_memory_usage>
            <allow_experimental_low_cardinality_type>1</allow_experimental_low_cardinality_type>
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
</yandex>
`, c.opts.ProfileSettings)
	if err := os.WriteFile(filepath.Join(c.Dir, "config.xml"), []byte(config), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, "users.xml"), []byte(users), 0o644)
}

// ErrorLog is the path of the server's error log.
func (c *ClickHouse) ErrorLog() string {
	return filepath.Join(c.Dir, "log", "clickhouse-server.err.log")
}

func (c *ClickHouse) stdoutLog() string { return filepath.Join(c.Dir, "stdout.log") }

// LogTail returns the last n lines of the server's error log and its
// stdout/stderr, for test failure messages.
func (c *ClickHouse) LogTail(n int) string { return tails(n, c.ErrorLog(), c.stdoutLog()) }

// Start (re)starts the server on the same ports and data directory and
// returns once it answers SELECT 1. It is an error to Start a running server.
func (c *ClickHouse) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil && !c.proc.exited() {
		return errors.New("testinfra: clickhouse is already running")
	}
	proc, err := startProcess(c.name(), c.Dir, c.stdoutLog(), nil, c.argv...)
	if err != nil {
		return err
	}
	c.proc = proc

	ctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		out, qerr := c.Query(attempt, "SELECT 1")
		cancelAttempt()
		if qerr == nil && strings.TrimSpace(out) == "1" {
			return nil
		}
		if proc.exited() {
			c.proc = nil
			return fmt.Errorf("testinfra: %s %s before answering SELECT 1 on %s:%s",
				c.name(), proc.exitStatus(), c.HTTPAddr, c.LogTail(30))
		}
		if ctx.Err() != nil {
			_ = proc.kill()
			c.proc = nil
			return fmt.Errorf("testinfra: %s did not answer SELECT 1 on %s in time (last error: %v):%s",
				c.name(), c.HTTPAddr, qerr, c.LogTail(30))
		}
		sleep(50*time.Millisecond, proc.done, ctx.Done())
	}
}

// name names the server process in errors.
func (c *ClickHouse) name() string {
	if c.Server == Modern {
		return "clickhouse " + string(Modern) + " (chdb-core clickhouse-local)"
	}
	return "clickhouse-server"
}

// Stop sends SIGTERM, waits up to StopTimeout and then SIGKILLs. It keeps Dir
// so Start can resume. Stopping a stopped server does nothing.
func (c *ClickHouse) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return nil
	}
	_, err := c.proc.stop(c.opts.StopTimeout)
	c.proc = nil
	return err
}

// Kill ends the server with SIGKILL, simulating a crash. Dir is kept.
func (c *ClickHouse) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return nil
	}
	err := c.proc.kill()
	c.proc = nil
	return err
}

// PID is the server's process id, 0 when it is not running.
func (c *ClickHouse) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc.pid()
}

// Close stops the server and removes Dir.
func (c *ClickHouse) Close() error {
	err := c.Stop()
	if rerr := os.RemoveAll(c.Dir); err == nil {
		err = rerr
	}
	return err
}

// Query runs sql through the HTTP interface and returns the response body
// (TabSeparated unless sql says otherwise). A non-200 answer becomes an error
// carrying the server's message.
func (c *ClickHouse) Query(ctx context.Context, sql string) (string, error) {
	return c.post(ctx, nil, strings.NewReader(sql))
}

// QueryLogged runs sql, a query of the server's logs (system.query_log,
// part_log, …), after SYSTEM FLUSH LOGS, again and again until done takes
// its output, and returns that output. The server may log a query's end
// after it has answered the query, so a single flush can miss an entry
// that is on its way. It gives up when ctx ends, with the last output and
// an error that says so.
func (c *ClickHouse) QueryLogged(ctx context.Context, sql string, done func(out string) bool) (string, error) {
	for {
		if err := c.Exec(ctx, "SYSTEM FLUSH LOGS"); err != nil {
			return "", err
		}
		out, err := c.Query(ctx, sql)
		if err != nil {
			return "", err
		}
		if done(out) {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("the logs did not show what was waited for (last answer %q): %w", out, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// QueryLogConfig is what a server of the kind needs to log every query to
// system.query_log, its entries flushed every flush (ExtraConfig and
// ProfileSettings): 18.16 logs only when told to; 26.9's configuration
// does already.
func QueryLogConfig(server Server, flush time.Duration) (extraConfig, profileSettings string) {
	if server != Legacy {
		return "", ""
	}
	return fmt.Sprintf(`<query_log><database>system</database><table>query_log</table><flush_interval_milliseconds>%d</flush_interval_milliseconds></query_log>`, flush.Milliseconds()),
		"<log_queries>1</log_queries>"
}

// InsertsInto is the condition on system.query_log that selects the
// finished INSERT queries into default.table, on this server: 26.9 lists
// a query's tables; on 18.16 the query's text names it, bare or quoted.
func (c *ClickHouse) InsertsInto(table string) string {
	if c.Server == Legacy {
		return fmt.Sprintf("type = 2 AND match(query, '^INSERT INTO (`?default`?\\.)?`?%s`?[ (]')",
			strings.ReplaceAll(regexp.QuoteMeta(table), `\`, `\\`))
	}
	return fmt.Sprintf("type = 'QueryFinish' AND query_kind = 'Insert' AND has(tables, 'default.%s')", table)
}

// EventSum is the system.query_log expression of the named ProfileEvents
// of an entry, summed, on this server (26.9 keeps them in a Map, 18.16 in
// two arrays).
func (c *ClickHouse) EventSum(names ...string) string {
	if c.Server == Legacy {
		return fmt.Sprintf("arraySum(arrayMap((n, v) -> if(n IN ('%s'), v, 0), ProfileEvents.Names, ProfileEvents.Values))",
			strings.Join(names, "', '"))
	}
	terms := make([]string, len(names))
	for i, n := range names {
		terms[i] = "ProfileEvents['" + n + "']"
	}
	return strings.Join(terms, " + ")
}

// Exec runs a statement through the HTTP interface, discarding any output.
func (c *ClickHouse) Exec(ctx context.Context, sql string) error {
	_, err := c.Query(ctx, sql)
	return err
}

// Insert runs query (e.g. "INSERT INTO t FORMAT Native") with data as the
// request body.
func (c *ClickHouse) Insert(ctx context.Context, query string, data io.Reader) error {
	_, err := c.post(ctx, url.Values{"query": {query}}, data)
	return err
}

func (c *ClickHouse) post(ctx context.Context, params url.Values, body io.Reader) (string, error) {
	u := "http://" + c.HTTPAddr + "/"
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, body)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("clickhouse %s: %w", c.HTTPAddr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("clickhouse %s: HTTP %d: %s", c.HTTPAddr, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if err != nil {
		return "", fmt.Errorf("clickhouse %s: read response: %w", c.HTTPAddr, err)
	}
	return string(b), nil
}
