package tenancy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeWasm is a distinct binary per tag; the Store does not look inside.
func fakeWasm(tag string) []byte { return []byte("\x00asm\x01\x00\x00\x00" + tag) }

func shaOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func openT(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func putT(t testing.TB, s *Store, tenant, pipeline, tag string) Version {
	t.Helper()
	v, _, err := s.Put(tenant, pipeline, fakeWasm(tag), "test", "")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func activateT(t testing.TB, s *Store, tenant, pipeline string, v Version) {
	t.Helper()
	if _, _, err := s.Activate(tenant, pipeline, v.SHA256, "test"); err != nil {
		t.Fatal(err)
	}
}

func TestStorePutIsIdempotent(t *testing.T) {
	s := openT(t, t.TempDir())
	v1, created, err := s.Put("acme", "logs", fakeWasm("a"), "tenant acme (sha256:x)", "first")
	if err != nil || !created {
		t.Fatalf("first Put: created %v, err %v", created, err)
	}
	if v1.SHA256 != shaOf(fakeWasm("a")) || v1.Size != int64(len(fakeWasm("a"))) || v1.Note != "first" || v1.UploadedBy != "tenant acme (sha256:x)" {
		t.Fatalf("version %+v", v1)
	}
	v2, created, err := s.Put("acme", "logs", fakeWasm("a"), "someone else", "second")
	if err != nil || created || v2 != v1 {
		t.Fatalf("second Put = %+v, created %v, err %v; want the first version unchanged", v2, created, err)
	}
	st, _ := s.List("acme", "logs")
	if len(st.Versions) != 1 {
		t.Fatalf("%d versions, want 1", len(st.Versions))
	}
}

func TestStorePersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	a := putT(t, s, "acme", "logs", "a")
	b := putT(t, s, "acme", "logs", "b")
	putT(t, s, "globex", "metrics", "a") // the same blob in another tenant
	activateT(t, s, "acme", "logs", a)
	activateT(t, s, "acme", "logs", b)
	want, _ := s.List("acme", "logs")

	s2 := openT(t, dir)
	got, _ := s2.List("acme", "logs")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after reopen:\n%+v\nwant\n%+v", got, want)
	}
	if v, ok := s2.Active("acme", "logs"); !ok || v.SHA256 != b.SHA256 {
		t.Fatalf("active after reopen = %v %v, want %s", v.SHA256, ok, b.SHA256)
	}
	wasm, err := s2.Blob(a.SHA256)
	if err != nil || string(wasm) != string(fakeWasm("a")) {
		t.Fatalf("Blob = %q, %v", wasm, err)
	}
	if _, ok := s2.Active("globex", "metrics"); ok {
		t.Fatal("globex/metrics has an active version; it was never activated")
	}
}

func TestStoreRollback(t *testing.T) {
	s := openT(t, t.TempDir())
	if _, _, err := s.Rollback("acme", "logs", "x"); !errors.Is(err, ErrNoRollback) {
		t.Fatalf("Rollback with nothing = %v, want ErrNoRollback", err)
	}
	a, b, c := putT(t, s, "acme", "logs", "a"), putT(t, s, "acme", "logs", "b"), putT(t, s, "acme", "logs", "c")
	activateT(t, s, "acme", "logs", a)
	if _, _, err := s.Rollback("acme", "logs", "x"); !errors.Is(err, ErrNoRollback) {
		t.Fatalf("Rollback with one activation = %v, want ErrNoRollback", err)
	}
	activateT(t, s, "acme", "logs", b)
	activateT(t, s, "acme", "logs", c)

	// c → b → a, then nothing earlier.
	for _, want := range []Version{b, a} {
		target, err := s.RollbackTarget("acme", "logs")
		if err != nil || target.SHA256 != want.SHA256 {
			t.Fatalf("RollbackTarget = %s, %v; want %s", target.SHA256, err, want.SHA256)
		}
		to, _, err := s.Rollback("acme", "logs", "x")
		if err != nil || to.SHA256 != want.SHA256 {
			t.Fatalf("Rollback = %s, %v; want %s", to.SHA256, err, want.SHA256)
		}
		if v, _ := s.Active("acme", "logs"); v.SHA256 != want.SHA256 {
			t.Fatalf("active %s after rollback, want %s", v.SHA256, want.SHA256)
		}
	}
	if _, _, err := s.Rollback("acme", "logs", "x"); !errors.Is(err, ErrNoRollback) {
		t.Fatalf("third Rollback = %v, want ErrNoRollback", err)
	}
	st, _ := s.List("acme", "logs")
	var trail []string
	for _, h := range st.History {
		trail = append(trail, fmt.Sprintf("%s<-%s rb=%v", h.SHA256[:4], shortOr(h.Previous), h.Rollback))
	}
	want := []string{
		a.SHA256[:4] + "<- rb=false", b.SHA256[:4] + "<-" + a.SHA256[:4] + " rb=false", c.SHA256[:4] + "<-" + b.SHA256[:4] + " rb=false",
		b.SHA256[:4] + "<-" + c.SHA256[:4] + " rb=true", a.SHA256[:4] + "<-" + b.SHA256[:4] + " rb=true",
	}
	if fmt.Sprint(trail) != fmt.Sprint(want) {
		t.Fatalf("history %v, want %v", trail, want)
	}
}

