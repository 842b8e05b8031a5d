package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestImagesServerWriteFileAtomic(t *testing.T) {
	errExport := errors.New("export failed")
	tests := []struct {
		name    string
		write   func(w io.Writer) error
		want    string // the file's content afterwards
		wantErr error
	}{
		{"written", func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }, "new", nil},
		{"failed midway", func(w io.Writer) error { io.WriteString(w, "ne"); return errExport }, "old", errExport},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "sandpit.tar")
			if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := writeFileAtomic(path, tt.write)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("writeFileAtomic = %v, want %v", err, tt.wantErr)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != tt.want {
				t.Errorf("file holds %q (%v), want %q", got, err, tt.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("the write left %d files in the directory, want only the archive", len(ents))
			}
		})
	}
}

// `sandpit images server` refuses, before any debootstrap and without
// touching its output, what cannot make a usable image, and says why.
func TestImagesServerRefuses(t *testing.T) {
	tests := []struct {
		name   string
		args   []string // OUT stands for the output file
		wantIn string   // in stderr
	}{
		{"no output", []string{}, `Required flag "output"`},
		{"missing binary", []string{"--output", "OUT", "--binary", "/nonexistent/sandpit"}, "server binary: open /nonexistent/sandpit: no such file or directory"},
		{"binary not ELF", []string{"--output", "OUT", "--binary", "/etc/passwd"}, "not an ELF executable"},
		{"short image name", []string{"--output", "OUT", "--ref", "sandpit:dev"}, "docker.io/library/sandpit:dev"},
		{"output directory missing", []string{"--output", "/nonexistent/dir/sandpit.tar"}, "write /nonexistent/dir/sandpit.tar"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "sandpit.tar")
			if err := os.WriteFile(out, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"images", "server", "--cache-dir", filepath.Join(dir, "cache"), "--mirror", "http://mirror.invalid/debian"}
			for _, a := range tt.args {
				args = append(args, strings.ReplaceAll(a, "OUT", out))
			}
			cmd := exec.Command(binPath, args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			stdout, err := cmd.Output()
			if err == nil {
				t.Fatalf("sandpit %s succeeded: %s", strings.Join(args, " "), stdout)
			}
			if !strings.Contains(stderr.String(), tt.wantIn) {
				t.Errorf("stderr %q, want %q in it", stderr.String(), tt.wantIn)
			}
			if got, _ := os.ReadFile(out); string(got) != "old" {
				t.Errorf("the output file holds %q after a refusal, want it untouched", got)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("a refused export left %d entries in the output's directory (want only the old file, no cache)", len(ents))
			}
		})
	}
}
