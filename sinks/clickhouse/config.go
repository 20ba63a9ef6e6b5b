package clickhouse

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Transports a Sink can insert over (Config.Transport).
const (
	// TransportNative is ClickHouse's native TCP protocol, through ch-go.
	TransportNative = "native"
	// TransportHTTP is "INSERT … FORMAT Native" over HTTP(S).
	TransportHTTP = "http"
)

// Routings a Sink can use (Config.Routing).
const (
	// RoutingEndpoint inserts every row into the named table on the one
	// configured server. If that table is Distributed, the server routes.
	RoutingEndpoint = "endpoint"
	// RoutingDistributed is RoutingEndpoint for tables that must be
	// Distributed; with DistributedSync the insert waits for the shards.
	RoutingDistributed = "distributed"
	// RoutingShards reads each named Distributed table's cluster and
	// sharding key and writes every row straight into its shard's local
	// table, choosing the shard exactly as the Distributed table would.
	RoutingShards = "shards"
)

// Config configures the sink. The zero value of every field means its
// documented default; Validate applies the defaults.
type Config struct {
	// Transport is "native" (default) or "http". Over HTTP to a server
	// that does not convert Native columns to the table's types (18.16;
	// 26.9 has input_format_native_allow_types_conversion), a table with a
	// LowCardinality column other than LowCardinality(String) and
	// LowCardinality(Nullable(String)), or with one nested in Array, Map,
	// Tuple or Nullable, is refused at discovery: use native for it.
	Transport string `yaml:"transport"`
	// Addr is the server's native protocol address, host:port. Required
	// with transport native. With routing shards it is only the server the
	// cluster and the Distributed tables are read from.
	Addr string `yaml:"addr"`
	// HTTPAddr is the server's HTTP interface, host:port or a URL
	// (http://host:8123, https://host:8443). Required with transport http.
	// An https URL implies TLS.
	HTTPAddr string `yaml:"http_addr"`
	// Database holds the target tables. Default "default".
	Database string `yaml:"database"`
	// User and Password authenticate (HTTP: X-ClickHouse-User and
	// X-ClickHouse-Key headers). Default user "default", no password.
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// Compression of insert data: "auto" (default), "lz4", "zstd" or
	// "none". "auto" sends to a server on a loopback address
	// ("localhost", 127.0.0.0/8, ::1) uncompressed, as clickhouse-client
	// does, since compressing there only costs CPU on both ends; any
	// other server gets LZ4. Names are not resolved: a name that
	// resolves to loopback is compressed. Over HTTP a compressed body is
	// sent in ClickHouse's compressed format with decompress=1.
	Compression string `yaml:"compression"`
	// TLS enables TLS on native and HTTP connections.
	TLS bool `yaml:"tls"`
	// TLSInsecureSkipVerify accepts any server certificate.
	TLSInsecureSkipVerify bool `yaml:"tls_insecure_skip_verify"`
	// TLSCAFile is a PEM file of CA certificates to verify servers with.
	// Default: the system's roots.
	TLSCAFile string `yaml:"tls_ca_file"`
	// TLSServerName overrides the name verified in server certificates.
	// Default: the host being dialled.
	TLSServerName string `yaml:"tls_server_name"`

	// DialTimeout bounds one connection attempt. Default 5s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ReadTimeout bounds one read from the server (HTTP: the wait for the
	// response after the body is sent). Default 60s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// ConnectTimeout bounds the first connection at startup, retries
	// included: an unreachable server fails startup after it. Default 5s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`

	// ChunkBytes seals a chunk when its encoded size reaches it.
	// Default 1 MiB (see docs/adr/0003-sink-defaults.md).
	ChunkBytes int `yaml:"chunk_bytes"`
	// ChunkLinger seals a non-empty chunk this long after its first row.
	// Default 200ms.
	ChunkLinger time.Duration `yaml:"chunk_linger"`
	// QueueCapacity is the number of sealed chunks each shard queue holds.
	// A full queue makes senders wait: it is the backpressure signal.
	// Default 8.
	QueueCapacity int `yaml:"queue_capacity"`
	// MaxInsertRows and MaxInsertBytes end an insert's merge of chunks.
	// Defaults 1,000,000 rows and 128 MiB.
	MaxInsertRows  int `yaml:"max_insert_rows"`
	MaxInsertBytes int `yaml:"max_insert_bytes"`
	// InsertLinger is how long a shard worker waits for more chunks after
	// the first one before it inserts. Default 500ms.
	InsertLinger time.Duration `yaml:"insert_linger"`
	// BacklogInsertLinger is how long an insert stays open instead, when
	// the oldest record of its first chunk was written longer ago than
	// that: rows already that late lose little to a longer wait, and the
	// server makes fewer, larger parts of a backlog and merges less. Past
	// insert_linger such an insert also ends once no chunk has come for
	// insert_linger (fetching paused, or the backlog drained). It applies
	// when it is longer than insert_linger; the record time comes from
	// the Kafka timestamp. It holds more of the in-flight budget per
	// insert: with a budget that fills in less than this linger, fetching
	// stops and goes while each insert waits out insert_linger without a
	// chunk, and the pipeline slows down. Default 0: off (try 5s where
	// the budget holds that long of the pipeline's rows).
	BacklogInsertLinger time.Duration `yaml:"backlog_insert_linger"`
	// InsertsPerShard is the number of concurrent inserts per shard.
	// One of them at a time takes chunks from the shard's queue, for its
	// insert_linger; the others send or retry theirs meanwhile, so each
	// insert carries every chunk sealed while it was open. Default 2.
	InsertsPerShard int `yaml:"inserts_per_shard"`
	// RetryMin and RetryMax bound the backoff between insert attempts.
	// Defaults 100ms and 10s.
	RetryMin time.Duration `yaml:"retry_min"`
	RetryMax time.Duration `yaml:"retry_max"`
	// PermanentRetryInterval is how often an insert that failed with a
	// permanent error (unknown table or column, type mismatch, a value out
	// of range, missing rights) is tried again. Such an insert never stops
	// the sink and is never dropped: it is parked with its rows and acks,
	// the table shows in Failing (and so in sluice's /readyz) and its
	// pipeline's offsets stay where they are, while other tables flow.
	// Default 30s.
	PermanentRetryInterval time.Duration `yaml:"permanent_retry_interval"`
	// SchemaRefreshInterval is how often sluice reads its tables' schemas
	// again (DESCRIBE TABLE, and system.clusters with routing shards) to
	// take up an ALTER TABLE … ADD, DROP or MODIFY COLUMN, or a shard
	// added to the cluster, without a restart. An insert that fails as if
	// a table had changed checks at once. Default 30s.
	SchemaRefreshInterval time.Duration `yaml:"schema_refresh_interval"`

	// Routing is "endpoint" (default): every row goes to the named table
	// on the one configured server, which routes it if the table is
	// Distributed; "distributed": the same, but the table must be
	// Distributed (see DistributedSync); or "shards": each row goes
	// straight into its shard's local table, chosen as the Distributed
	// table would choose it, over the replicas of the table's cluster.
	Routing string `yaml:"routing"`
	// DistributedSync sends insert_distributed_sync=1 with each insert
	// (routing distributed), so an insert returns once the shards have
	// the rows. It needs a transport that carries per-query settings: HTTP,
	// or native with a server from revision 54429; for older servers over
	// native, set it in the user's profile instead. Default false.
	DistributedSync bool `yaml:"distributed_sync"`
	// DedupToken is "auto" (default): where the server knows the
	// insert_deduplication_token setting (22.2 on; not 18.16) and per-query
	// settings reach it, send a token derived from the inserted chunks'
	// offset ranges and contents, the same on every retry, so that a retry
	// of an insert that had in fact succeeded is dropped by the server: by
	// Replicated tables, and by MergeTree tables created with
	// non_replicated_deduplication_window > 0 (at its default 0 a
	// MergeTree table deduplicates nothing). Without a token (18.16, or
	// "off") such a retry leaves the rows twice in a non-Replicated table:
	// delivery is at least once. "off" never sends one.
	//
	// Besides the token, every insert carries async_insert=0 where the
	// server knows async_insert (21.11 on): sluice batches its inserts
	// itself, and a server-side async insert would be acknowledged before
	// its rows are written if the server has wait_for_async_insert=0, and
	// would be deduplicated by async_insert_deduplicate, not by the token.
	// Some builds default to async_insert=1 (ClickHouse 26.9 from
	// chdb-core does), so sluice states it per insert, not by the
	// server's default.
	DedupToken string `yaml:"dedup_token"`
	// SortRows is "key" (default): send each insert's rows in the order
	// of the table's sorting key, so that the server, finding the block
	// sorted, neither sorts it nor copies its columns into that order
	// (about a third of its CPU for an insert of the sensor-batch
	// workload, on 18.16 and 26.9). It applies over the native transport
	// with routing endpoint, to a MergeTree-family table whose sorting
	// key is a list of inserted columns of integer, date and time, enum,
	// Decimal32/64, IPv4, String, LowCardinality(String) or FixedString
	// types; rows of equal keys keep the order they came in, as the
	// server's own sort keeps them (a ReplacingMergeTree keeps the last).
	// Other tables get their rows as they came. Such an insert collects
	// its chunks before it is sent, as one with a deduplication token
	// does, and sluice spends the sort instead of the server (ADR 0005).
	// "off" never sorts.
	SortRows string `yaml:"sort_rows"`
	// Cluster tunes routing shards.
	Cluster ClusterConfig `yaml:"cluster"`
}

