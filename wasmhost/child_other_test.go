//go:build !unix

package wasmhost

import (
	"context"
	"testing"
)

const childEnv = "WASMHOST_TEST_CHILD"

var childScenarios = map[string]func(ctx context.Context) (string, error){}

type childResult struct {
	result string
	peakMB float64
}

func mustRunChild(t *testing.T, name string) childResult {
	t.Skip("child-process memory tests need a unix system")
	return childResult{}
}

func runChildScenario(string) int { return 3 }
