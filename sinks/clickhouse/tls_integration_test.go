package clickhouse_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// writeTestCA writes a CA certificate and a server certificate for
// 127.0.0.1 signed by it into dir, returning the file names.
func writeTestCA(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER),
		write("server.key", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(srvKey))
}

// TestTLS inserts over TLS on both transports (native on tcp_port_secure,
// HTTP on https_port), verifying the server against a private CA, and
// checks that an unknown CA is refused. It runs on 18.16 only: the 26.9
// server (chdb-core's clickhouse-local) opens no TLS ports.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writeTestCA(t, dir)
	ports, err := testinfra.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	ch := testinfra.ClickHouseT(t, testinfra.ClickHouseOptions{Server: testinfra.Legacy, ExtraConfig: fmt.Sprintf(`
    <tcp_port_secure>%d</tcp_port_secure>
    <https_port>%d</https_port>
    <openSSL><server>
        <certificateFile>%s</certificateFile>
        <privateKeyFile>%s</privateKeyFile>
        <verificationMode>none</verificationMode>
        <loadDefaultCAFile>false</loadDefaultCAFile>
        <cacheSessions>true</cacheSessions>
        <disableProtocols>sslv2,sslv3</disableProtocols>
        <preferServerCiphers>true</preferServerCiphers>
    </server></openSSL>`, ports[0], ports[1], certFile, keyFile)})
	ctx := context.Background()
	if err := ch.Exec(ctx, "CREATE TABLE secure (id UInt64, s LowCardinality(String)) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	tlsAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	httpsURL := fmt.Sprintf("https://127.0.0.1:%d", ports[1])
	for _, tc := range []struct {
		name string
		cfg  clickhouse.Config
	}{
		{"native", clickhouse.Config{Transport: "native", Addr: tlsAddr, TLS: true, TLSCAFile: caFile}},
		{"http", clickhouse.Config{Transport: "http", HTTPAddr: httpsURL, TLSCAFile: caFile}},
		{"http host:port with tls", clickhouse.Config{Transport: "http", HTTPAddr: strings.TrimPrefix(httpsURL, "https://"), TLS: true, TLSCAFile: caFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.InsertLinger = 10 * time.Millisecond
			s, err := clickhouse.New(ctx, cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			runSink(t, s)
			tbl, err := s.Table(ctx, "secure")
			if err != nil {
				t.Fatal(err)
			}
			b := s.NewBlock(tbl)
			for i := range 100 {
				if err := b.AppendRow(appendStr(binary.LittleEndian.AppendUint64(nil, uint64(i)), tc.name)); err != nil {
					t.Fatal(err)
				}
			}
			var acked atomic.Int64
			if err := s.Send(ctx, clickhouse.NewChunk(b, []clickhouse.Ack{countAck{&acked}})); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return acked.Load() == 1 }, 20*time.Second, "TLS insert")
			if got := queryT(t, ch, fmt.Sprintf("SELECT count() FROM secure WHERE s = '%s'", tc.name)); got != "100" {
				t.Errorf("%s rows over TLS, want 100", got)
			}
		})
	}
	// Without the CA the server's certificate is refused, loudly and early:
	// the error names the certificate, not the timeout, which only bounds
	// a handshake slow on a busy machine.
	for _, cfg := range []clickhouse.Config{
		{Transport: "native", Addr: tlsAddr, TLS: true, ConnectTimeout: time.Minute},
		{Transport: "http", HTTPAddr: httpsURL, ConnectTimeout: time.Minute},
	} {
		_, err := clickhouse.New(ctx, cfg, slog.New(slog.DiscardHandler))
		var unknown x509.UnknownAuthorityError
		if err == nil || (!errors.As(err, &unknown) && !strings.Contains(err.Error(), "certificate")) {
			t.Errorf("%s without the CA: err = %v, want a certificate error", cfg.Transport, err)
		}
	}
}
