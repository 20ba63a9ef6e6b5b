package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/tenancy"
)

const (
	clientAdminToken = "sluice_admin"
	clientAcmeToken  = "sluice_acme"
)

// clientValidator accepts binaries that start like WebAssembly, and
// refuses at activation one that names "forbidden_table".
type clientValidator struct{}

func (clientValidator) CheckUpload(_ context.Context, _, _ string, wasm []byte) error {
	if !bytes.HasPrefix(wasm, []byte("\x00asm")) {
		return errors.New("not a WebAssembly binary (no \\0asm magic)")
	}
	return nil
}

func (clientValidator) CheckActivation(_ context.Context, _, pipeline string, wasm, sample []byte) error {
	if bytes.Contains(wasm, []byte("forbidden_table")) {
		return errors.New("the module refused init: table forbidden_table is not among pipeline " + pipeline + "'s tables [acme_logs]")
	}
	if bytes.Contains(sample, []byte("poison")) {
		return errors.New("sample line 1: error: poison")
	}
	return nil
}

// apiServer starts the real admin API handler; acme has one pipeline
// (logs), globex two.
func apiServer(t *testing.T, tls bool, maxModule int64) (*httptest.Server, *tenancy.Store) {
	t.Helper()
	store, err := tenancy.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	auth, err := tenancy.NewAuth([]string{tenancy.HashToken(clientAdminToken)},
		map[string][]string{"acme": {tenancy.HashToken(clientAcmeToken)}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := tenancy.NewServer(tenancy.ServerOptions{Store: store, Auth: auth, Validator: clientValidator{},
		Tenants: map[string][]string{"acme": {"logs"}, "globex": {"events", "metrics"}},
		Audit:   slog.New(slog.DiscardHandler), MaxModuleBytes: maxModule})
	if err != nil {
		t.Fatal(err)
	}
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv, store
}

func writeModule(t *testing.T, content string) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.wasm")
	b := []byte("\x00asm\x01\x00\x00\x00" + content)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return path, hex.EncodeToString(sum[:])
}

func runClient(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func expectRun(t *testing.T, code int, stdout, stderr string, wantCode int, wantOut, wantErr string) {
	t.Helper()
	if code != wantCode || !strings.Contains(stdout, wantOut) || !strings.Contains(stderr, wantErr) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
			code, stdout, stderr, wantCode, wantOut, wantErr)
	}
}

