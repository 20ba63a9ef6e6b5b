package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestSDKCopyIsCurrent fails when guest-sdk/go/internal/chtype is not what
// go generate ./internal/chtype writes from the model.
func TestSDKCopyIsCurrent(t *testing.T) {
	want, err := render("..")
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join("..", sdkDir)
	for dir, names := range dirs(want) {
		have, err := goFiles(filepath.Join(dst, filepath.FromSlash(dir)))
		if err != nil || !slices.Equal(have, names) {
			t.Errorf("%s/%s has %v (%v), the model's copy is %v; run go generate ./internal/chtype", dst, dir, have, err, names)
		}
	}
	for name, b := range want {
		got, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s/%s is stale (%v); run go generate ./internal/chtype", dst, name, err)
		}
	}
}