func shortOr(s string) string {
	if len(s) < 4 {
		return s
	}
	return s[:4]
}

func TestStoreActivateSameIsNoChange(t *testing.T) {
	s := openT(t, t.TempDir())
	a := putT(t, s, "acme", "logs", "a")
	activateT(t, s, "acme", "logs", a)
	prev, changed, err := s.Activate("acme", "logs", a.SHA256, "x")
	if err != nil || changed || prev != a.SHA256 {
		t.Fatalf("re-Activate = %q, %v, %v; want no change", prev, changed, err)
	}
	st, _ := s.List("acme", "logs")
	if len(st.History) != 1 || len(st.RollbackStack) != 0 {
		t.Fatalf("history %d, rollback stack %v; want 1 and empty", len(st.History), st.RollbackStack)
	}
}

func TestStoreDelete(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	a, b := putT(t, s, "acme", "logs", "a"), putT(t, s, "acme", "logs", "b")
	putT(t, s, "globex", "metrics", "b")
	activateT(t, s, "acme", "logs", a)
	activateT(t, s, "acme", "logs", b)

	if err := s.Delete("acme", "logs", b.SHA256); !errors.Is(err, ErrActive) {
		t.Fatalf("Delete active = %v, want ErrActive", err)
	}
	if err := s.Delete("acme", "logs", strings.Repeat("0", 64)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete unknown = %v, want ErrNotFound", err)
	}
	if err := s.Delete("acme", "logs", a.SHA256); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "blobs", a.SHA256+".wasm")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("blob of a deleted, unlisted version: stat = %v, want not there", err)
	}
	// The deleted version left the rollback stack.
	if _, err := s.RollbackTarget("acme", "logs"); !errors.Is(err, ErrNoRollback) {
		t.Fatalf("RollbackTarget after deleting the earlier version = %v, want ErrNoRollback", err)
	}
	// b is still listed by globex: deleting acme's leaves the blob.
	activateT(t, s, "acme", "logs", putT(t, s, "acme", "logs", "c"))
	if err := s.Delete("acme", "logs", b.SHA256); err != nil {
		t.Fatal(err)
	}
	if wasm, err := s.Blob(b.SHA256); err != nil || string(wasm) != string(fakeWasm("b")) {
		t.Fatalf("globex's blob after acme deleted its copy: %q, %v", wasm, err)
	}
	if _, err := s.Resolve("acme", "logs", b.SHA256); !errors.Is(err, ErrNotFound) {
		t.Fatalf("acme resolves its deleted version: %v", err)
	}
	if _, err := OpenStore(dir); err != nil {
		t.Fatalf("reopen after deletes: %v", err)
	}
}

