package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/testinfra"
)

// cpuSeconds is the CPU time (user + system, all threads) process pid has
// used so far.
func cpuSeconds(pid int) (float64, error) {
	d, err := testinfra.CPUTime(pid)
	return d.Seconds(), err
}

// statusKB reads a "Key:   123 kB" line of /proc/<pid>/status, e.g. VmHWM
// (peak resident set) or VmRSS.
func statusKB(pid int, key string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, key)
}

// loadAvg is the 1-minute load average: the rig records it, since other
// work on the machine skews wall-clock figures.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return v
}

// machine describes the host for the results.
type machine struct {
	Cores    int    `json:"cores"`
	MemoryGB int64  `json:"memory_gib"`
	CPUModel string `json:"cpu_model"`
	Kernel   string `json:"kernel"`
}

func describeMachine(cores int) machine {
	m := machine{Cores: cores}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				m.MemoryGB = (kb + 512<<10) >> 20
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}