func TestClientModuleLifecycle(t *testing.T) {
	srv, store := apiServer(t, false, 0)
	t.Setenv("SLUICE_SERVER", srv.URL)
	t.Setenv("SLUICE_TOKEN", clientAcmeToken)
	first, shaFirst := writeModule(t, "first")
	second, shaSecond := writeModule(t, "second")

	code, out, errOut := runClient(t, "module", "push", first, "-note", "v1")
	expectRun(t, code, out, errOut, 0, "uploaded acme/logs "+shaFirst, "")
	code, out, errOut = runClient(t, "module", "push", first)
	expectRun(t, code, out, errOut, 0, "acme/logs already has "+shaFirst, "")

	sample := filepath.Join(t.TempDir(), "sample.jsonl")
	if err := os.WriteFile(sample, []byte(`{"value":"ok"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runClient(t, "module", "push", "-activate", "-sample", sample, second)
	expectRun(t, code, out, errOut, 0, "activated acme/logs "+shaSecond+" (previous: none)", "")

	code, out, errOut = runClient(t, "module", "activate", shaFirst[:10])
	expectRun(t, code, out, errOut, 0, "activated acme/logs "+shaFirst+" (previous: "+shaSecond+")", "")
	code, out, errOut = runClient(t, "module", "activate", shaFirst)
	expectRun(t, code, out, errOut, 0, "acme/logs: "+shaFirst+" is already active", "")

	code, out, errOut = runClient(t, "module", "ls")
	expectRun(t, code, out, errOut, 0, "acme/logs: 2 version(s)", "")
	if !regexp.MustCompile(`(?m)^\*\s+` + shaFirst[:16] + `\s+\d+\s+\S+\s+tenant acme \(sha256:[0-9a-f]{12}\)\s+v1$`).MatchString(out) {
		t.Fatalf("ls does not mark the first version active with its note:\n%s", out)
	}
	if !strings.Contains(out, "rollback returns to "+shaSecond[:16]) {
		t.Fatalf("ls does not say where rollback goes:\n%s", out)
	}

	code, out, errOut = runClient(t, "module", "rollback")
	expectRun(t, code, out, errOut, 0, "rolled back acme/logs to "+shaSecond+" (from "+shaFirst+")", "")
	code, out, errOut = runClient(t, "module", "rollback")
	expectRun(t, code, out, errOut, 1, "", "sluice module rollback: 409 Conflict: tenant acme pipeline logs: no earlier active version")

	code, out, errOut = runClient(t, "module", "rm", shaSecond[:8])
	expectRun(t, code, out, errOut, 1, "", "409 Conflict: tenant acme pipeline logs version "+shaSecond+": the version is active")
	code, out, errOut = runClient(t, "module", "rm", shaFirst[:8])
	expectRun(t, code, out, errOut, 0, "deleted acme/logs "+shaFirst[:8], "")

	code, out, errOut = runClient(t, "module", "ls", "-json")
	expectRun(t, code, out, errOut, 0, `"active":{"sha256":"`+shaSecond+`"`, "")
	st, _ := store.List("acme", "logs")
	if len(st.Versions) != 1 || st.Active != shaSecond {
		t.Fatalf("store after the session: %+v", st)
	}
}

func TestClientRefusals(t *testing.T) {
	srv, _ := apiServer(t, false, 1<<10)
	t.Setenv("SLUICE_SERVER", srv.URL)
	t.Setenv("SLUICE_TOKEN", clientAcmeToken)
	good, _ := writeModule(t, "good")
	forbidden, shaForbidden := writeModule(t, "forbidden_table")
	big, _ := writeModule(t, strings.Repeat("x", 8<<20))
	notWasm := filepath.Join(t.TempDir(), "m.wasm")
	if err := os.WriteFile(notWasm, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	poison := filepath.Join(t.TempDir(), "poison.jsonl")
	if err := os.WriteFile(poison, []byte("poison\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		wantErr string
	}{
		{"wrong token", []string{"ls", "-token", "nope"}, 1, "401 Unauthorized: missing or unknown bearer token"},
		{"other tenant", []string{"ls", "-tenant", "globex", "-pipeline", "events"}, 1, "403 Forbidden: tenant acme may not act on tenant globex"},
		{"unknown pipeline", []string{"ls", "-pipeline", "nope"}, 1, "404 Not Found: tenant acme has no pipeline nope"},
		{"not wasm", []string{"push", notWasm}, 1, "422 Unprocessable Entity: not a WebAssembly binary"},
		{"oversized", []string{"push", big}, 1, "413 Request Entity Too Large: module of 8388616 bytes is over the limit of 1024 bytes"},
		{"forbidden table", []string{"push", forbidden, "-activate"}, 1, "422 Unprocessable Entity: the module refused init: table forbidden_table is not among pipeline logs's tables"},
		{"failing sample", []string{"push", good, "-activate", "-sample", poison}, 1, "422 Unprocessable Entity: sample line 1: error: poison"},
		{"unknown version", []string{"activate", "0123456789"}, 1, "404 Not Found"},
		{"short prefix", []string{"rm", "0123"}, 1, "400 Bad Request"},
		{"missing file", []string{"push", filepath.Join(t.TempDir(), "none.wasm")}, 1, "no such file"},
		{"no argument", []string{"push"}, 2, "want 1 argument(s), got 0"},
		{"extra argument", []string{"rollback", "x"}, 2, "want 0 argument(s), got 1"},
		{"sample without activate", []string{"push", good, "-sample", poison}, 2, "-sample goes with -activate"},
		{"bad flag", []string{"ls", "-nope"}, 2, "flag provided but not defined"},
		{"bad server", []string{"ls", "-server", "ftp://x"}, 2, `-server "ftp://x": want http(s)://host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runClient(t, append([]string{"module"}, tc.args...)...)
			expectRun(t, code, out, errOut, tc.code, "", tc.wantErr)
		})
	}
	// The refused module stays uploaded but inactive.
	code, out, errOut := runClient(t, "module", "ls")
	expectRun(t, code, out, errOut, 0, shaForbidden[:16], "")
	if strings.Contains(out, "*") {
		t.Fatalf("a refused module is active:\n%s", out)
	}
}