func TestStoreResolve(t *testing.T) {
	s := openT(t, t.TempDir())
	a := putT(t, s, "acme", "logs", "a")
	putT(t, s, "globex", "logs", "g")
	// Two versions sharing a 10-digit prefix: put in the manifest directly,
	// as finding such binaries would take 2^40 hashes.
	twinA, twinB := "0123456789a"+strings.Repeat("0", 53), "0123456789b"+strings.Repeat("0", 53)
	s.m[pipelineKey{"acme", "logs"}].Versions = append(s.m[pipelineKey{"acme", "logs"}].Versions,
		Version{SHA256: twinA, Size: 1}, Version{SHA256: twinB, Size: 1})

	for _, tc := range []struct {
		ref  string
		want string
		err  error
	}{
		{a.SHA256, a.SHA256, nil},
		{a.SHA256[:8], a.SHA256, nil},
		{strings.ToUpper(a.SHA256[:12]), a.SHA256, nil},
		{a.SHA256[:7], "", ErrBadReference},
		{"zzzzzzzz", "", ErrBadReference},
		{a.SHA256 + "0", "", ErrBadReference},
		{"0123456789", "", ErrAmbiguous},
		{"0123456789a", twinA, nil},
		{shaOf(fakeWasm("g")), "", ErrNotFound}, // globex's, not acme's
		{"ffffffff", "", ErrNotFound},
	} {
		v, err := s.Resolve("acme", "logs", tc.ref)
		if v.SHA256 != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("Resolve(%s) = %s, %v; want %s, %v", tc.ref, v.SHA256, err, tc.want, tc.err)
		}
	}
}

func TestStoreMaxVersions(t *testing.T) {
	s := openT(t, t.TempDir())
	for i := range MaxVersions {
		putT(t, s, "acme", "logs", fmt.Sprint(i))
	}
	if _, _, err := s.Put("acme", "logs", fakeWasm("one more"), "x", ""); !errors.Is(err, ErrTooManyVersions) {
		t.Fatalf("Put past MaxVersions = %v, want ErrTooManyVersions", err)
	}
	if _, created, err := s.Put("acme", "logs", fakeWasm("0"), "x", ""); err != nil || created {
		t.Fatalf("re-Put of a listed version at the cap = %v, %v; want it found", created, err)
	}
}

// A crash after the new manifest is written to its temporary file but
// before the rename leaves the old manifest; the next open removes the
// temporary file.
func TestStoreCrashBeforeRenameKeepsOldManifest(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	a, b := putT(t, s, "acme", "logs", "a"), putT(t, s, "acme", "logs", "b")
	activateT(t, s, "acme", "logs", a)
	before, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		t.Fatal(err)
	}

	var leftover string
	s.beforeRename = func() error {
		// Keep a copy of the temporary file, as a crash would leave it.
		matches, _ := filepath.Glob(filepath.Join(dir, tempPrefix+"*"))
		if len(matches) != 1 {
			t.Fatalf("temporary files %v, want one", matches)
		}
		data, _ := os.ReadFile(matches[0])
		leftover = matches[0] + "-crash"
		return errors.Join(os.WriteFile(leftover, data, 0o600), errors.New("simulated crash"))
	}
	if _, _, err := s.Activate("acme", "logs", b.SHA256, "x"); err == nil || !strings.Contains(err.Error(), "simulated crash") {
		t.Fatalf("Activate during the crash = %v", err)
	}
	if v, _ := s.Active("acme", "logs"); v.SHA256 != a.SHA256 {
		t.Fatalf("in memory the active version is %s after a failed write, want %s", v.SHA256, a.SHA256)
	}
	after, _ := os.ReadFile(filepath.Join(dir, manifestName))
	if string(after) != string(before) {
		t.Fatal("the manifest changed although the rename never happened")
	}
	if !strings.Contains(readFile(t, leftover), b.SHA256+`",`) {
		t.Fatal("the leftover temporary manifest does not hold the new state; the test proves nothing")
	}

	s2 := openT(t, dir)
	if v, _ := s2.Active("acme", "logs"); v.SHA256 != a.SHA256 {
		t.Fatalf("after the crash the active version is %s, want the old %s", v.SHA256, a.SHA256)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary file survived the reopen: %v", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStoreRemovesUnlistedBlobsOnOpen(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	a := putT(t, s, "acme", "logs", "a")
	orphan := filepath.Join(dir, "blobs", shaOf([]byte("orphan"))+".wasm")
	if err := os.WriteFile(orphan, []byte("orphan"), 0o600); err != nil {
		t.Fatal(err)
	}
	openT(t, dir)
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unlisted blob survived the open: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "blobs", a.SHA256+".wasm")); err != nil {
		t.Fatalf("listed blob: %v", err)
	}
}

