package mcp

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/store/validate"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// Regression tests for the review of 2026-11-30, H4: in the bind fallback a
// running program writes the workspace directly, and the data tools must
// never follow a path it swaps, never block on a FIFO it makes, and never
// name a host path in an error.

// bindWorkspace is a workspace in the bind fallback (no state dir) under
// base, with the data tools' config.
func bindWorkspace(t *testing.T, base string) (*workspace.Workspace, Config) {
	t.Helper()
	ws, err := workspace.Open(filepath.Join(base, "ws"), workspace.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := validate.NewRegistry("", validate.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return ws, Config{Opener: ws, Validator: reg}
}

// A FIFO named like a workspace file blocked validate_csv_data in os.Open
// for good, even after the FIFO was deleted.
func TestDataToolsRefuseFIFO(t *testing.T) {
	ws, cfg := bindWorkspace(t, t.TempDir())
	for _, name := range []string{"data.csv", "data.json", "schema.json"} {
		if err := syscall.Mkfifo(filepath.Join(ws.Dir(), name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	calls := map[string]func() error{
		"validate_csv_data path": func() error {
			_, err := cfg.validateCSV(t.Context(), ValidateCSVArgs{Path: "data.csv"})
			return err
		},
		"validate_json_data path": func() error {
			_, err := cfg.validateJSON(t.Context(), ValidateJSONArgs{Path: "data.json", Schema: "user"})
			return err
		},
		"validate_json_data schema_path": func() error {
			_, err := cfg.validateJSON(t.Context(), ValidateJSONArgs{Data: "{}", SchemaPath: "schema.json"})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- call() }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "not a regular file") {
					t.Fatalf("err = %v, want a refusal of the FIFO", err)
				}
				if strings.Contains(err.Error(), ws.Dir()) {
					t.Fatalf("the error names a host path: %v", err)
				}
			case <-time.After(testenv.Patience):
				t.Fatalf("still blocked on the FIFO after %v", testenv.Patience)
			}
		})
	}
}

// A program that swaps a workspace directory with a symlink to a host
// directory, in a loop, made validate_csv_data return a line of a host file
// (the review won the race at attempt 242). Both the data path and
// schema_path must only ever read workspace files.
func TestDataToolsSymlinkSwap(t *testing.T) {
	base := t.TempDir()
	host := filepath.Join(base, "host-secrets")
	if err := os.MkdirAll(host, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(host, "x.csv"), []byte("root:$6$SECRETHASH:19000:0:99999:7:::\n"), 0o600)
	os.WriteFile(filepath.Join(host, "s.json"), []byte(`{"description": "SECRETSCHEMA", "type": "string"}`), 0o600)
	ws, cfg := bindWorkspace(t, base)
	d := filepath.Join(ws.Dir(), "d")
	os.MkdirAll(d, 0o755)
	os.WriteFile(filepath.Join(d, "x.csv"), []byte("a\n1\n"), 0o644)
	os.WriteFile(filepath.Join(d, "s.json"), []byte(`{"type": "integer"}`), 0o644)
	link := filepath.Join(ws.Dir(), ".l")
	if err := os.Symlink(host, link); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	swapped := make(chan struct{})
	go func() { // the program: swap d and the symlink, atomically, in a loop
		defer close(swapped)
		for ctx.Err() == nil {
			unix.Renameat2(unix.AT_FDCWD, link, unix.AT_FDCWD, d, unix.RENAME_EXCHANGE)
		}
	}()
	defer func() { cancel(); <-swapped }()

	const attempts = 3000
	read := 0
	for i := range attempts {
		res, err := cfg.validateCSV(t.Context(), ValidateCSVArgs{Path: "d/x.csv", Delimiter: ":", HasHeader: ptr(false), TypeConstraints: map[string]any{"column2": "integer"}})
		if err == nil {
			read++
			for _, e := range res.Errors {
				if strings.Contains(e.Value, "SECRET") {
					t.Fatalf("attempt %d: a host file was read through the workspace path: %q", i, e.Value)
				}
			}
		} else if strings.Contains(err.Error(), base) {
			t.Fatalf("attempt %d: the error names a host path: %v", i, err)
		}
		// Against a host schema {"type": "string"}, "\"x\"" would be valid.
		jr, err := cfg.validateJSON(t.Context(), ValidateJSONArgs{Data: `"x"`, SchemaPath: "d/s.json"})
		if err == nil && jr.Valid {
			t.Fatalf("attempt %d: a host schema file was read through schema_path", i)
		}
		if err != nil && strings.Contains(err.Error(), base) {
			t.Fatalf("attempt %d: the error names a host path: %v", i, err)
		}
	}
	t.Logf("%d attempts: %d read the workspace file, the others were refused", attempts, read)
}

func ptr[T any](v T) *T { return &v }
