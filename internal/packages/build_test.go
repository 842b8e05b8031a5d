package packages

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// archEntry is one member of a test zip or tarball.
type archEntry struct {
	name string
	body string
	mode fs.FileMode // 0: 0644; fs.ModeDir for a directory entry
	typ  byte        // tar only: a type other than a regular file
	link string      // tar only: the link target
}

// writeZip writes a zip of entries (a wheel, for these tests) at path.
func writeZip(t *testing.T, path string, entries []archEntry) {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeTgz writes a gzipped tar of entries (an npm tarball) at path.
func writeTgz(t *testing.T, path string, entries []archEntry) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e.body)), Linkname: e.link, ModTime: time.Unix(499162500, 0)}
		if e.mode != 0 {
			h.Mode = int64(e.mode.Perm())
		}
		switch {
		case e.typ != 0:
			h.Typeflag, h.Size = e.typ, 0
		case e.mode&fs.ModeDir != 0:
			h.Typeflag, h.Size, h.Mode = tar.TypeDir, 0, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// demoWheel is a wheel with every kind of .data directory.
var demoWheel = []archEntry{
	{name: "demo/", mode: fs.ModeDir | 0o755},
	{name: "demo/__init__.py", body: "VERSION = '1.0'\n"},
	{name: "demo/sub/mod.py", body: "x = 1\n"},
	{name: "demo-1.0.data/purelib/demo_pure.py", body: "pure = True\n"},
	{name: "demo-1.0.data/purelib/demo_pkg/inner.py", body: "inner = 1\n"},
	{name: "demo-1.0.data/platlib/_demo_native.so", body: "\x7fELF native", mode: 0o755},
	{name: "demo-1.0.data/scripts/demo-cli", body: "#!/bin/sh\necho hi\n", mode: 0o755},
	{name: "demo-1.0.data/headers/demo.h", body: "int demo(void);\n"},
	{name: "demo-1.0.data/data/share/demo/readme", body: "data\n"},
	{name: "demo-1.0.dist-info/METADATA", body: "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"},
	{name: "demo-1.0.dist-info/WHEEL", body: "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	{name: "demo-1.0.dist-info/RECORD", body: ""},
}

var demoWheelWant = map[string]int64{
	"python/demo/__init__.py":            int64(len("VERSION = '1.0'\n")),
	"python/demo/sub/mod.py":             int64(len("x = 1\n")),
	"python/demo_pure.py":                int64(len("pure = True\n")),
	"python/demo_pkg/inner.py":           int64(len("inner = 1\n")),
	"python/_demo_native.so":             int64(len("\x7fELF native")),
	"python/demo-1.0.dist-info/METADATA": int64(len("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")),
	"python/demo-1.0.dist-info/WHEEL":    int64(len("Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")),
	"python/demo-1.0.dist-info/RECORD":   0,
}

// demoTarball is an npm tarball as npm packs it.
var demoTarball = []archEntry{
	{name: "package/", mode: fs.ModeDir},
	{name: "package/package.json", body: `{"name":"left-pad","version":"1.3.0"}`},
	{name: "package/index.js", body: "module.exports = 1;\n"},
	{name: "package/lib/", mode: fs.ModeDir},
	{name: "package/lib/pad.js", body: "exports.pad = 2;\n"},
	{name: "package/bin/run", body: "#!/usr/bin/env node\n", mode: 0o755},
}

func demoTarballWant(at string) map[string]int64 {
	return map[string]int64{
		at + "/package.json": int64(len(`{"name":"left-pad","version":"1.3.0"}`)),
		at + "/index.js":     int64(len("module.exports = 1;\n")),
		at + "/lib/pad.js":   int64(len("exports.pad = 2;\n")),
		at + "/bin/run":      int64(len("#!/usr/bin/env node\n")),
	}
}

func TestDataDir(t *testing.T) {
	tests := []struct {
		filename, want string
	}{
		{"demo-1.0-py3-none-any.whl", "demo-1.0.data/"},
		{"foo_bar-2.31.0-py3-none-any.whl", "foo_bar-2.31.0.data/"},
		{"foo_bar-2.31.0-1-cp312-cp312-manylinux_2_17_x86_64.whl", "foo_bar-2.31.0.data/"},
		{"Foo.Bar-1.0rc1-py2.py3-none-any.whl", "Foo.Bar-1.0rc1.data/"},
		{"noversion.whl", ""},
	}
	for _, tt := range tests {
		t.Run(tt.filename, func(t *testing.T) {
			if got := dataDir(tt.filename); got != tt.want {
				t.Errorf("dataDir(%q) = %q, want %q", tt.filename, got, tt.want)
			}
		})
	}
}

func TestWheelManifest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.whl")
	writeZip(t, path, demoWheel)
	want := map[string]int64{"node_modules/x/index.js": 3} // kept: the manifest adds to want
	n, err := wheelManifest(path, PyEntry{Name: "demo", Version: "1.0", Filename: "demo-1.0-py3-none-any.whl"}, want)
	if err != nil {
		t.Fatal(err)
	}
	expect := maps.Clone(demoWheelWant)
	expect["node_modules/x/index.js"] = 3
	if !maps.Equal(want, expect) {
		t.Errorf("wheelManifest:\n got %v\nwant %v", want, expect)
	}
	var total int64
	for _, s := range demoWheelWant {
		total += s
	}
	if n != total {
		t.Errorf("wheelManifest returned %d bytes, want %d", n, total)
	}
	for p := range want {
		for _, dropped := range []string{"scripts", "headers", "demo-cli", "demo.h", "share", ".data/"} {
			if strings.Contains(p, dropped) {
				t.Errorf("wheelManifest keeps %s", p)
			}
		}
	}

	t.Run("not a zip", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.whl")
		if err := os.WriteFile(bad, []byte("not a zip"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := wheelManifest(bad, PyEntry{Filename: "bad-1.0-py3-none-any.whl"}, map[string]int64{}); err == nil {
			t.Error("wheelManifest of a non-zip succeeded")
		}
	})
}

func TestTarballManifest(t *testing.T) {
	tests := []struct {
		name string
		at   string
	}{
		{name: "top level", at: "node_modules/left-pad"},
		{name: "nested", at: "node_modules/debug/node_modules/left-pad"},
		{name: "scoped", at: "node_modules/@scope/left-pad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "left-pad.tgz")
			writeTgz(t, path, demoTarball)
			got := map[string]int64{}
			n, err := tarballManifest(path, tt.at, got)
			if err != nil {
				t.Fatal(err)
			}
			want := demoTarballWant(tt.at)
			if !maps.Equal(got, want) {
				t.Errorf("tarballManifest:\n got %v\nwant %v", got, want)
			}
			var total int64
			for _, s := range want {
				total += s
			}
			if n != total {
				t.Errorf("tarballManifest returned %d bytes, want %d", n, total)
			}
		})
	}

	t.Run("top dir of any name", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "x.tgz")
		writeTgz(t, path, []archEntry{{name: "left-pad-1.3.0/index.js", body: "1"}, {name: "toplevel-file", body: "22"}})
		got := map[string]int64{}
		if _, err := tarballManifest(path, "node_modules/left-pad", got); err != nil {
			t.Fatal(err)
		}
		if want := map[string]int64{"node_modules/left-pad/index.js": 1}; !maps.Equal(got, want) {
			t.Errorf("tarballManifest = %v, want %v", got, want)
		}
	})
	t.Run("not gzip", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.tgz")
		if err := os.WriteFile(bad, []byte("plain"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := tarballManifest(bad, "node_modules/x", map[string]int64{}); err == nil {
			t.Error("tarballManifest of a non-gzip file succeeded")
		}
	})
}

