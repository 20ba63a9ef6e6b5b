//go:build unix

package wasmhost

import (
	"syscall"
	"time"
)

// cpuTime is the process's user and system CPU time: on a shared machine
// it moves far less with other load than the wall clock does.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