// ClusterConfig tunes writing to the replicas of a cluster's shards
// (routing shards).
type ClusterConfig struct {
	// BreakerFailures opens a replica's circuit breaker after this many
	// consecutive failed inserts: the shard's inserts go to its other
	// replicas. Default 3.
	BreakerFailures int `yaml:"breaker_failures"`
	// BreakerCooldown is how long an open breaker keeps its replica out
	// before one trial insert (half-open). Default 30s.
	BreakerCooldown time.Duration `yaml:"breaker_cooldown"`
	// HTTPPort is every replica's HTTP(S) port with transport http
	// (system.clusters only knows native ports). Default: the port of
	// http_addr.
	HTTPPort int `yaml:"http_port"`
	// HTTPAddrs maps a replica's native address as system.clusters names
	// it ("host:port") to its HTTP address (host:port); it overrides
	// HTTPPort for the replicas it names.
	HTTPAddrs map[string]string `yaml:"http_addrs"`
}

// Validate applies defaults and checks values, naming the field at fault.
func (c *Config) Validate() error {
	if err := setOneOf(&c.Transport, "clickhouse.transport", TransportNative, TransportHTTP); err != nil {
		return err
	}
	switch c.Transport {
	case TransportNative:
		if c.Addr == "" {
			return fmt.Errorf("clickhouse.addr is required")
		}
		if strings.Contains(c.Addr, "://") {
			return fmt.Errorf("clickhouse.addr: %q is a URL; give the native protocol's host:port (the server's tcp_port, 9000 by default), or set transport: http and http_addr", c.Addr)
		}
		if _, port, err := net.SplitHostPort(c.Addr); err != nil || port == "" {
			return fmt.Errorf("clickhouse.addr: %q: want host:port of the native protocol (the server's tcp_port, 9000 by default)", c.Addr)
		}
	case TransportHTTP:
		if c.HTTPAddr == "" {
			return fmt.Errorf("clickhouse.http_addr is required with transport http")
		}
		if _, err := httpBaseURL(c.HTTPAddr, c.TLS); err != nil {
			return fmt.Errorf("clickhouse.http_addr: %w", err)
		}
	}
	if c.Database == "" {
		c.Database = "default"
	}
	if c.User == "" {
		c.User = "default"
	}
	for _, e := range []struct {
		v       *string
		field   string
		allowed []string // the first is the default
	}{
		{&c.Compression, "clickhouse.compression", []string{"auto", "lz4", "zstd", "none"}},
		{&c.Routing, "clickhouse.routing", []string{RoutingEndpoint, RoutingDistributed, RoutingShards}},
		{&c.SortRows, "clickhouse.sort_rows", []string{"key", "off"}},
		{&c.DedupToken, "clickhouse.dedup_token", []string{"auto", "off"}},
	} {
		if err := setOneOf(e.v, e.field, e.allowed...); err != nil {
			return err
		}
	}
	setDur(&c.DialTimeout, 5*time.Second)
	setDur(&c.ReadTimeout, 60*time.Second)
	setDur(&c.ConnectTimeout, 5*time.Second)
	setDur(&c.ChunkLinger, 200*time.Millisecond)
	setDur(&c.InsertLinger, 500*time.Millisecond)
	setDur(&c.RetryMin, 100*time.Millisecond)
	setDur(&c.RetryMax, 10*time.Second)
	setDur(&c.PermanentRetryInterval, 30*time.Second)
	setDur(&c.SchemaRefreshInterval, 30*time.Second)
	setDur(&c.Cluster.BreakerCooldown, 30*time.Second)
	setInt(&c.ChunkBytes, 1<<20)
	setInt(&c.QueueCapacity, 8)
	setInt(&c.MaxInsertRows, 1_000_000)
	setInt(&c.MaxInsertBytes, 128<<20)
	setInt(&c.InsertsPerShard, 2)
	setInt(&c.Cluster.BreakerFailures, 3)
	for _, f := range []struct {
		name string
		v    int
	}{
		{"clickhouse.chunk_bytes", c.ChunkBytes}, {"clickhouse.queue_capacity", c.QueueCapacity},
		{"clickhouse.max_insert_rows", c.MaxInsertRows}, {"clickhouse.max_insert_bytes", c.MaxInsertBytes},
		{"clickhouse.inserts_per_shard", c.InsertsPerShard},
		{"clickhouse.cluster.breaker_failures", c.Cluster.BreakerFailures},
		{"clickhouse.cluster.http_port", c.Cluster.HTTPPort},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s: must be positive, got %d", f.name, f.v)
		}
	}
	if c.Cluster.HTTPPort > 65535 {
		return fmt.Errorf("clickhouse.cluster.http_port: %d is not a port", c.Cluster.HTTPPort)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"clickhouse.dial_timeout", c.DialTimeout}, {"clickhouse.read_timeout", c.ReadTimeout},
		{"clickhouse.connect_timeout", c.ConnectTimeout}, {"clickhouse.chunk_linger", c.ChunkLinger},
		{"clickhouse.insert_linger", c.InsertLinger}, {"clickhouse.backlog_insert_linger", c.BacklogInsertLinger}, {"clickhouse.retry_min", c.RetryMin},
		{"clickhouse.retry_max", c.RetryMax}, {"clickhouse.permanent_retry_interval", c.PermanentRetryInterval}, {"clickhouse.schema_refresh_interval", c.SchemaRefreshInterval}, {"clickhouse.cluster.breaker_cooldown", c.Cluster.BreakerCooldown},
	} {
		if d.v < 0 {
			return fmt.Errorf("%s: must be positive, got %s", d.name, d.v)
		}
	}
	if c.RetryMax < c.RetryMin {
		return fmt.Errorf("clickhouse.retry_max (%s) is below clickhouse.retry_min (%s)", c.RetryMax, c.RetryMin)
	}
	for native, httpAddr := range c.Cluster.HTTPAddrs {
		if _, _, err := net.SplitHostPort(native); err != nil {
			return fmt.Errorf("clickhouse.cluster.http_addrs: key %q is not host:port", native)
		}
		if _, err := httpBaseURL(httpAddr, c.TLS); err != nil {
			return fmt.Errorf("clickhouse.cluster.http_addrs[%s]: %w", native, err)
		}
	}
	if c.TLSCAFile != "" && !c.TLS && !strings.HasPrefix(c.HTTPAddr, "https://") {
		return fmt.Errorf("clickhouse.tls_ca_file is set but clickhouse.tls is off")
	}
	return nil
}