func TestStoreRefusesCorruptState(t *testing.T) {
	sha := shaOf(fakeWasm("a"))
	size := len(fakeWasm("a"))
	version := fmt.Sprintf(`{"sha256":%q,"size":%d,"uploaded_at":"2026-01-02T03:04:05Z","uploaded_by":"x"}`, sha, size)
	pipeline := func(fields string) string {
		return `{"format":1,"pipelines":[{"tenant":"acme","pipeline":"logs",` + fields + `}]}`
	}
	for _, tc := range []struct {
		name     string
		manifest string
		blob     []byte // written as sha's blob; nil: none
		want     string
	}{
		{"not json", `{"format":1,`, fakeWasm("a"), "not a JSON manifest"},
		{"no format", `{"pipelines":[]}`, nil, "no format field"},
		{"newer format", `{"format":2,"pipelines":[]}`, nil, "manifest format 2; this sluice reads format 1"},
		{"unknown field", `{"format":1,"pipelines":[],"extra":1}`, nil, `unknown field "extra"`},
		{"trailing data", `{"format":1,"pipelines":[]} {}`, nil, "after top-level value"},
		{"bad tenant", `{"format":1,"pipelines":[{"tenant":"../x","pipeline":"logs","versions":[]}]}`, nil, "pipelines[0]: tenant"},
		{"listed twice", `{"format":1,"pipelines":[{"tenant":"a","pipeline":"b"},{"tenant":"a","pipeline":"b"}]}`, nil, "tenant a pipeline b is listed twice"},
		{"bad sha", pipeline(`"versions":[{"sha256":"ABC","size":1}]`), nil, `sha256 "ABC" is not 64 lowercase hex digits`},
		{"zero size", pipeline(fmt.Sprintf(`"versions":[{"sha256":%q,"size":0}]`, sha)), nil, "size 0"},
		{"version twice", pipeline(`"versions":[` + version + `,` + version + `]`), fakeWasm("a"), "is listed twice"},
		{"active unknown", pipeline(`"active":"` + strings.Repeat("1", 64) + `","versions":[` + version + `]`), fakeWasm("a"), "active version"},
		{"stack unknown", pipeline(`"versions":[` + version + `],"rollback_stack":["` + strings.Repeat("2", 64) + `"]`), fakeWasm("a"), "rollback_stack[0]"},
		{"history bad sha", pipeline(`"versions":[],"history":[{"sha256":"x","at":"2026-01-02T03:04:05Z","by":"x"}]`), nil, "history[0]"},
		{"blob missing", pipeline(`"versions":[` + version + `]`), nil, "is missing"},
		{"blob size", pipeline(`"versions":[` + version + `]`), append(fakeWasm("a"), 'x'), fmt.Sprintf("has %d bytes, the manifest says %d", size+1, size)},
		{"blob hash", pipeline(`"versions":[` + version + `]`), fakeWasm("A"), "does not hash to its name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "blobs"), 0o750); err != nil {
				t.Fatal(err)
			}
			if tc.blob != nil {
				if err := os.WriteFile(filepath.Join(dir, "blobs", sha+".wasm"), tc.blob, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, manifestName), []byte(tc.manifest), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := OpenStore(dir)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("OpenStore error %v, want ErrCorrupt naming %q", err, tc.want)
			}
			// Nothing was repaired or dropped.
			if got := readFile(t, filepath.Join(dir, manifestName)); got != tc.manifest {
				t.Fatalf("the manifest was rewritten to %s", got)
			}
			if tc.blob != nil {
				if _, err := os.Stat(filepath.Join(dir, "blobs", sha+".wasm")); err != nil {
					t.Fatalf("the blob was removed: %v", err)
				}
			}
		})
	}
}

func TestStoreRefusesMissingManifestWithBlobs(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	putT(t, s, "acme", "logs", "a")
	if err := os.Remove(filepath.Join(dir, manifestName)); err != nil {
		t.Fatal(err)
	}
	_, err := OpenStore(dir)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "manifest.json is missing but blobs holds 1 modules") {
		t.Fatalf("OpenStore = %v", err)
	}
}

