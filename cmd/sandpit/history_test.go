package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/store/history"
)

// runHistoryCLI runs `sandpit <args>` with only the history command and
// returns what it printed.
func runHistoryCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := &cli.App{Name: "sandpit", Writer: &out, ErrWriter: &out, Commands: []*cli.Command{historyCommand()}}
	err := app.RunContext(t.Context(), append([]string{"sandpit"}, args...))
	return out.String(), err
}

func TestHistoryCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db, err := history.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	for i, r := range []history.Run{
		{ID: "run-a", Language: "python", Status: "success", Code: "print('hello')\nprint('again')", StdoutHead: "hello\nagain\n", StdoutBytes: 12, DurationMS: 40, MemoryPeakBytes: 9 << 20},
		{ID: "run-b", Language: "c", Status: "compile_error", ExitCode: 1, Code: "int main( {", StderrHead: "main.c:1: error\n", StderrBytes: 16, DurationMS: 1500},
		{ID: "run-c", Language: "python", Status: "oom", ExitCode: 137, Code: "x = ' ' * 10**10", OOMKilled: true, MemoryPeakBytes: 256 << 20,
			Limits: json.RawMessage(`{"memory_bytes":268435456}`)},
	} {
		r.Started = t0.Add(time.Duration(i) * time.Minute)
		if err := db.Record(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	tests := []struct {
		name    string
		args    []string
		want    []string // substrings, in order
		notWant []string
	}{
		{"table newest first", []string{"history", "--history-db", path},
			[]string{"STARTED (UTC)", "2025-06-01 10:02:00", "run-c", "oom", "256.0 MiB", "run-b", "1.50 s", "run-a", "print('hello') print('again')"}, nil},
		{"status", []string{"history", "--history-db", path, "--status", "compile_error"}, []string{"run-b"}, []string{"run-a", "run-c"}},
		{"language and limit", []string{"history", "--history-db", path, "--language", "Python", "--limit", "1"}, []string{"run-c"}, []string{"run-a", "run-b"}},
		{"before", []string{"history", "--history-db", path, "--before", "run-b"}, []string{"run-a"}, []string{"run-b", "run-c"}},
		{"show", []string{"history", "show", "--history-db", path, "run-b"},
			[]string{"id:", "run-b", "compile_error (exit code 1)", "--- code (11 bytes", "int main( {", "--- stderr", "main.c:1: error"}, []string{"--- stdout"}},
		{"show limits", []string{"history", "show", "--history-db", path, "run-c"}, []string{"oom killed:", "true", `limits:`, `"memory_bytes":268435456`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runHistoryCLI(t, tt.args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			rest := out
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("output lacks %q (in order):\n%s", w, out)
				}
				rest = rest[i+len(w):]
			}
			for _, w := range tt.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}

	t.Run("json list", func(t *testing.T) {
		out, err := runHistoryCLI(t, "history", "--history-db", path, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var runs []history.Run
		if err := json.Unmarshal([]byte(out), &runs); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if len(runs) != 3 || runs[0].ID != "run-c" || runs[2].CodePreview == "" || runs[2].Code != "" {
			t.Errorf("runs = %+v", runs)
		}
	})
	t.Run("json show, flag after the id", func(t *testing.T) {
		out, err := runHistoryCLI(t, "history", "show", "--history-db", path, "run-a", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var r history.Run
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if r.ID != "run-a" || r.Code != "print('hello')\nprint('again')" || !r.Started.Equal(t0) {
			t.Errorf("run = %+v", r)
		}
	})

	errs := []struct {
		name string
		args []string
		want string
	}{
		{"missing db", []string{"history", "--history-db", filepath.Join(t.TempDir(), "none.db")}, "no history at"},
		{"unknown run", []string{"history", "show", "--history-db", path, "run-z"}, "not found"},
		{"no id", []string{"history", "show", "--history-db", path}, "usage: sandpit history show ID"},
		{"stray argument", []string{"history", "--history-db", path, "run-a"}, "history show run-a"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runHistoryCLI(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestHistoryConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "history.db")
	set := func(args ...string) *cli.Context {
		var c *cli.Context
		app := &cli.App{Flags: historyFlags(), Action: func(cc *cli.Context) error { c = cc; return nil }}
		if err := app.RunContext(t.Context(), append([]string{"x"}, args...)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	var cfg mcp.Config
	cleanup, err := historyConfig(set("--history-db", path, "--history-max-runs", "5"), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.History == nil {
		t.Fatal("history not attached")
	}
	cleanup()
	if _, err := history.Open(t.Context(), path); err != nil {
		t.Errorf("database not created at %s: %v", path, err)
	}

	var off mcp.Config
	cleanup, err = historyConfig(set("--history-db", "off"), &off)
	if err != nil || off.History != nil {
		t.Errorf("--history-db off: history %v, err %v", off.History, err)
	}
	cleanup()
}
