package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/bench"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// benchOutput runs `sandpit bench` small against the test containerd. It
// checks the report's structure, never its timings.
func benchOutput(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	addr := testenv.Containerd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	// The runc baseline's rootfs must be reachable by the sandbox's
	// unprivileged root: open up the private temp dirs above it.
	state := t.TempDir()
	for _, d := range []string{state, filepath.Dir(state)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"bench", "--address", addr, "--no-start", "--instance", testenv.Instance(t), "--state-dir", state,
		"--n", "2", "--warmup", "0", "--docker-image", "sandpit-test-absent:none"}
	cmd := exec.CommandContext(ctx, binPath, append(base, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("sandpit bench: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

func TestBenchJSON(t *testing.T) {
	out, stderr := benchOutput(t, "--json", "--concurrency", "1,2")
	var r bench.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("report is not JSON: %v\n%s\nstderr:\n%s", err, out, stderr)
	}

	mcpNames := []string{"sandpit-mcp-warm", "sandpit-mcp-cold"}
	python := append([]string{"host-python", "runc-run", "sandpit-cold", "sandpit-warm"}, mcpNames...)
	python = append(python, "ctr-run", "docker-run", "podman-run")
	c := append([]string{"host-gcc", "sandpit-cold", "sandpit-warm"}, mcpNames...)
	// pydata: host-python needs the host's python3-pandas and
	// python3-matplotlib, or is unavailable with the reason.
	pydata := append([]string{"host-python", "sandpit-cold", "sandpit-warm"}, mcpNames...)
	session := []string{"host-python-repl", "sandpit-session", "sandpit-mcp-session"}

	// Every comparator is measured or said to be unavailable, exactly once.
	seen := map[string]int{}
	for _, l := range r.Latency {
		seen[l.Group+"/"+l.Name]++
	}
	for _, u := range r.Unavailable {
		if u.Reason == "" {
			t.Errorf("%s unavailable without a reason", u.Name)
		}
		group, _, _ := strings.Cut(u.Reason, ":")
		seen[group+"/"+u.Name]++
	}
	var want []string
	for _, n := range python {
		want = append(want, "python/"+n)
	}
	for _, n := range c {
		want = append(want, "c/"+n)
	}
	for _, n := range pydata {
		want = append(want, "pydata/"+n)
	}
	for _, n := range session {
		want = append(want, "session/"+n)
	}
	for _, w := range want {
		if seen[w] != 1 {
			t.Errorf("%s reported %d times, want once", w, seen[w])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("reported %v, want exactly %v", seen, want)
	}
	// The image the engines are asked for does not exist: never measured.
	for _, l := range r.Latency {
		if l.Name == "docker-run" || l.Name == "podman-run" {
			t.Errorf("%s measured with an absent image", l.Name)
		}
	}

	noHost := map[string]bool{} // a host without pandas has no pydata baseline
	for _, u := range r.Unavailable {
		if group, _, _ := strings.Cut(u.Reason, ":"); u.Name == "host-python" && group == "pydata" {
			noHost[group] = true
		}
	}
	for _, l := range r.Latency {
		if l.Errors > 0 || l.N != 2 {
			t.Errorf("%s/%s: n=%d errors=%d (%s), want 2 clean runs", l.Group, l.Name, l.N, l.Errors, l.FirstError)
			continue
		}
		if !(0 < l.MinMS && l.MinMS <= l.MedianMS && l.MedianMS <= l.P90MS && l.P90MS <= l.MaxMS) {
			t.Errorf("%s/%s: min %v median %v p90 %v max %v out of order", l.Group, l.Name, l.MinMS, l.MedianMS, l.P90MS, l.MaxMS)
		}
		if l.VsHost == nil && !noHost[l.Group] {
			t.Errorf("%s/%s: no ratio to the host", l.Group, l.Name)
		}
		if (l.Group == "python") != (l.VsRunc != nil) {
			t.Errorf("%s/%s: ratio to runc %v; want one for python only", l.Group, l.Name, l.VsRunc)
		}
	}
	host := r.Latency[slices.IndexFunc(r.Latency, func(l bench.Latency) bool { return l.Name == "host-python" })]
	if *host.VsHost != 1 {
		t.Errorf("host-python against itself: %v", *host.VsHost)
	}

	if len(r.Throughput) == 0 {
		t.Fatal("no throughput with --concurrency 1,2")
	}
	for _, tp := range r.Throughput {
		if tp.Group != "python" || tp.Concurrency != 2 || tp.Errors != 0 || tp.Runs != 8 || tp.RunsPerSec <= 0 || tp.VsRunc == nil {
			t.Errorf("throughput %+v", tp)
		}
	}

	m := r.Machine
	if m.CPUs < 1 || m.Kernel == "" || m.LoadBefore == "" || m.LoadAfter == "" || m.Versions["containerd"] == "" || m.Versions["runc"] == "" {
		t.Errorf("machine description incomplete: %+v", m)
	}
	if !strings.Contains(m.Versions["python"], "/usr/bin/python3") {
		t.Errorf("host python %q does not say which interpreter", m.Versions["python"])
	}
	if len(r.Leftovers) != 0 {
		t.Errorf("left behind: %v", r.Leftovers)
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "idle session") }) {
		t.Errorf("no idle session memory in the notes: %v", r.Notes)
	}
}

func TestBenchTable(t *testing.T) {
	out, _ := benchOutput(t, "--only", "host-python,runc-run", "--language", "python", "--concurrency", "1")
	for _, want := range []string{"$ sandpit bench", "machine:", "load:", "median ms", "host-python", "runc-run", "nothing left behind"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "throughput") || strings.Contains(out, "sandpit-cold") {
		t.Errorf("ran more than --only and --concurrency asked for:\n%s", out)
	}
}

func TestParseInts(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		ok   bool
	}{
		{"1,8", []int{1, 8}, true},
		{" 4 ", []int{4}, true},
		{"0", nil, false},
		{"1,x", nil, false},
		{"", nil, false},
	}
	for _, tt := range tests {
		got, err := parseInts(tt.in)
		if (err == nil) != tt.ok || !slices.Equal(got, tt.want) {
			t.Errorf("parseInts(%q) = %v, %v", tt.in, got, err)
		}
	}
}
