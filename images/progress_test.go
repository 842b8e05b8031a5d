package images

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// records is a slog handler that keeps what is logged.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

// find returns the first record whose message starts with prefix.
func (h *records) find(prefix string) (slog.Record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if strings.HasPrefix(r.Message, prefix) {
			return r, true
		}
	}
	return slog.Record{}, false
}

func attrs(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

// What debootstrap prints, abridged: three packages retrieved, two of them
// unpacked so far, one configured.
const debootstrapOutput = `I: Retrieving InRelease
I: Checking Release signature
I: Retrieving Packages
I: Validating Packages
I: Resolving dependencies of required packages...
I: Retrieving adduser 3.134
I: Validating adduser 3.134
I: Retrieving apt 2.6.1
I: Validating apt 2.6.1
I: Retrieving base-files 12.4+deb12u8
I: Validating base-files 12.4+deb12u8
I: Chosen extractor for .deb packages: dpkg-deb
I: Extracting adduser...
I: Extracting apt...
I: Installing core packages...
I: Unpacking required packages...
I: Unpacking adduser...
I: Unpacking apt...
I: Configuring required packages...
I: Configuring adduser...
`

// A cold build takes minutes: every 15 s it logs, at Info, how far it is
// (packages retrieved, unpacked and configured, bytes downloaded), where it
// used to log "about two minutes" once and nothing for nine.
func TestBuildLogsProgress(t *testing.T) {
	log := &records{}
	b := &Builder{
		CacheDir: t.TempDir(),
		bootstrap: func(ctx context.Context, r Recipe, mirror, rootfs string, out io.Writer) error {
			io.WriteString(out, debootstrapOutput)
			archives := filepath.Join(rootfs, "var/cache/apt/archives")
			os.MkdirAll(archives, 0o755)
			os.WriteFile(filepath.Join(archives, "apt_2.6.1_amd64.deb"), make([]byte, 300<<10), 0o644)
			os.WriteFile(filepath.Join(archives, "adduser_3.134_all.deb"), make([]byte, 200<<10), 0o644)
			// A long debootstrap: it is still running when progress is due.
			deadline := time.Now().Add(2 * time.Minute)
			for time.Now().Before(deadline) {
				if _, ok := log.find("building image rootfs: progress"); ok {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			writeTree(t, rootfs, fakeDebootstrap)
			return nil
		},
		probe: func(ctx context.Context, rootfs string, argv []string) (string, error) {
			return argv[0] + " 1.2.3\n", nil
		},
		Log:           slog.New(log),
		progressEvery: 20 * time.Millisecond,
	}
	if _, err := b.rootfs(t.Context(), DefaultRecipe(), false); err != nil {
		t.Fatal(err)
	}
	start, ok := log.find("building image rootfs")
	if !ok || strings.Contains(start.Message, "two minutes") {
		t.Errorf("the build's first line: %q", start.Message)
	}
	rec, ok := log.find("building image rootfs: progress")
	if !ok {
		t.Fatal("a build still running after the progress interval logged no progress")
	}
	if rec.Level != slog.LevelInfo {
		t.Errorf("progress logged at %v, want Info", rec.Level)
	}
	got := attrs(rec)
	for k, want := range map[string]string{
		"phase":               "debootstrap",
		"packages_retrieved":  "3",
		"packages_unpacked":   "2",
		"packages_configured": "1",
		"downloaded_kb":       "500",
	} {
		if got[k] != want {
			t.Errorf("progress %s = %q, want %q (all: %v)", k, got[k], want, got)
		}
	}
}
