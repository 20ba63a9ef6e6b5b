package engine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/tenancy"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

const (
	versionedModule = "engine/testdata/versioned"
	eventsDDL       = "CREATE TABLE %s (topic String, partition Int32, offset Int64, version String, value String) ENGINE = MergeTree ORDER BY (topic, partition, offset)"
)

// adminClient calls the module admin API with a token.
type adminClient struct {
	t     *testing.T
	url   string
	token string
}

func (c adminClient) do(method, path string, body []byte, out any) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
	return resp.StatusCode, string(raw)
}

// push uploads a module and returns its sha256.
func (c adminClient) push(tenant, pipeline, wasmPath string) string {
	c.t.Helper()
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		c.t.Fatal(err)
	}
	var up tenancy.UploadResponse
	if code, body := c.do("POST", fmt.Sprintf("/v1/tenants/%s/pipelines/%s/modules", tenant, pipeline), wasm, &up); code/100 != 2 {
		c.t.Fatalf("push %s: %d %s", wasmPath, code, body)
	}
	return up.Version.SHA256
}

func (c adminClient) activate(tenant, pipeline, sha string) {
	c.t.Helper()
	if code, body := c.do("POST", fmt.Sprintf("/v1/tenants/%s/pipelines/%s/modules/%s/activate", tenant, pipeline, sha), nil, nil); code != http.StatusOK {
		c.t.Fatalf("activate %s: %d %s", sha, code, body)
	}
}

// tenantEnv is ClickHouse, Kafka and a tenants config with a module store.
type tenantEnv struct {
	ch    *testinfra.ClickHouse
	kafka *testinfra.Kafka
}

