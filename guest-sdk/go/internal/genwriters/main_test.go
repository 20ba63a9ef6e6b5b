package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestGeneratedWritersAreCurrent fails when guest-sdk/go/writers_gen.go is
// not what go generate writes from the table.
func TestGeneratedWritersAreCurrent(t *testing.T) {
	want, err := render()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", out)
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s is stale (%v); run go generate in guest-sdk/go", path, err)
	}
}

// Every scalar's words fill its width, in units put8 … put64 and
// AppendUint16 … AppendUint64 store.
func TestScalarWords(t *testing.T) {
	for _, s := range scalars {
		if s.Bytes != "" {
			if len(s.Words) != 0 {
				t.Errorf("%s: both Bytes and Words", s.Name)
			}
			continue
		}
		if len(s.Words) == 0 || s.Width%len(s.Words) != 0 {
			t.Errorf("%s: %d words for %d bytes", s.Name, len(s.Words), s.Width)
			continue
		}
		switch s.WordBits() {
		case 8, 16, 32, 64:
		default:
			t.Errorf("%s: %d-bit words", s.Name, s.WordBits())
		}
	}
}