func TestStoreBlobDetectsCorruption(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	a := putT(t, s, "acme", "logs", "a")
	if err := os.WriteFile(filepath.Join(dir, "blobs", a.SHA256+".wasm"), fakeWasm("A"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Blob(a.SHA256); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Blob of a tampered file = %v, want ErrCorrupt", err)
	}
	if _, err := s.Blob(strings.Repeat("0", 64)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Blob of an unlisted sha = %v, want ErrNotFound", err)
	}
	// Put of the same binary repairs the blob.
	if _, _, err := s.Put("globex", "logs", fakeWasm("a"), "x", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Blob(a.SHA256); err != nil {
		t.Fatalf("Blob after re-upload: %v", err)
	}
}

func TestStoreConcurrentChanges(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	const writers, each = 8, 10
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Every writer also uploads the shared "common" binary.
				for _, tag := range []string{fmt.Sprintf("w%d-%d", w, i), "common"} {
					v, _, err := s.Put("acme", "logs", fakeWasm(tag), "x", "")
					if err != nil {
						t.Error(err)
						return
					}
					if _, _, err := s.Activate("acme", "logs", v.SHA256, "x"); err != nil {
						t.Error(err)
						return
					}
					_, _ = s.List("acme", "logs")
					_, _ = s.Blob(v.SHA256)
				}
			}
		}()
	}
	wg.Wait()
	st, _ := s.List("acme", "logs")
	if len(st.Versions) != writers*each+1 {
		t.Fatalf("%d versions, want %d", len(st.Versions), writers*each+1)
	}
	if len(st.History) != maxHistory || len(st.RollbackStack) != maxHistory {
		t.Fatalf("history %d and rollback stack %d, want both capped at %d", len(st.History), len(st.RollbackStack), maxHistory)
	}
	s2 := openT(t, dir)
	st2, _ := s2.List("acme", "logs")
	if len(st2.Versions) != len(st.Versions) || st2.Active != st.Active {
		t.Fatalf("reopened: %d versions active %s; want %d active %s", len(st2.Versions), st2.Active, len(st.Versions), st.Active)
	}
}

func TestStoreManifestRoundTrip(t *testing.T) {
	s := openT(t, t.TempDir())
	a := putT(t, s, "acme", "logs", "a")
	activateT(t, s, "acme", "logs", a)
	b, err := s.m.encode()
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	st := m[pipelineKey{"acme", "logs"}]
	if st.Active != a.SHA256 || !st.Versions[0].UploadedAt.Equal(a.UploadedAt) || st.History[0].At.IsZero() {
		t.Fatalf("round trip: %+v", st)
	}
	if time.Since(a.UploadedAt) > time.Minute || a.UploadedAt.Location() != time.UTC {
		t.Fatalf("uploaded_at %v: want now, in UTC", a.UploadedAt)
	}
}

func TestStoreRefusesEmptiedManifest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		manifest string
	}{
		{"empty", `{"format":1,"pipelines":[]}`},
		{"no versions", `{"format":1,"pipelines":[{"tenant":"acme","pipeline":"logs","versions":[]}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, dir)
			a := putT(t, s, "acme", "logs", "a")
			b := putT(t, s, "acme", "logs", "b")
			if err := os.WriteFile(filepath.Join(dir, manifestName), []byte(tc.manifest), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := OpenStore(dir)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "lists 0 modules but blobs holds 2 more that it does not list") {
				t.Fatalf("OpenStore = %v, want ErrCorrupt naming the 2 unlisted blobs", err)
			}
			for _, v := range []Version{a, b} {
				if _, err := os.Stat(filepath.Join(dir, "blobs", v.SHA256+".wasm")); err != nil {
					t.Fatalf("a stored module was deleted: %v", err)
				}
			}
		})
	}
}

// A manifest saved by an editor that starts files with a UTF-8 byte order
// mark opens as it would without one (it used to fail with "invalid
// character 'ï'"), and the next change writes it without. A UTF-16 one is
// refused, saying so.
func TestStoreManifestWithByteOrderMark(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	a := putT(t, s, "acme", "logs", "a")
	activateT(t, s, "acme", "logs", a)
	path := filepath.Join(dir, manifestName)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append([]byte("\xef\xbb\xbf"), raw...), 0o600); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir)
	if v, ok := s.Active("acme", "logs"); !ok || v.SHA256 != a.SHA256 {
		t.Fatalf("active %v %v after a BOM, want %s", v.SHA256, ok, a.SHA256)
	}
	putT(t, s, "acme", "logs", "b")
	if got, _ := os.ReadFile(path); strings.HasPrefix(string(got), "\xef\xbb\xbf") {
		t.Error("the manifest was written back with its BOM")
	}

	for _, bom := range []string{"\xff\xfe", "\xfe\xff"} {
		if err := os.WriteFile(path, append([]byte(bom), raw...), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := OpenStore(dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "UTF-16") {
			t.Errorf("a manifest starting with % x: %v; want ErrCorrupt saying it is UTF-16", bom, err)
		}
	}
}
