package host

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Load is /proc/loadavg's 1, 5 and 15 minute averages.
func Load() (l1, l5, l15 float64, err error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, 0, 0, err
	}
	return parseLoadavg(string(b))
}

// LoadString is the first three fields of /proc/loadavg, or "unknown".
func LoadString() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func parseLoadavg(s string) (l1, l5, l15 float64, err error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return 0, 0, 0, fmt.Errorf("loadavg: %q", s)
	}
	var v [3]float64
	for i := range v {
		if v[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return 0, 0, 0, fmt.Errorf("loadavg: %w", err)
		}
	}
	return v[0], v[1], v[2], nil
}

// Memory is /proc/meminfo's total and available memory, in bytes.
func Memory() (total, available int64, err error) {
	kv, err := readKB("/proc/meminfo")
	return kv["MemTotal"], kv["MemAvailable"], err
}

// SelfMemory is this process's resident set and its peak, in bytes.
func SelfMemory() (rss, peak int64, err error) {
	kv, err := readKB("/proc/self/status")
	return kv["VmRSS"], kv["VmHWM"], err
}

func readKB(path string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseKB(f), nil
}

// parseKB reads "Key:   123 kB" lines (/proc/meminfo, /proc/self/status)
// into bytes; lines without a kB unit are skipped.
func parseKB(r io.Reader) map[string]int64 {
	out := map[string]int64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			out[key] = n << 10
		}
	}
	return out
}

// CPUModel is /proc/cpuinfo's first "model name".
func CPUModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Kernel is the running kernel's release.
func Kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