// layerFile is one file of a test layer.
type layerFile struct {
	path string
	body string
	mode fs.FileMode
}

// makeLayer writes files under a fresh dir, as an install step would, and
// makes sure the test can remove it after verifyLayer made it read-only.
func makeLayer(t *testing.T, files []layerFile) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layer")
	t.Cleanup(func() { removeLayer(dir) })
	for _, d := range []string{dir, filepath.Join(dir, "python"), filepath.Join(dir, "node_modules")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := f.mode
		if mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(p, []byte(f.body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	return dir
}

var layerFiles = []layerFile{
	{path: "python/demo/__init__.py", body: "x = 1\n"},
	{path: "python/_native.so", body: "ELF", mode: 0o755},
	{path: "node_modules/left-pad/index.js", body: "module.exports = 1;\n"},
	{path: "node_modules/left-pad/bin/run", body: "#!/usr/bin/env node\n", mode: 0o700},
	{path: "python/empty.txt", body: ""},
}

func layerWant() map[string]int64 {
	want := map[string]int64{}
	for _, f := range layerFiles {
		want[f.path] = int64(len(f.body))
	}
	return want
}

func TestVerifyLayerExact(t *testing.T) {
	dir := makeLayer(t, layerFiles)
	if err := verifyLayer(dir, layerWant(), 1<<20); err != nil {
		t.Fatalf("verifyLayer of an exact layer: %v", err)
	}
	root := os.Geteuid() == 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		want := fs.FileMode(0o444)
		if d.IsDir() || strings.HasSuffix(p, ".so") || strings.HasSuffix(p, "/run") {
			want = 0o555
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && root && (st.Uid != 0 || st.Gid != 0) {
			t.Errorf("%s: owned by %d:%d, want 0:0", p, st.Uid, st.Gid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestVerifyLayerRefuses(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string, want map[string]int64) // changes the layer or want
		max   int64
		err   string // the error says this
	}{
		{name: "extra file", setup: func(t *testing.T, dir string, _ map[string]int64) {
			writeFile(t, filepath.Join(dir, "python", "sitecustomize.py"), "import os\n")
		}, err: "sitecustomize.py is in no artifact"},
		{name: "extra file at the root", setup: func(t *testing.T, dir string, _ map[string]int64) {
			writeFile(t, filepath.Join(dir, "x.pth"), "")
		}, err: "x.pth"},
		{name: "missing file", setup: func(t *testing.T, _ string, want map[string]int64) {
			want["python/demo/missing.py"] = 10
		}, err: "files"},
		{name: "a directory where a file is wanted", setup: func(t *testing.T, dir string, want map[string]int64) {
			want["python/demo/sub"] = 0
			if err := os.Mkdir(filepath.Join(dir, "python", "demo", "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, err: "files"},
		{name: "size mismatch", setup: func(t *testing.T, _ string, want map[string]int64) {
			want["python/demo/__init__.py"]++
		}, err: "__init__.py is 6 bytes"},
		{name: "symlink to a file", setup: func(t *testing.T, dir string, want map[string]int64) {
			want["python/link.py"] = 6
			if err := os.Symlink("demo/__init__.py", filepath.Join(dir, "python", "link.py")); err != nil {
				t.Fatal(err)
			}
		}, err: "link.py"},
		{name: "symlink replacing a wanted file", setup: func(t *testing.T, dir string, _ map[string]int64) {
			p := filepath.Join(dir, "python", "demo", "__init__.py")
			os.Remove(p)
			if err := os.Symlink("/etc/hostname", p); err != nil {
				t.Fatal(err)
			}
		}, err: "__init__.py"},
		{name: "symlink to a directory", setup: func(t *testing.T, dir string, _ map[string]int64) {
			if err := os.Symlink("/etc", filepath.Join(dir, "node_modules", "etc")); err != nil {
				t.Fatal(err)
			}
		}, err: "etc"},
		{name: "hard link", setup: func(t *testing.T, dir string, _ map[string]int64) {
			outside := filepath.Join(t.TempDir(), "outside")
			p := filepath.Join(dir, "python", "demo", "__init__.py")
			os.Remove(p)
			writeFile(t, outside, "x = 1\n")
			if err := os.Link(outside, p); err != nil {
				t.Fatal(err)
			}
		}, err: "2 links"},
		{name: "hard link within the layer", setup: func(t *testing.T, dir string, want map[string]int64) {
			want["python/copy.py"] = 6
			if err := os.Link(filepath.Join(dir, "python", "demo", "__init__.py"), filepath.Join(dir, "python", "copy.py")); err != nil {
				t.Fatal(err)
			}
		}, err: "links"},
		{name: "fifo", setup: func(t *testing.T, dir string, want map[string]int64) {
			want["python/fifo"] = 0
			if err := syscall.Mkfifo(filepath.Join(dir, "python", "fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, err: "fifo"},
		{name: "unix socket path", setup: func(t *testing.T, dir string, want map[string]int64) {
			want["python/sock"] = 0
			if err := syscall.Mknod(filepath.Join(dir, "python", "sock"), syscall.S_IFSOCK|0o644, 0); err != nil {
				t.Skipf("mknod socket: %v", err)
			}
		}, err: "sock"},
		{name: "total over the max", max: 20, err: "over 20 bytes"},
		{name: "total one byte over the max", max: int64(len("x = 1\n") + len("ELF") + len("module.exports = 1;\n") + len("#!/usr/bin/env node\n") - 1), err: "over"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := makeLayer(t, layerFiles)
			want := layerWant()
			if tt.setup != nil {
				tt.setup(t, dir, want)
			}
			max := tt.max
			if max == 0 {
				max = 1 << 20
			}
			err := verifyLayer(dir, want, max)
			if err == nil {
				t.Fatal("verifyLayer accepted it")
			}
			if !strings.Contains(err.Error(), tt.err) {
				t.Errorf("verifyLayer: %q, want it to say %q", err, tt.err)
			}
		})
	}

	t.Run("total exactly the max", func(t *testing.T) {
		dir := makeLayer(t, layerFiles)
		var total int64
		for _, s := range layerWant() {
			total += s
		}
		if err := verifyLayer(dir, layerWant(), total); err != nil {
			t.Errorf("verifyLayer at exactly the max: %v", err)
		}
	})
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTarballIdentity: what ties a lock entry's name to the bytes
// installed is the tarball's own package.json (prepare refuses a
// mismatch), not its URL.
func TestTarballIdentity(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.tgz")
	writeTgz(t, path, demoTarball)
	name, version, err := tarballIdentity(path)
	if err != nil || name != "left-pad" || version != "1.3.0" {
		t.Fatalf("tarballIdentity = %q %q %v", name, version, err)
	}
	none := filepath.Join(t.TempDir(), "none.tgz")
	writeTgz(t, none, []archEntry{{name: "package/index.js", body: "1"}})
	if _, _, err := tarballIdentity(none); err == nil {
		t.Fatal("a tarball without package.json has an identity")
	}
}