// httpBaseURL turns http_addr (host:port or a URL) into the URL inserts
// are posted to.
func httpBaseURL(addr string, useTLS bool) (*url.URL, error) {
	if !strings.Contains(addr, "://") {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%q is neither host:port nor a URL", addr)
		}
		scheme := "http"
		if useTLS {
			scheme = "https"
		}
		return &url.URL{Scheme: scheme, Host: addr, Path: "/"}, nil
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "http":
		if useTLS {
			return nil, fmt.Errorf("%q is plain http but clickhouse.tls is on", addr)
		}
	case "https":
	default:
		return nil, fmt.Errorf("%q: scheme must be http or https", addr)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q has no host", addr)
	}
	if u.Path == "" {
		u.Path = "/"
	}
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

func setDur(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

func setInt(v *int, def int) {
	if *v == 0 {
		*v = def
	}
}

// setOneOf sets an empty *v to the first of allowed, its default, and
// fails, naming field, when *v is none of them.
func setOneOf(v *string, field string, allowed ...string) error {
	if *v == "" {
		*v = allowed[0]
	}
	if !slices.Contains(allowed, *v) {
		return fmt.Errorf("%s: %q is not one of %s", field, *v, strings.Join(allowed, ", "))
	}
	return nil
}

// compressionFor is how inserts to the server at addr (host:port, or a
// bare host) are compressed under method: auto is "none" for a loopback
// host and "lz4" for any other.
func compressionFor(method, addr string) string {
	if method != "auto" {
		return method
	}
	if isLoopback(hostOf(addr)) {
		return "none"
	}
	return "lz4"
}

// isLoopback reports whether host is "localhost" or a loopback IP. Other
// names are not resolved: a name that happens to resolve to loopback is
// compressed, which costs CPU but is always correct.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}
