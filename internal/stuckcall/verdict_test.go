package stuckcall

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestVerdictRoundTrip(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 3, 2, 9, 31, 0, 123, time.UTC)
	v := &Verdict{DetectedAt: at, PID: 4242, Reason: "a call ran 12s",
		Culprits: []Call{{Module: "acme/logs", SHA256: shaA, Deadline: Duration(2 * time.Second), StartedAt: at.Add(-12 * time.Second), Ran: Duration(12 * time.Second)}}}
	if err := Write(dir, v); err != nil {
		t.Fatal(err)
	}
	older := &Verdict{DetectedAt: at.Add(-time.Hour), PID: 1, Reason: "froze",
		Suspects: []Call{{Module: "b/q", SHA256: shaB, Deadline: Duration(time.Second)}, {Module: "acme/logs", SHA256: shaA}}}
	if err := Write(dir, older); err != nil {
		t.Fatal(err)
	}
	// A temporary file a crash left is removed, not read.
	tmp := filepath.Join(dir, verdictDir, ".tmp-x.json-123")
	if err := os.WriteFile(tmp, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !reflect.DeepEqual(got[0], *older) || !reflect.DeepEqual(got[1], *v) {
		t.Fatalf("read %+v, want %+v then %+v", got, *older, *v)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the temporary file is still there: %v", err)
	}
	if u := Undecided(got, at); len(u) != 1 || u[0].PID != 1 {
		t.Errorf("Undecided = %+v, want the older one", u)
	}
	if u := Undecided(got, at.Add(48*time.Hour)); len(u) != 0 {
		t.Errorf("Undecided two days on = %+v, want none", u)
	}
	if vs := got[1].Versions(); len(vs) != 1 || vs[0].Module != "acme/logs" {
		t.Errorf("Versions = %+v", vs)
	}
	if err := Remove(got[0]); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(dir); err != nil || len(got) != 1 {
		t.Fatalf("after Remove: %+v, %v", got, err)
	}
}

func TestReadRefusesForeignFiles(t *testing.T) {
	for name, body := range map[string]string{
		"not json":      "hello",
		"unknown field": `{"detected_at":"2026-01-01T00:00:00Z","pid":1,"reason":"x","verdict":"guilty"}`,
		"no time":       `{"pid":1,"reason":"x"}`,
		"bad sha":       `{"detected_at":"2026-01-01T00:00:00Z","pid":1,"reason":"x","culprits":[{"module":"a/b","sha256":"XYZ"}]}`,
	} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, verdictDir), 0o750); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, verdictDir, "x.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: Read: %v, want an error naming %s", name, err, path)
		}
	}
	if vs, err := Read(t.TempDir()); err != nil || vs != nil {
		t.Errorf("an empty directory: %v, %v", vs, err)
	}
}
