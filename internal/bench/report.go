package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	goruntime "runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandpit-dev/sandpit/internal/host"
)

// Machine describes the host a report was measured on.
type Machine struct {
	CPUs       int               `json:"cpus"`
	Model      string            `json:"model"`
	Kernel     string            `json:"kernel"`
	LoadBefore string            `json:"load_before"` // /proc/loadavg: 1, 5, 15 minutes
	LoadAfter  string            `json:"load_after"`
	Versions   map[string]string `json:"versions"` // containerd, runc, python, gcc…
}

// Describe reads the host's CPUs, model, kernel and current load.
func Describe() Machine {
	return Machine{CPUs: goruntime.NumCPU(), Model: host.CPUModel(), Kernel: host.Kernel(), LoadBefore: LoadAverage(), Versions: map[string]string{}}
}

// LoadAverage is the first three fields of /proc/loadavg.
func LoadAverage() string { return host.LoadString() }

// CommandVersion is the first line a program prints for args (e.g.
// "--version"), or "" when it cannot be run.
func CommandVersion(ctx context.Context, name string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// Unavailable is a comparator that could not be measured here, and why.
type Unavailable struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Report is the result of one `sandpit bench` run.
type Report struct {
	Command     string        `json:"command"`
	Program     string        `json:"program"`
	Notes       []string      `json:"notes,omitempty"`
	Machine     Machine       `json:"machine"`
	Warmup      int           `json:"warmup"`
	GapMS       int64         `json:"gap_ms"`
	Latency     []Latency     `json:"latency"`
	Burst       []Latency     `json:"burst,omitempty"` // every call of BurstCalls back to back
	BurstCalls  int           `json:"burst_calls,omitempty"`
	Throughput  []Throughput  `json:"throughput,omitempty"`
	Unavailable []Unavailable `json:"unavailable,omitempty"`
	// HTTP is `sandpit bench --http`'s (http.go); the other figures are
	// then absent.
	HTTP *HTTPReport `json:"http,omitempty"`
	// Leftovers lists what the run left behind; it is empty after a clean run.
	Leftovers []string `json:"leftovers"`
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for a reader.
func (r *Report) WriteTable(w io.Writer) error {
	bw := bufio.NewWriter(w)
	m := r.Machine
	fmt.Fprintf(bw, "$ %s\n", r.Command)
	fmt.Fprintf(bw, "program: %s\n", r.Program)
	fmt.Fprintf(bw, "machine: %d × %s, Linux %s\n", m.CPUs, m.Model, m.Kernel)
	fmt.Fprintf(bw, "load:    %s before, %s after\n", m.LoadBefore, m.LoadAfter)
	for _, k := range sortedKeys(m.Versions) {
		fmt.Fprintf(bw, "%-8s %s\n", k+":", m.Versions[k])
	}
	for _, n := range r.Notes {
		fmt.Fprintf(bw, "note:    %s\n", n)
	}

	if r.HTTP != nil {
		r.HTTP.writeTable(bw, r.Warmup, r.GapMS)
	} else {
		r.writeLatency(bw)
	}
	return r.writeTail(bw)
}

// writeLatency writes the latency, burst and throughput tables.
func (r *Report) writeLatency(bw *bufio.Writer) {
	fmt.Fprintf(bw, "\nlatency (interleaved rounds in shuffled order, %d warm-up rounds discarded, %d ms untimed gap before each run)\n", r.Warmup, r.GapMS)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	w0 := len("name")
	for _, l := range r.Latency {
		w0 = max(w0, len(l.Name))
	}
	for _, t := range r.Throughput {
		w0 = max(w0, len(t.Name))
	}
	fmt.Fprintf(tw, "%-*s\tgroup\tn\terrors\tmedian ms\tp90 ms\tmin ms\tmax ms\t× host\t× runc\t\n", w0, "name")
	for _, l := range r.Latency {
		fmt.Fprintf(tw, "%-*s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", w0, l.Name, l.Group, l.N, l.Errors,
			num(l.MedianMS, l.N), num(l.P90MS, l.N), num(l.MinMS, l.N), num(l.MaxMS, l.N), rat(l.VsHost), rat(l.VsRunc))
	}
	tw.Flush()

	if len(r.Burst) > 0 {
		fmt.Fprintf(bw, "\nbursts (%d calls back to back, no gap; every call counted)\n", r.BurstCalls)
		tw = tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%-*s\tgroup\tn\terrors\tmedian ms\tp90 ms\tmin ms\tmax ms\t× host\t× runc\t\n", w0, "name")
		for _, l := range r.Burst {
			fmt.Fprintf(tw, "%-*s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", w0, l.Name, l.Group, l.N, l.Errors,
				num(l.MedianMS, l.N), num(l.P90MS, l.N), num(l.MinMS, l.N), num(l.MaxMS, l.N), rat(l.VsHost), rat(l.VsRunc))
		}
		tw.Flush()
	}

	if len(r.Throughput) > 0 {
		fmt.Fprintln(bw, "\nthroughput (concurrent clients, alternating rounds; CPU per run: the path's cgroup + containerd + this process and its children, during its rounds; sandbox: that less the host's own run of the program)")
		tw = tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%-*s\tgroup\tclients\truns\terrors\tseconds\truns/s\t× host\t× runc\tCPU ms/run\tcgroup\tcontainerd\tcaller\tsandbox\tCPU × runc\t\n", w0, "name")
		for _, t := range r.Throughput {
			fmt.Fprintf(tw, "%-*s\t%s\t%d\t%d\t%d\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", w0, t.Name, t.Group, t.Concurrency, t.Runs, t.Errors,
				t.Seconds, t.RunsPerSec, rat(t.VsHost), rat(t.VsRunc), opt1(t.CPUMS), opt1(t.CPUCgroupMS), opt1(t.CPUContainerdMS), opt1(t.CPUCallerMS), opt1(t.CPUSandboxMS), rat(t.CPUVsRunc))
		}
		tw.Flush()
	}
}

// writeTail writes the first errors, what was unavailable and what was
// left behind.
func (r *Report) writeTail(bw *bufio.Writer) error {
	var failed []string
	for _, l := range r.Latency {
		if l.FirstError != "" {
			failed = append(failed, fmt.Sprintf("  %s: %s", l.Name, l.FirstError))
		}
	}
	for _, l := range r.Burst {
		if l.FirstError != "" {
			failed = append(failed, fmt.Sprintf("  %s (burst): %s", l.Name, l.FirstError))
		}
	}
	for _, t := range r.Throughput {
		if t.FirstError != "" {
			failed = append(failed, fmt.Sprintf("  %s ×%d: %s", t.Name, t.Concurrency, t.FirstError))
		}
	}
	if len(failed) > 0 {
		fmt.Fprintln(bw, "\nfirst errors:")
		fmt.Fprintln(bw, strings.Join(failed, "\n"))
	}
	if len(r.Unavailable) > 0 {
		fmt.Fprintln(bw, "\nnot available:")
		for _, u := range r.Unavailable {
			fmt.Fprintf(bw, "  %s: %s\n", u.Name, u.Reason)
		}
	}
	if len(r.Leftovers) > 0 {
		fmt.Fprintln(bw, "\nLEFT BEHIND:")
		for _, l := range r.Leftovers {
			fmt.Fprintf(bw, "  %s\n", l)
		}
	} else {
		fmt.Fprintln(bw, "\nnothing left behind")
	}
	return bw.Flush()
}

func num(v float64, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func opt1(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *v)
}

func rat(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *r)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
