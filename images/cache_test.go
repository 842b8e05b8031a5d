package images

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// fillWith returns a build step that writes content as the layer, or fails
// with err after writing part of it.
func fillWith(content string, err error) stepFunc {
	return func(ctx context.Context, dir string) (entry, error) {
		if werr := os.WriteFile(filepath.Join(dir, layerFile), []byte(content), 0o600); werr != nil {
			return entry{}, werr
		}
		if err != nil {
			return entry{}, err
		}
		return entry{DiffID: digest.FromString(content), Size: int64(len(content)), Labels: map[string]string{"k": content}}, nil
	}
}

// leftovers lists what a build left in the cache dir besides entries.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	return names
}

func TestBuildEntry(t *testing.T) {
	errStep := errors.New("debootstrap died")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		fill    stepFunc
		wantErr error
	}{
		{"complete", nil, fillWith("layer", nil), nil},
		{"step fails midway", nil, fillWith("half a la", errStep), errStep},
		{"interrupted", cancelled, fillWith("layer", nil), context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx := tt.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			e, err := buildEntry(ctx, dir, "k1", false, tt.fill)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("buildEntry() = %v, want %v", err, tt.wantErr)
			}
			got, ok := lookup(dir, "k1")
			if ok != (tt.wantErr == nil) {
				t.Fatalf("lookup() ok = %v after build error %v", ok, err)
			}
			if ok && (got.Labels["k"] != "layer" || got.layerPath() != e.layerPath()) {
				t.Errorf("lookup() = %+v, build returned %+v", got, e)
			}
			if l := leftovers(t, dir); len(l) != 0 {
				t.Errorf("build left %v in the cache dir", l)
			}
		})
	}
}

func TestLookupRejectsDamagedEntry(t *testing.T) {
	tests := []struct {
		name   string
		damage func(dir string) error
	}{
		{"truncated layer", func(dir string) error { return os.Truncate(filepath.Join(dir, layerFile), 2) }},
		{"missing layer", func(dir string) error { return os.Remove(filepath.Join(dir, layerFile)) }},
		{"missing meta", func(dir string) error { return os.Remove(filepath.Join(dir, metaFile)) }},
		{"garbled meta", func(dir string) error { return os.WriteFile(filepath.Join(dir, metaFile), []byte("{"), 0o600) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			e, err := buildEntry(t.Context(), dir, "k1", false, fillWith("layer", nil))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := lookup(dir, "k1"); !ok {
				t.Fatal("fresh entry not found")
			}
			if err := tt.damage(e.dir); err != nil {
				t.Fatal(err)
			}
			if _, ok := lookup(dir, "k1"); ok {
				t.Errorf("lookup() accepted a damaged entry")
			}
		})
	}
}

func TestBuildEntryReplace(t *testing.T) {
	dir := t.TempDir()
	if _, err := buildEntry(t.Context(), dir, "k1", false, fillWith("old", nil)); err != nil {
		t.Fatal(err)
	}
	// Without replace, a finished entry of the same key wins (a parallel
	// build got there first).
	e, err := buildEntry(t.Context(), dir, "k1", false, fillWith("new", nil))
	if err != nil || e.Labels["k"] != "old" {
		t.Fatalf("second build = %+v, %v; want the existing entry", e, err)
	}
	// A forced build that fails keeps the old entry.
	if _, err := buildEntry(t.Context(), dir, "k1", true, fillWith("new", io.ErrUnexpectedEOF)); err == nil {
		t.Fatal("failing forced build succeeded")
	}
	if e, ok := lookup(dir, "k1"); !ok || e.Labels["k"] != "old" {
		t.Fatalf("after a failed forced build lookup() = %+v, %v; want the old entry", e, ok)
	}
	if _, err := buildEntry(t.Context(), dir, "k1", true, fillWith("new", nil)); err != nil {
		t.Fatal(err)
	}
	if e, ok := lookup(dir, "k1"); !ok || e.Labels["k"] != "new" {
		t.Errorf("after a forced build lookup() = %+v, %v; want the new entry", e, ok)
	}
	if l := leftovers(t, dir); len(l) != 0 {
		t.Errorf("builds left %v in the cache dir", l)
	}
}

