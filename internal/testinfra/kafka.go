package testinfra

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaVersion is the Kafka release scripts/deps.sh installs.
const KafkaVersion = "4.1.1"

// KafkaOptions configures StartKafka. The zero value is valid.
type KafkaOptions struct {
	// Partitions is num.partitions, the partition count of auto-created
	// topics; default 4.
	Partitions int
	// Libs is the directory of Kafka jars; default $SLUICE_KAFKA_LIBS, else
	// ${SLUICE_CACHE:-$HOME/.cache/sluice}/kafka-4.1.1/libs (see scripts/deps.sh).
	Libs string
	// Java is the java executable; default $JAVA_HOME/bin/java, else java on PATH.
	Java string
	// Port (client listener) and ControllerPort fix the ports; 0 picks free ones.
	Port, ControllerPort int
	// Properties are added to, or override, the generated server.properties.
	Properties map[string]string
	// JVMArgs replace the default heap and GC flags
	// (-Xms128m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1).
	JVMArgs []string
	// ReadyTimeout bounds the wait for the broker to answer a metadata
	// request after each start; default 90s (the context's deadline also applies).
	ReadyTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL;
	// default 20s.
	StopTimeout time.Duration
}

// Kafka is a single-node KRaft Kafka (combined broker and controller) child
// process with its own data directory.
type Kafka struct {
	Addr           string // host:port of the PLAINTEXT listener
	Port           int
	ControllerPort int
	ClusterID      string
	Dir            string // server.properties, data and logs; removed by Close

	opts KafkaOptions
	java string
	libs string

	mu   sync.Mutex
	proc *process
}

// DefaultKafkaLibs is where scripts/deps.sh puts the Kafka jars, honouring
// SLUICE_KAFKA_LIBS and SLUICE_CACHE.
func DefaultKafkaLibs() string {
	if d := os.Getenv("SLUICE_KAFKA_LIBS"); d != "" {
		return d
	}
	return filepath.Join(cacheDir(), "kafka-"+KafkaVersion, "libs")
}

func findJava(java string) (string, error) {
	if java == "" {
		if jh := os.Getenv("JAVA_HOME"); jh != "" {
			if p := filepath.Join(jh, "bin", "java"); isExecutable(p) {
				return p, nil
			}
		}
		java = "java"
	}
	p, err := exec.LookPath(java)
	if err != nil {
		return "", notInstalled("%s (Java 17+) not found", java)
	}
	return p, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// newClusterID returns a random Kafka cluster id: 16 bytes in unpadded
// URL-safe base64, not starting with '-' (as Kafka's Uuid.randomUuid).
func newClusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		id := base64.RawURLEncoding.EncodeToString(b[:])
		if id[0] != '-' {
			return id
		}
	}
}

// StartKafka formats a fresh KRaft log directory in a new temporary directory,
// starts a combined broker+controller and returns once it answers a metadata
// request.
func StartKafka(ctx context.Context, opts KafkaOptions) (*Kafka, error) {
	java, err := findJava(opts.Java)
	if err != nil {
		return nil, err
	}
	libs := opts.Libs
	if libs == "" {
		libs = DefaultKafkaLibs()
	}
	if jars, _ := filepath.Glob(filepath.Join(libs, "kafka_2.13-*.jar")); len(jars) == 0 {
		return nil, notInstalled("no Kafka server jar (kafka_2.13-*.jar) in %s", libs)
	}
	if opts.Partitions <= 0 {
		opts.Partitions = 4
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 90 * time.Second
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 20 * time.Second
	}
	if opts.JVMArgs == nil {
		// Friendly to a 2-core machine: small heap, serial GC, C1 only
		// (starts faster and burns less CPU than C2 warm-up in short tests).
		opts.JVMArgs = []string{"-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}
	}
	if err := fillPorts(&opts.Port, &opts.ControllerPort); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-kafka-")
	if err != nil {
		return nil, err
	}
	k := &Kafka{
		Addr:           net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.Port)),
		Port:           opts.Port,
		ControllerPort: opts.ControllerPort,
		ClusterID:      newClusterID(),
		Dir:            dir,
		opts:           opts,
		java:           java,
		libs:           libs,
	}
	if err := k.writeConfig(); err == nil {
		err = k.format(ctx)
	}
	if err == nil {
		err = k.Start(ctx)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return k, nil
}

