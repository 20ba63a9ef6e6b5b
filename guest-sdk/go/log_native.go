//go:build !wasip1

package sluice

import (
	"fmt"
	"os"
)

func writeLog(level Level, msg string) {
	fmt.Fprintf(os.Stderr, "sluice %s: %s\n", level, msg)
}