func newTenantEnv(t *testing.T, topics map[string]int, ddl ...string) *tenantEnv {
	t.Helper()
	e := &tenantEnv{ch: testinfra.ClickHouseT(t), kafka: testinfra.KafkaT(t)}
	ctx := context.Background()
	for _, q := range ddl {
		if err := e.ch.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for topic, parts := range topics {
		if err := e.kafka.CreateTopic(ctx, topic, parts); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *tenantEnv) config(t *testing.T, group string, tenants ...engine.TenantConfig) engine.Config {
	cfg := engine.Config{
		Kafka:      engine.KafkaConfig{Brokers: []string{e.kafka.Addr}, Group: group},
		Module:     engine.ModuleConfig{CacheDir: t.TempDir()},
		DeadLetter: engine.DeadLetterConfig{Topic: "dlq"},
		Tenants:    tenants,
		// A check compiles the module in this race-instrumented process,
		// which on a busy machine takes longer than the default minute.
		Admin: engine.AdminConfig{StoreDir: t.TempDir(), AdminTokens: []string{tenancy.HashToken("admin-token")}, CheckTimeout: 10 * time.Minute},
	}
	cfg.ClickHouse.Addr = e.ch.Addr
	return cfg
}

// startTenants runs the pipeline and its admin API.
func startTenants(t *testing.T, cfg engine.Config) (*engine.Pipeline, string, func() error) {
	t.Helper()
	p, stop := run(t, cfg)
	h, err := p.AdminHandler(testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return p, srv.URL, stop
}

// A module configured from a file keeps its compiled code in the cache
// when the admin API starts and after a refused upload, so that the next
// start does not compile it again. Before, the API pruned the code of
// every module its store did not hold, and every restart of a process
// with the admin API compiled every configured module anew.
func TestConfiguredModuleKeepsItsCompiledCode(t *testing.T) {
	e := newTenantEnv(t, map[string]int{"acme-logs": 1, "dlq": 1}, readSchema(t))
	path := wasmbuild.BuildT(t, "examples/log-normalize")
	wasm, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	entry := filepath.Join("sluice-modules", hex.EncodeToString(sum[:]))
	tenant := engine.TenantConfig{ID: "acme", Tokens: []string{tenancy.HashToken("acme-token")},
		Pipelines: []engine.TenantPipelineConfig{{Name: "logs", Topics: []string{"acme-logs"}, Tables: []string{"logs"},
			Module: engine.TenantModuleConfig{Path: path}}}}
	cfg := e.config(t, "cache-kept", tenant)
	// cached lists the compiled files the cache's index gives the module.
	cached := func(when string) []string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(cfg.Module.CacheDir, entry))
		if err != nil {
			t.Fatalf("%s: the cache's index has no entry for the configured module: %v", when, err)
		}
		files := strings.Fields(string(b))
		for _, f := range files {
			if _, err := os.Stat(filepath.Join(cfg.Module.CacheDir, filepath.FromSlash(f))); err != nil {
				t.Errorf("%s: the configured module's compiled file %s: %v", when, f, err)
			}
		}
		if len(files) == 0 {
			t.Errorf("%s: the cache's index lists no file for the configured module", when)
		}
		return files
	}
	_, url, stop := startTenants(t, cfg)
	cached("after the admin API started")
	api := adminClient{t: t, url: url, token: "acme-token"}
	if code, body := api.do("POST", "/v1/tenants/acme/pipelines/logs/modules", []byte("MZ not wasm"), nil); code != http.StatusUnprocessableEntity {
		t.Errorf("uploading a non-WebAssembly file: %d %s, want 422", code, body)
	}
	before := cached("after a refused upload")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// A second start finds the code and compiles nothing new.
	startTenants(t, cfg)
	if after := cached("after a restart"); !slices.Equal(after, before) {
		t.Errorf("the restart recompiled the configured module: its files %v, before %v", after, before)
	}
}

// TestHotSwap activates v1, then v2, then rolls back to v1 through the
// admin API while records are produced continuously: every record lands
// exactly once, and on each partition the versions of the rows, in offset
// order, follow the swaps (v1, then v2, then v1 again).
func TestHotSwap(t *testing.T) {
	const topic = "acme-events"
	e := newTenantEnv(t, map[string]int{topic: 2, "dlq": 1}, fmt.Sprintf(eventsDDL, "events"))
	v1 := wasmbuild.BuildVersionT(t, versionedModule, "v1")
	v2 := wasmbuild.BuildVersionT(t, versionedModule, "v2")
	tenant := engine.TenantConfig{ID: "acme", Tokens: []string{tenancy.HashToken("acme-token")},
		Pipelines: []engine.TenantPipelineConfig{{Name: "events", Topics: []string{topic}, Tables: []string{"events"}}}}
	cfg := e.config(t, "hot-swap", tenant)
	p, url, stop := startTenants(t, cfg)
	api := adminClient{t: t, url: url, token: "acme-token"}

	// A module that asks for a table the tenant may not write is refused
	// at activation with the module's reason.
	adv := api.push("acme", "events", wasmbuild.BuildT(t, "examples/adversarial/infinite-loop"))
	code, body := api.do("POST", "/v1/tenants/acme/pipelines/events/modules/"+adv+"/activate", nil, nil)
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, "adv") || !strings.Contains(body, "default.events") {
		t.Errorf("activating a module that wants table adv: %d %s; want 422 naming the table and the allowed ones", code, body)
	}
	// Not WebAssembly: refused at upload.
	code, body = api.do("POST", "/v1/tenants/acme/pipelines/events/modules", []byte("MZ\x90\x00 not wasm"), nil)
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, "WebAssembly") {
		t.Errorf("uploading a non-WebAssembly file: %d %s", code, body)
	}

	// Produce continuously: 2 partitions, 200 records every 10 ms.
	cl, err := e.kafka.NewClient(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var produced atomic.Int64
	stopProducing := make(chan struct{})
	producerDone := make(chan error, 1)
	var (
		stopOnce sync.Once
		stopErr  error
	)
	stopProducer := func() error {
		stopOnce.Do(func() { close(stopProducing); stopErr = <-producerDone })
		return stopErr
	}
	// However the test ends, the producer stops and its callbacks are
	// done before the client closes and the test returns.
	defer func() { _ = stopProducer() }()
	go func() {
		ctx := context.Background()
		for i := 0; ; {
			select {
			case <-stopProducing:
				producerDone <- cl.Flush(ctx)
				return
			case <-time.After(10 * time.Millisecond):
			}
			for range 200 {
				cl.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r%d", i)}, func(_ *kgo.Record, err error) {
					if err != nil {
						t.Errorf("produce: %v", err)
						return
					}
					produced.Add(1)
				})
				i++
			}
		}
	}()

	versionRows := func(v string) int {
		return queryInt(t, e.ch, "SELECT count() FROM events WHERE version = '"+v+"'")
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	sha1 := api.push("acme", "events", v1)
	api.activate("acme", "events", sha1)
	waitFor("v1 rows", func() bool { return versionRows("v1") > 2000 })
	sha2 := api.push("acme", "events", v2)
	api.activate("acme", "events", sha2)
	waitFor("v2 rows", func() bool { return versionRows("v2") > 2000 })
	v1Before := versionRows("v1")
	if code, body := api.do("POST", "/v1/tenants/acme/pipelines/events/rollback", nil, nil); code != http.StatusOK {
		t.Fatalf("rollback: %d %s", code, body)
	}
	waitFor("v1 rows after the rollback", func() bool { return versionRows("v1") > v1Before+2000 })
	if err := stopProducer(); err != nil {
		t.Fatal(err)
	}
	n := int(produced.Load())
	waitFor(fmt.Sprintf("%d rows", n), func() bool { return queryInt(t, e.ch, "SELECT count() FROM events") >= n })

	got := queryString(t, e.ch, "SELECT count(), uniqExact(partition, offset) FROM events")
	if want := fmt.Sprintf("%d\t%d", n, n); got != want {
		t.Errorf("(rows, distinct records) = %q, want %q", got, want)
	}
	// Per partition, the sequence of versions in offset order, with runs
	// collapsed, must be v1 v2 v1.
	rows := queryString(t, e.ch, "SELECT partition, version FROM events ORDER BY partition, offset")
	seqs := map[string][]string{}
	for _, line := range strings.Split(rows, "\n") {
		part, v, _ := strings.Cut(line, "\t")
		if s := seqs[part]; len(s) == 0 || s[len(s)-1] != v {
			seqs[part] = append(s, v)
		}
	}
	if len(seqs) != 2 {
		t.Errorf("rows on partitions %v, want 2", seqs)
	}
	for part, seq := range seqs {
		if got := strings.Join(seq, " "); got != "v1 v2 v1" {
			t.Errorf("partition %s: versions in offset order %q, want \"v1 v2 v1\"", part, got)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.DeadLettered != 0 || st.RecordsIn != int64(n) {
		t.Errorf("stats: %d records in, %d dead-lettered; want %d and 0", st.RecordsIn, st.DeadLettered, n)
	}
	t.Logf("%d records: v1 %d rows, v2 %d rows", n, versionRows("v1"), versionRows("v2"))

	// The store kept the state: a restart runs v1 again.
	store, err := tenancy.OpenStore(cfg.Admin.StoreDir)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := store.Active("acme", "events"); !ok || v.SHA256 != sha1 {
		t.Errorf("store's active version after the rollback = %v %v, want %s", v.SHA256, ok, sha1)
	}
}

func queryString(t *testing.T, ch *testinfra.ClickHouse, sql string) string {
	t.Helper()
	out, err := ch.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}
