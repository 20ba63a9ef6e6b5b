package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
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

// exitedThreads names the CPU that threadsBetween cannot put to a live
// thread: threads that ran during the span and exited before its end.
const exitedThreads = "(exited threads)"

// threadsBetween is the CPU seconds each thread name used from a to b
// (testinfra.ThreadCPUTimes of one process), with the process's total over
// the same span (total, from its /proc stat) less what the live threads
// account for under exitedThreads. A thread started after a counts from
// zero.
func threadsBetween(a, b map[int]testinfra.ThreadCPU, total float64) map[string]float64 {
	out := map[string]float64{}
	sum := 0.0
	for tid, t := range b {
		d := t.CPU
		if p, ok := a[tid]; ok && p.CPU <= t.CPU {
			d -= p.CPU
		}
		if d == 0 {
			continue
		}
		out[t.Name] += d.Seconds()
		sum += d.Seconds()
	}
	if rest := total - sum; rest >= 0.05 {
		out[exitedThreads] = rest
	}
	for k, v := range out {
		out[k] = round3(v)
	}
	return out
}

// topThreads lists the largest entries of m, at most n, as "name 1.2".
func topThreads(m map[string]float64, n int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if m[names[i]] != m[names[j]] {
			return m[names[i]] > m[names[j]]
		}
		return names[i] < names[j]
	})
	var b strings.Builder
	for i, k := range names {
		if i == n {
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.1f", k, m[k])
	}
	return b.String()
}