func (k *Kafka) writeConfig() error {
	props := map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          "1",
		"controller.quorum.voters":                         fmt.Sprintf("1@127.0.0.1:%d", k.ControllerPort),
		"listeners":                                        fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", k.Port, k.ControllerPort),
		"advertised.listeners":                             fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", k.Port),
		"controller.listener.names":                        "CONTROLLER",
		"inter.broker.listener.name":                       "PLAINTEXT",
		"listener.security.protocol.map":                   "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"log.dirs":                                         filepath.Join(k.Dir, "data"),
		"num.partitions":                                   strconv.Itoa(k.opts.Partitions),
		"default.replication.factor":                       "1",
		"auto.create.topics.enable":                        "true",
		"offsets.topic.replication.factor":                 "1",
		"offsets.topic.num.partitions":                     "4",
		"transaction.state.log.replication.factor":         "1",
		"transaction.state.log.min.isr":                    "1",
		"transaction.state.log.num.partitions":             "4",
		"share.coordinator.state.topic.replication.factor": "1",
		"share.coordinator.state.topic.min.isr":            "1",
		"group.initial.rebalance.delay.ms":                 "0",
		"num.network.threads":                              "2",
		"num.io.threads":                                   "2",
		"num.recovery.threads.per.data.dir":                "1",
		"log.cleaner.dedupe.buffer.size":                   strconv.Itoa(16 << 20),
	}
	maps.Copy(props, k.opts.Properties)
	var sb strings.Builder
	sb.WriteString("# Written by sluice internal/testinfra for a test-only KRaft broker.\n")
	for _, key := range slices.Sorted(maps.Keys(props)) {
		fmt.Fprintf(&sb, "%s=%s\n", key, props[key])
	}
	if err := os.WriteFile(k.propertiesPath(), []byte(sb.String()), 0o644); err != nil {
		return err
	}
	// Used only if the jar directory holds a log4j2 SLF4J binding
	// (the Maven dependency tree of kafka_2.13 has none, so Kafka is silent).
	log4j := "status = error\n" +
		"appender.console.type = Console\n" +
		"appender.console.name = STDOUT\n" +
		"appender.console.layout.type = PatternLayout\n" +
		"appender.console.layout.pattern = [%d] %p %m (%c)%n\n" +
		"rootLogger.level = WARN\n" +
		"rootLogger.appenderRef.stdout.ref = STDOUT\n"
	return os.WriteFile(filepath.Join(k.Dir, "log4j2.properties"), []byte(log4j), 0o644)
}

func (k *Kafka) propertiesPath() string { return filepath.Join(k.Dir, "server.properties") }

// Log is the path of the broker's captured stdout and stderr.
func (k *Kafka) Log() string { return filepath.Join(k.Dir, "kafka.log") }

// LogTail returns the last n lines of the broker's stdout and stderr.
func (k *Kafka) LogTail(n int) string { return tails(n, k.Log()) }

func (k *Kafka) javaArgs(mainClass string, args ...string) []string {
	argv := []string{k.java}
	argv = append(argv, k.opts.JVMArgs...)
	argv = append(argv,
		"-Djava.awt.headless=true",
		"-XX:+ExitOnOutOfMemoryError",
		"-Dlog4j2.configurationFile="+filepath.Join(k.Dir, "log4j2.properties"),
		"-cp", filepath.Join(k.libs, "*"),
		mainClass)
	return append(argv, args...)
}