func TestClientTokenSources(t *testing.T) {
	srv, _ := apiServer(t, false, 0)
	t.Setenv("SLUICE_SERVER", "")
	t.Setenv("SLUICE_TOKEN", "")
	t.Setenv("SLUICE_TOKEN_FILE", "")
	code, out, errOut := runClient(t, "module", "ls", "-server", srv.URL)
	expectRun(t, code, out, errOut, 2, "", "no token: set $SLUICE_TOKEN or $SLUICE_TOKEN_FILE, or give -token-file")
	code, out, errOut = runClient(t, "module", "ls", "-token", clientAcmeToken)
	expectRun(t, code, out, errOut, 2, "", "no server: give -server or set $SLUICE_SERVER")

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(clientAcmeToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runClient(t, "module", "ls", "-server", srv.URL, "-token-file", tokenFile)
	expectRun(t, code, out, errOut, 0, "acme/logs: 0 version(s)", "")
	t.Setenv("SLUICE_TOKEN_FILE", tokenFile)
	code, out, errOut = runClient(t, "module", "ls", "-server", srv.URL)
	expectRun(t, code, out, errOut, 0, "acme/logs: 0 version(s)", "")
	// -token wins over the environment.
	code, out, errOut = runClient(t, "module", "ls", "-server", srv.URL, "-token", "wrong")
	expectRun(t, code, out, errOut, 1, "", "401 Unauthorized")

	// An admin token needs -tenant, and -pipeline when the tenant has several.
	t.Setenv("SLUICE_TOKEN_FILE", "")
	t.Setenv("SLUICE_TOKEN", clientAdminToken)
	code, out, errOut = runClient(t, "module", "ls", "-server", srv.URL)
	expectRun(t, code, out, errOut, 1, "", "-tenant is required with an admin token")
	code, out, errOut = runClient(t, "module", "ls", "-server", srv.URL, "-tenant", "globex")
	expectRun(t, code, out, errOut, 1, "", "-pipeline is required: tenant globex has pipelines [events metrics]")
	code, out, errOut = runClient(t, "module", "ls", "-server", srv.URL, "-tenant", "acme")
	expectRun(t, code, out, errOut, 0, "acme/logs: 0 version(s)", "")
}

func TestClientTLS(t *testing.T) {
	srv, _ := apiServer(t, true, 0)
	t.Setenv("SLUICE_TOKEN", clientAcmeToken)
	code, out, errOut := runClient(t, "module", "ls", "-server", srv.URL)
	expectRun(t, code, out, errOut, 1, "", "certificate")

	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runClient(t, "module", "ls", "-server", srv.URL, "-ca", ca)
	expectRun(t, code, out, errOut, 0, "acme/logs: 0 version(s)", "")
}

func TestClientWarnsOnPlainHTTP(t *testing.T) {
	var stderr bytes.Buffer
	_, err := newAPIClient(clientFlags{server: "http://sluice.example:9470", token: "x"}, &stderr)
	if err != nil || !strings.Contains(stderr.String(), "warning: sending the token unencrypted to sluice.example:9470") {
		t.Fatalf("err %v, stderr %q", err, stderr.String())
	}
	stderr.Reset()
	if _, err := newAPIClient(clientFlags{server: "http://127.0.0.1:9470", token: "x"}, &stderr); err != nil || stderr.Len() != 0 {
		t.Fatalf("loopback: err %v, stderr %q", err, stderr.String())
	}
}

func TestTokenNewAndHash(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := cmdToken([]string{"new"}, &stdout, &stderr); code != 0 {
		t.Fatalf("token new: exit %d, %s", code, stderr.String())
	}
	m := regexp.MustCompile(`^token: (sluice_[A-Za-z0-9_-]{43})\nhash:  (sha256:[0-9a-f]{64})\n$`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("token new printed %q", stdout.String())
	}
	if tenancy.HashToken(m[1]) != m[2] {
		t.Fatal("token new: the hash is not the token's")
	}
	var again bytes.Buffer
	cmdToken([]string{"new"}, &again, &stderr)
	if again.String() == stdout.String() {
		t.Fatal("token new printed the same token twice")
	}

	saved := tokenInput
	defer func() { tokenInput = saved }()
	tokenInput = strings.NewReader(m[1] + "\n")
	stdout.Reset()
	if code := cmdToken([]string{"hash"}, &stdout, &stderr); code != 0 || stdout.String() != m[2]+"\n" {
		t.Fatalf("token hash: exit %d, %q; want %s", code, stdout.String(), m[2])
	}
	tokenInput = strings.NewReader("\n")
	stderr.Reset()
	if code := cmdToken([]string{"hash"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "no token on standard input") {
		t.Fatalf("token hash of nothing: exit %d, %q", code, stderr.String())
	}
	if code := cmdToken([]string{"nope"}, &stdout, &stderr); code != 2 {
		t.Fatalf("token nope: exit %d", code)
	}
}

// TestPrintVersionsQuarantined: module ls marks a quarantined version and
// says why, and lists a quarantine whose version was deleted too.
func TestPrintVersionsQuarantined(t *testing.T) {
	at := time.Date(2026, 3, 2, 9, 31, 0, 0, time.UTC)
	a, b, gone := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64)
	l := &tenancy.ListResponse{
		Active:   &tenancy.Version{SHA256: a},
		Versions: []tenancy.Version{{SHA256: a, UploadedAt: at}, {SHA256: b, UploadedAt: at}},
		Quarantined: []tenancy.Quarantine{{SHA256: b, At: at, Reason: "a call ran 12s, past its 2s deadline"},
			{SHA256: gone, At: at, Reason: "stuck in the upload check"}},
	}
	var out bytes.Buffer
	printVersions(&out, "acme/logs", l)
	for _, want := range []string{"*  " + a[:16], "!  " + b[:16],
		"! " + b[:16] + " quarantined at 2026-03-02T09:31:00Z: a call ran 12s, past its 2s deadline (an admin's activation runs it again)",
		"! " + gone[:16] + " quarantined at"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
