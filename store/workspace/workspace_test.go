package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

func newWS(t *testing.T, opts Options) *Workspace {
	t.Helper()
	base := t.TempDir()
	// t.TempDir's parents are 0700: let the sandbox uid traverse them.
	os.Chmod(filepath.Dir(base), 0o755)
	os.Chmod(base, 0o755)
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(base, "state")
	}
	w, err := Open(filepath.Join(base, "ws"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close) // before TempDir's removal: a spare view is a mount
	return w
}

func TestTraversal(t *testing.T) {
	w := newWS(t, Options{})
	ctx := t.Context()
	outside := filepath.Join(filepath.Dir(w.Dir()), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	// What a run could leave behind in the workspace (the bind fallback, or
	// an operator): a symlink to /, a symlink to a file outside, a hard link
	// to a file outside, a FIFO.
	mustDo(t, os.Symlink("/", filepath.Join(w.Dir(), "root")))
	mustDo(t, os.Symlink(outside, filepath.Join(w.Dir(), "secret-link")))
	mustDo(t, os.Link(outside, filepath.Join(w.Dir(), "hard")))
	mustDo(t, syscall.Mkfifo(filepath.Join(w.Dir(), "fifo"), 0o644))
	mustDo(t, os.Mkdir(filepath.Join(w.Dir(), "a"), 0o755))

	long := strings.Repeat("d/", 2100) + "f"
	tests := []struct {
		name string
		path string
		want error
	}{
		{"dotdot", "../x", ErrOutsideWorkspace},
		{"absolute", "/etc/passwd", ErrOutsideWorkspace},
		{"climb through a dir", "a/../../x", ErrOutsideWorkspace},
		{"nul", "a\x00b", ErrOutsideWorkspace},
		{"4 KiB path", long, ErrInvalidPath},
		{"long component", strings.Repeat("n", 256), ErrInvalidPath},
		{"symlink to root", "root/etc/passwd", ErrOutsideWorkspace},
		{"symlink itself", "root", ErrOutsideWorkspace},
		{"symlink to a file outside", "secret-link", ErrOutsideWorkspace},
		{"hard link to a file outside", "hard", ErrOutsideWorkspace},
		{"fifo", "fifo", ErrNotRegular},
		{"missing", "nope", ErrNotFound},
		{"directory", "a", ErrIsDir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := w.Read(ctx, tt.path, 0, 0); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, tt.want) {
					t.Errorf("Read(%.40q) = %v, want %v", tt.path, err, tt.want)
				}
				if errors.Is(tt.want, ErrOutsideWorkspace) && !strings.Contains(fmt.Sprint(err), "outside the workspace") {
					t.Errorf("Read(%.40q) error %q does not say the path is outside the workspace", tt.path, err)
				}
			case <-time.After(testenv.Patience):
				t.Fatalf("Read(%.40q) hangs", tt.path)
			}
		})
	}
	// Writes, lists, deletes and moves through the symlinks never reach outside.
	for _, p := range []string{"root/tmp/pwned", "secret-link", "../x", "/tmp/x", "a/../../x"} {
		if _, err := w.Write(ctx, p, []byte("pwned")); err == nil && p != "secret-link" {
			t.Errorf("Write(%q) succeeded", p)
		}
	}
	if got, _ := os.ReadFile(outside); string(got) != "secret" {
		t.Errorf("file outside the workspace changed: %q", got)
	}
	if _, err := os.Lstat("/tmp/pwned"); err == nil {
		t.Errorf("a write through the symlink to / created /tmp/pwned")
	}
	if _, err := w.List(ctx, "root", true); !errors.Is(err, ErrOutsideWorkspace) {
		t.Errorf("List(root) = %v, want ErrOutsideWorkspace", err)
	}
	if err := w.Delete(ctx, "root/etc"); !errors.Is(err, ErrOutsideWorkspace) {
		t.Errorf("Delete(root/etc) = %v, want ErrOutsideWorkspace", err)
	}
	if err := w.Move(ctx, "a", "root/a"); !errors.Is(err, ErrOutsideWorkspace) {
		t.Errorf("Move(a, root/a) = %v, want ErrOutsideWorkspace", err)
	}
	if _, err := w.Resolve("root/etc/passwd"); !errors.Is(err, ErrOutsideWorkspace) {
		t.Errorf("Resolve through a symlink = %v, want ErrOutsideWorkspace", err)
	}
	// Deleting the symlink itself is allowed and leaves its target alone.
	if err := w.Delete(ctx, "root"); err != nil {
		t.Errorf("Delete(root) = %v", err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("deleting the symlink touched its target: %v", err)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	w := newWS(t, Options{MaxWriteBytes: 1 << 20})
	ctx := t.Context()
	binary := make([]byte, 300<<10)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	tests := []struct {
		name, path string
		data       []byte
	}{
		{"text", "hello.txt", []byte("hello\n")},
		{"nested", "deep/er/file.py", []byte("print(1)\n")},
		{"binary", "bin/blob.bin", binary},
		{"unicode name", "données/日本語 ✓.txt", []byte("ok")},
		{"empty", "empty", nil},
		{"workspace prefix", "/workspace/pre.txt", []byte("pre")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := w.Write(ctx, tt.path, tt.data); err != nil {
				t.Fatal(err)
			}
			got, err := w.Read(ctx, tt.path, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Data, tt.data) || !got.EOF || got.Size != int64(len(tt.data)) {
				t.Errorf("Read = %d bytes (eof %v, size %d), want %d bytes", len(got.Data), got.EOF, got.Size, len(tt.data))
			}
			host, err := w.Resolve(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(host)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && (st.Uid != w.Owner().UID || st.Gid != w.Owner().GID) {
				t.Errorf("owner = %d:%d, want %v", st.Uid, st.Gid, w.Owner())
			}
		})
	}
	// Ranges.
	part, err := w.Read(ctx, "bin/blob.bin", 1000, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(part.Data, binary[1000:1010]) || part.EOF {
		t.Errorf("Read range = %v (eof %v), want %v", part.Data, part.EOF, binary[1000:1010])
	}
	if _, err := w.Write(ctx, "big", make([]byte, 2<<20)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized Write = %v, want ErrTooLarge", err)
	}
	// Move, list, delete.
	mustDo(t, w.Move(ctx, "hello.txt", "moved/hello.txt"))
	ls, err := w.List(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range ls.Entries {
		paths = append(paths, e.Path+":"+e.Type)
	}
	all := strings.Join(paths, " ")
	for _, want := range []string{"moved/hello.txt:file", "moved:dir", "deep/er/file.py:file"} {
		if !strings.Contains(all, want) {
			t.Errorf("List = %s, missing %s", all, want)
		}
	}
	if strings.Contains(all, "sandpit-tmp") {
		t.Errorf("List shows temporary files: %s", all)
	}
	mustDo(t, w.Delete(ctx, "deep"))
	if _, err := w.Read(ctx, "deep/er/file.py", 0, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("Read after Delete = %v, want ErrNotFound", err)
	}
}

func TestWriteRespectsMaxSize(t *testing.T) {
	w := newWS(t, Options{MaxSize: 1000})
	ctx := t.Context()
	mustDo2(t)(w.Write(ctx, "a", make([]byte, 600)))
	mustDo2(t)(w.Write(ctx, "a", make([]byte, 900))) // replacing counts the old size out
	if _, err := w.Write(ctx, "b", make([]byte, 200)); !errors.Is(err, ErrQuota) {
		t.Errorf("Write over MaxSize = %v, want ErrQuota", err)
	}
}

func mustDo2(t *testing.T) func(Entry, error) {
	return func(_ Entry, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestConcurrentReadersNeverSeeTornFiles races reads against atomic writes of
// different lengths: every read must be one whole version.
func TestConcurrentReadersNeverSeeTornFiles(t *testing.T) {
	w := newWS(t, Options{})
	ctx := t.Context()
	versions := [][]byte{bytes.Repeat([]byte("a"), 100<<10), bytes.Repeat([]byte("b"), 300<<10)}
	mustDo2(t)(w.Write(ctx, "f", versions[0]))
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := w.Read(ctx, "f", 0, 0)
			if err != nil {
				errc <- err
				return
			}
			if !bytes.Equal(c.Data, versions[0]) && !bytes.Equal(c.Data, versions[1]) {
				errc <- fmt.Errorf("torn read: %d bytes", len(c.Data))
				return
			}
		}
	}()
	for i := range 200 {
		mustDo2(t)(w.Write(ctx, "f", versions[i%2]))
	}
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