func (k *Kafka) format(ctx context.Context) error {
	argv := k.javaArgs("kafka.tools.StorageTool", "format",
		"--cluster-id", k.ClusterID, "--config", k.propertiesPath())
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = k.Dir
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(k.Dir, "format.log"), out, 0o644)
	if err != nil {
		return fmt.Errorf("testinfra: kafka storage format: %v\n%s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Start (re)starts the broker on the same ports and data directory and
// returns once it answers a metadata request. It is an error to Start a
// running broker.
func (k *Kafka) Start(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc != nil && !k.proc.exited() {
		return errors.New("testinfra: kafka is already running")
	}
	proc, err := startProcess("kafka", k.Dir, k.Log(), nil,
		k.javaArgs("kafka.Kafka", k.propertiesPath())...)
	if err != nil {
		return err
	}
	k.proc = proc

	ctx, cancel := context.WithTimeout(ctx, k.opts.ReadyTimeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.DialTimeout(time.Second),
		kgo.RetryTimeout(time.Second), kgo.RequestRetries(0))
	if err != nil {
		_ = proc.kill()
		k.proc = nil
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		brokers, lerr := adm.ListBrokers(attempt)
		cancelAttempt()
		if lerr == nil && len(brokers) > 0 {
			return nil
		}
		if lerr == nil {
			lerr = errors.New("no brokers in metadata")
		}
		if proc.exited() {
			k.proc = nil
			return fmt.Errorf("testinfra: kafka %s before answering on %s:%s%s", proc.exitStatus(), k.Addr, k.LogTail(40), k.silentHint())
		}
		if ctx.Err() != nil {
			_ = proc.kill()
			k.proc = nil
			return fmt.Errorf("testinfra: kafka did not answer on %s in time (last error: %v):%s", k.Addr, lerr, k.LogTail(40))
		}
		sleep(100*time.Millisecond, proc.done, ctx.Done())
	}
}

// silentHint explains an empty log: Kafka logs through SLF4J, and the jars
// Maven resolves for kafka_2.13 carry no SLF4J binding, so a broker that dies
// at startup (say, on a port in use) prints nothing.
func (k *Kafka) silentHint() string {
	if b, _ := filepath.Glob(filepath.Join(k.libs, "log4j-slf4j*-impl-*.jar")); len(b) > 0 {
		return ""
	}
	if b, _ := filepath.Glob(filepath.Join(k.libs, "slf4j-simple-*.jar")); len(b) > 0 {
		return ""
	}
	return "\n(Kafka's jar set in " + k.libs + " has no SLF4J binding, so the broker logs nothing; " +
		"copy org.apache.logging.log4j:log4j-slf4j-impl into it to see WARN and ERROR output)"
}

// Stop sends SIGTERM (Kafka shuts down cleanly in a few seconds), waits up
// to StopTimeout and then SIGKILLs. It keeps Dir so Start can resume.
// Stopping a stopped broker does nothing.
func (k *Kafka) Stop() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc == nil {
		return nil
	}
	_, err := k.proc.stop(k.opts.StopTimeout)
	k.proc = nil
	return err
}

// Kill ends the broker with SIGKILL, simulating a crash. Dir is kept.
func (k *Kafka) Kill() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc == nil {
		return nil
	}
	err := k.proc.kill()
	k.proc = nil
	return err
}

// PID is the broker's process id, 0 when it is not running.
func (k *Kafka) PID() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.proc.pid()
}

// Close stops the broker and removes Dir.
func (k *Kafka) Close() error {
	err := k.Stop()
	if rerr := os.RemoveAll(k.Dir); err == nil {
		err = rerr
	}
	return err
}

// NewClient returns a franz-go client seeded with the broker's address; opts
// are appended.
func (k *Kafka) NewClient(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.Addr)}, opts...)...)
}

// CreateTopic creates topic with the given partition count (replication
// factor 1) and waits until every partition has a leader.
func (k *Kafka) CreateTopic(ctx context.Context, topic string, partitions int) error {
	cl, err := k.NewClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, int32(partitions), 1, nil, topic); err != nil {
		return fmt.Errorf("testinfra: create topic %q: %w", topic, err)
	}
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := md.Topics[topic]; ok && td.Err == nil && len(td.Partitions) == partitions && allLed(td.Partitions) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testinfra: topic %q created but its partitions have no leaders yet: %w", topic, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func allLed(ps kadm.PartitionDetails) bool {
	for _, p := range ps {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}
