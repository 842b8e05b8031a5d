package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// A run in bind mode writes the workspace itself while another run's view
// closes and drops what must not stay (a FIFO, a reserved name). The run
// swaps a directory holding such an entry with a relative symlink that
// climbs out of the workspace, again and again (renameat2 RENAME_EXCHANGE),
// with many files to widen the closing run's walk: whatever the closing run
// listed in the directory must be removed from that directory, never from
// where the symlink points (review 2026-12-01, H2: a root server deleted
// victim/.ssh outside the workspace after 2 to 18 runs).
func TestBindCloseNeverLeavesTheWorkspace(t *testing.T) {
	const rounds, files = 60, 1000
	for _, tc := range []struct {
		name string
		make func(path string) error // the entry the closing run drops
	}{
		{name: "fifo", make: func(p string) error { return unix.Mkfifo(p, 0o644) }},
		{name: "reserved directory", make: func(p string) error {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(p, "f"), nil, 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			// <base>/victim is ../../victim from the workspace's root, as
			// the home directory is from the default workspace.
			name := ".ssh"
			if tc.name == "reserved directory" {
				name = reservedPrefix + "ssh"
			}
			victim := filepath.Join(base, "victim", name)
			must(t, os.MkdirAll(victim, 0o700))
			must(t, os.WriteFile(filepath.Join(victim, "id_ed25519"), []byte("key"), 0o600))
			dir := filepath.Join(base, "home", "ws")
			must(t, os.MkdirAll(dir, 0o755))
			w, err := Open(dir, Options{Logger: slog.New(slog.DiscardHandler)}) // no StateDir: bind mode
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Close)
			if w.Isolated() {
				t.Fatal("a workspace without a state dir has overlay views")
			}
			for i := range files {
				must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("z%04d", i)), nil, 0o644))
			}

			// The background run: keep d/ (a directory holding the entry)
			// and l (-> ../../victim), and swap their names.
			d, l := filepath.Join(dir, "d"), filepath.Join(dir, "l")
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ensureSwapPair(d, l, name, tc.make)
					for range 50 {
						unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, l, unix.RENAME_EXCHANGE)
					}
				}
			}()
			defer func() { close(stop); wg.Wait() }()

			ctx := t.Context()
			for i := range rounds {
				v, err := w.Open(ctx, fmt.Sprintf("run-%d", i))
				if err != nil {
					t.Fatal(err)
				}
				ch, err := v.Close(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := os.Lstat(filepath.Join(victim, "id_ed25519")); err != nil {
					t.Fatalf("after %d runs, the victim outside the workspace: %v", i+1, err)
				}
				// Nor does a run learn names outside through its changes.
				for _, p := range slices.Concat(ch.Created, ch.Modified, ch.Deleted) {
					if strings.Contains(p, "id_ed25519") {
						t.Fatalf("run %d reports %q, a file outside the workspace", i+1, p)
					}
				}
			}
		})
	}
}

// ensureSwapPair recreates, whichever of d and l is the directory now, the
// entry in it and the symlink beside it, as the attacking run's loop does.
func ensureSwapPair(d, l, name string, mk func(string) error) {
	for _, pair := range [][2]string{{d, l}, {l, d}} {
		fi, err := os.Lstat(pair[0])
		if err != nil || !fi.IsDir() {
			continue
		}
		if _, err := os.Lstat(filepath.Join(pair[0], name)); errors.Is(err, fs.ErrNotExist) {
			mk(filepath.Join(pair[0], name))
		}
		if _, err := os.Lstat(pair[1]); errors.Is(err, fs.ErrNotExist) {
			os.Symlink("../../victim", pair[1])
		}
		return
	}
	for _, p := range []string{d, l} {
		if fi, err := os.Lstat(p); err == nil && !fi.IsDir() {
			os.Remove(p)
		}
	}
	os.Mkdir(d, 0o755)
}
