package tenancy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzUploadHandler sends arbitrary uploads: path pieces, token, query,
// body, with or without a Content-Length. The handler must not panic,
// must answer only its documented statuses (no 5xx: the fakes never fail),
// must store exactly what it says it stored, and the store must still open.
func FuzzUploadHandler(f *testing.F) {
	f.Add("acme", "logs", uint8(0), "", "note=x", []byte("\x00asm\x01\x00\x00\x00ok"), true)
	f.Add("acme", "logs", uint8(0), "", "", []byte("\x00asm\x01\x00\x00\x00abi=7"), false)
	f.Add("globex", "events", uint8(0), "", "", []byte("\x00asm"), true)
	f.Add("globex", "events", uint8(1), "", "note=%zz", []byte("\x00asm\x01\x00\x00\x00g"), true)
	f.Add("acme", "nope", uint8(2), "", "", []byte{}, true)
	f.Add("acme/pipelines/logs", "x", uint8(9), "Bearer acme-token", "", []byte("x"), false)
	f.Add("..", "%2e", uint8(9), "nobody", "note="+strings.Repeat("n", 300), bytes.Repeat([]byte{0}, 5000), true)

	dir := f.TempDir()
	store := openT(f, dir)
	auth := mustAuth(f)
	h, err := NewServer(ServerOptions{Store: store, Auth: auth, Tenants: testTenants, Validator: fakeValidator{},
		Activator: &fakeActivator{}, Audit: slog.New(slog.DiscardHandler), MaxModuleBytes: 4 << 10, MaxSampleBytes: 1 << 10})
	if err != nil {
		f.Fatal(err)
	}
	allowed := map[int]bool{200: true, 201: true, 307: true, 400: true, 401: true, 403: true, 404: true, 405: true, 409: true, 413: true, 422: true, 429: true}
	f.Fuzz(func(t *testing.T, tenant, pipeline string, tokenSel uint8, token, query string, body []byte, withLength bool) {
		switch tokenSel {
		case 0:
			token = acmeToken
		case 1:
			token = adminToken
		case 2:
			token = globexToken
		}
		req := &http.Request{
			Method:     "POST",
			URL:        &url.URL{Path: "/v1/tenants/" + tenant + "/pipelines/" + pipeline + "/modules", RawQuery: query},
			Header:     http.Header{"Authorization": {"Bearer " + token}},
			Body:       io.NopCloser(bytes.NewReader(body)),
			Host:       "sluice.test",
			RemoteAddr: "192.0.2.1:1234",
			Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		}
		req = req.WithContext(t.Context())
		if withLength {
			req.ContentLength = int64(len(body))
		} else {
			req.ContentLength = -1
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if !allowed[rec.Code] {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if _, right := auth.Identify(token); right && rec.Code == http.StatusTooManyRequests {
			t.Fatalf("a right token got 429: %s", rec.Body)
		}
		if rec.Code == 307 {
			return
		}
		var resp struct {
			Error   string  `json:"error"`
			Version Version `json:"version"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatalf("status %d: body %q is not JSON: %v", rec.Code, rec.Body, err)
		}
		if rec.Code >= 400 && resp.Error == "" {
			t.Fatalf("status %d without a reason: %s", rec.Code, rec.Body)
		}
		if rec.Code == 200 || rec.Code == 201 {
			if resp.Version.SHA256 != shaOf(body) {
				t.Fatalf("answered version %s for a body hashing to %s", resp.Version.SHA256, shaOf(body))
			}
			if _, err := store.Resolve(tenant, pipeline, resp.Version.SHA256); err != nil {
				t.Fatalf("the answered version is not listed: %v", err)
			}
			if blob, err := store.Blob(resp.Version.SHA256); err != nil || !bytes.Equal(blob, body) {
				t.Fatalf("stored blob %q, %v; want the body", blob, err)
			}
		}
		if rec.Code == 201 {
			if _, err := OpenStore(dir); err != nil {
				t.Fatalf("the store no longer opens: %v", err)
			}
		}
	})
}

// FuzzManifestLoad opens a store whose manifest is arbitrary bytes, next to
// two intact blobs. Opening must fail with ErrCorrupt or give a state
// that holds together: active versions and rollback targets listed, blobs
// readable, and the manifest written back reading the same.
func FuzzManifestLoad(f *testing.F) {
	a, b := fakeWasm("a"), fakeWasm("b")
	shaA, shaB := shaOf(a), shaOf(b)
	version := func(sha string, size int) string {
		return fmt.Sprintf(`{"sha256":%q,"size":%d,"uploaded_at":"2026-01-02T03:04:05Z","uploaded_by":"tenant acme (sha256:0123456789ab)","note":"n"}`, sha, size)
	}
	valid := fmt.Sprintf(`{"format":1,"pipelines":[{"tenant":"acme","pipeline":"logs","active":%q,"versions":[%s,%s],`+
		`"history":[{"sha256":%q,"at":"2026-01-02T03:04:05Z","by":"x"},{"sha256":%q,"previous":%q,"at":"2026-01-02T03:04:06Z","by":"x"}],"rollback_stack":[%q]},`+
		`{"tenant":"globex","pipeline":"events","active":"","versions":[%s],"history":[],"rollback_stack":[]}]}`,
		shaB, version(shaA, len(a)), version(shaB, len(b)), shaA, shaB, shaA, shaA, version(shaA, len(a)))
	f.Add([]byte(valid))
	f.Add([]byte("\xef\xbb\xbf" + valid))
	f.Add([]byte("\xff\xfe{"))
	f.Add([]byte(`{"format":1,"pipelines":[]}`))
	f.Add([]byte(`{"format":1,"pipelines":null}`))
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`{"format":2}`))
	f.Add([]byte(`{"format":1,"pipelines":[{"tenant":"acme","pipeline":"logs","versions":[` + version(shaA, 3) + `]}]}`))
	f.Add([]byte(`{"format":1,"pipelines":[{"tenant":"acme","pipeline":"logs","active":"` + shaB + `","versions":[` + version(shaA, len(a)) + `]}]}`))
	f.Add([]byte(`{"format":1,"pipelines":[{"tenant":"acme","pipeline":"logs","versions":[{"sha256":"` + shaA + `","size":9,"uploaded_at":"+99999-01-01T00:00:00Z"}]}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(""))

	f.Fuzz(func(t *testing.T, raw []byte) {
		// Decoding alone is fast; go to disk only with a manifest that
		// decodes, as OpenStore would refuse the rest the same way.
		if _, err := decodeManifest(raw); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeManifest failed without ErrCorrupt: %v", err)
			}
			return
		}
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, blobsDir), 0o750); err != nil {
			t.Fatal(err)
		}
		for _, w := range [][]byte{a, b} {
			if err := os.WriteFile(filepath.Join(dir, blobsDir, shaOf(w)+".wasm"), w, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, manifestName), raw, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := OpenStore(dir)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("OpenStore failed without ErrCorrupt: %v", err)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, manifestName)); !bytes.Equal(got, raw) {
				t.Fatal("a refused manifest was rewritten")
			}
			return
		}
		for k, st := range s.m {
			if st.Active != "" {
				if _, ok := st.Version(st.Active); !ok {
					t.Fatalf("%v: active %s is not listed", k, st.Active)
				}
			}
			for _, sha := range st.RollbackStack {
				if _, ok := st.Version(sha); !ok {
					t.Fatalf("%v: rollback target %s is not listed", k, sha)
				}
			}
			for _, v := range st.Versions {
				if _, err := s.Blob(v.SHA256); err != nil {
					t.Fatalf("%v: %v", k, err)
				}
			}
		}
		// Written back, the manifest reads the same.
		enc, err := s.m.encode()
		if err != nil {
			t.Fatalf("a loaded manifest does not encode: %v", err)
		}
		m2, err := decodeManifest(enc)
		if err != nil {
			t.Fatalf("the manifest as written does not read back: %v\n%s", err, enc)
		}
		enc2, err := m2.encode()
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip changed the manifest: %v\n%s\n%s", err, enc, enc2)
		}
		// And the store still takes changes.
		if _, _, err := s.Put("acme", "logs", fakeWasm("new"), "x", ""); err != nil && !errors.Is(err, ErrTooManyVersions) {
			t.Fatalf("Put after load: %v", err)
		}
		if _, err := OpenStore(dir); err != nil {
			t.Fatalf("reopen after a change: %v", err)
		}
	})
}