func TestSweep(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, buildPrefix+"k1-123")
	live := filepath.Join(dir, buildPrefix+"k1-456")
	entryDir := filepath.Join(dir, "k1")
	for _, d := range []string{stale, live, entryDir} {
		writeTree(t, d, map[string]string{"rootfs/etc/passwd": "x"})
	}
	unlock, err := lockDir(live, false)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	sweep(dir)
	for d, want := range map[string]bool{stale: false, live: true, entryDir: true} {
		_, err := os.Stat(d)
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", filepath.Base(d), got, want)
		}
	}
}

func TestBuilderUsesCache(t *testing.T) {
	dir := t.TempDir()
	calls := 0
	b := &Builder{
		CacheDir: dir,
		bootstrap: func(ctx context.Context, r Recipe, mirror, rootfs string, out io.Writer) error {
			calls++
			if mirror != "http://mirror.example/debian" {
				t.Errorf("bootstrap mirror = %q", mirror)
			}
			writeTree(t, rootfs, fakeDebootstrap)
			return nil
		},
		probe: func(ctx context.Context, rootfs string, argv []string) (string, error) {
			if _, err := os.Stat(filepath.Join(rootfs, "workspace")); err != nil {
				t.Errorf("probe ran before customisation: %v", err)
			}
			return argv[0] + " 1.2.3\n", nil
		},
		Mirror: "http://mirror.example/debian",
		Log:    discardLogger(),
	}
	r := DefaultRecipe()
	steps := []struct {
		name      string
		recipe    func(r Recipe) Recipe
		force     bool
		wantCalls int
	}{
		{"first build", func(r Recipe) Recipe { return r }, false, 1},
		{"cached", func(r Recipe) Recipe { return r }, false, 1},
		{"other ref, same rootfs", func(r Recipe) Recipe { r.Ref = "sandpit.local/other:1"; return r }, false, 1},
		{"forced", func(r Recipe) Recipe { return r }, true, 2},
		{"other packages", func(r Recipe) Recipe { r.Packages = append(r.Packages, "make"); return r }, false, 3},
	}
	for _, s := range steps {
		e, err := b.rootfs(t.Context(), s.recipe(r), s.force)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if calls != s.wantCalls {
			t.Errorf("%s: bootstrap ran %d times in total, want %d", s.name, calls, s.wantCalls)
		}
		if e.Labels[LabelVersionPrefix+"python"] != "1.2.3" {
			t.Errorf("%s: labels = %v", s.name, e.Labels)
		}
		if _, err := os.Stat(filepath.Join(e.dir, "rootfs")); err == nil {
			t.Errorf("%s: the unpacked rootfs was kept in the cache beside its layer", s.name)
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestLockKey(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockKey(t.Context(), dir, "k1", discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	held, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := lockKey(held, dir, "k1", discardLogger()); !errors.Is(err, context.Canceled) {
		t.Errorf("second lock of a held key = %v, want to wait until the context ends", err)
	}
	other, err := lockKey(t.Context(), dir, "k2", discardLogger())
	if err != nil {
		t.Errorf("lock of another key = %v; keys must not block each other", err)
	} else {
		other()
	}
	unlock()
	again, err := lockKey(held, dir, "k1", discardLogger())
	if err != nil {
		t.Errorf("lock after unlock = %v", err)
	} else {
		again()
	}
}

// TestRemoveTreeUnmountsFirst: a debootstrap killed mid-run leaves /proc
// and /sys mounted inside its target; cleanup must unmount, not delete
// through them.
func TestRemoveTreeUnmountsFirst(t *testing.T) {
	testenv.NeedRoot(t, "mounting a tmpfs")
	dir := filepath.Join(t.TempDir(), buildPrefix+"k1-1")
	target := filepath.Join(dir, "rootfs", "proc")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", target, "tmpfs", 0, "size=1m"); err != nil {
		testenv.Skip(t, "cannot mount tmpfs here: "+err.Error())
	}
	t.Cleanup(func() { syscall.Unmount(target, syscall.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(target, "self"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	removeTree(dir)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("build dir still there after removeTree: %v", err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), dir) {
		t.Errorf("a mount under %s survived removeTree", dir)
	}
}
