package pypi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

const (
	info = "w-1.0.dist-info"
	meta = "Metadata-Version: 2.1\nName: w\nVersion: 1.0\n\n"
	whl  = "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
)

// wheelOf builds a wheel of files plus METADATA and WHEEL, with a RECORD
// that matches them (then edit applies to the list).
func wheelOf(t *testing.T, files []zipFile, edit func([]zipFile) []zipFile) string {
	t.Helper()
	all := append([]zipFile{}, files...)
	all = append(all, zipFile{name: info + "/METADATA", body: meta}, zipFile{name: info + "/WHEEL", body: whl})
	all = append(all, zipFile{name: info + "/RECORD", body: record(all, info+"/RECORD")})
	if edit != nil {
		all = edit(all)
	}
	p := filepath.Join(t.TempDir(), "w-1.0-py3-none-any.whl")
	if err := os.WriteFile(p, buildZip(t, all), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckWheel(t *testing.T) {
	mod := []zipFile{{name: "w/__init__.py", body: "x = 1\n"}}
	zeros := strings.Repeat("\x00", 16<<20)
	tests := []struct {
		name   string
		files  []zipFile
		edit   func([]zipFile) []zipFile
		limits WheelLimits
		want   error  // nil: accepted
		say    string // in the error
	}{
		{name: "a sound wheel", files: append(mod, zipFile{name: "w/", mode: fs.ModeDir | 0o755}, zipFile{name: "w.data/scripts/run", body: "#!python\n", mode: 0o755})},
		{name: "path traversal", files: []zipFile{{name: "../../etc/cron.d/x", body: "evil"}}, want: ErrUnsafeWheel, say: `".." path component`},
		{name: "traversal inside", files: []zipFile{{name: "w/../../x", body: "evil"}}, want: ErrUnsafeWheel, say: `".." path component`},
		{name: "absolute path", files: []zipFile{{name: "/etc/passwd", body: "evil"}}, want: ErrUnsafeWheel, say: "absolute path"},
		{name: "backslash", files: []zipFile{{name: `w\..\..\x`, body: "evil"}}, want: ErrUnsafeWheel, say: "backslash"},
		{name: "drive letter", files: []zipFile{{name: "C:/x", body: "evil"}}, want: ErrUnsafeWheel, say: "drive letter"},
		{name: "control character", files: []zipFile{{name: "w/\x1b[2Jx.py", body: ""}}, want: ErrUnsafeWheel, say: "control character"},
		{name: "dot component", files: []zipFile{{name: "w/./x.py", body: ""}}, want: ErrUnsafeWheel, say: `"." path component`},
		{name: "symlink", files: []zipFile{{name: "w/link", body: "/etc/shadow", mode: fs.ModeSymlink | 0o777}}, want: ErrUnsafeWheel, say: "symbolic link"},
		{name: "symlink by raw attributes", files: []zipFile{{name: "w/link", body: "/etc", extern: 0o120777 << 16}}, want: ErrUnsafeWheel, say: "symbolic link"},
		{name: "device", files: []zipFile{{name: "w/dev", body: "", extern: 0o020644 << 16}}, want: ErrUnsafeWheel, say: "not a regular file"},
		{name: "fifo", files: []zipFile{{name: "w/fifo", body: "", mode: fs.ModeNamedPipe | 0o644}}, want: ErrUnsafeWheel, say: "not a regular file"},
		{name: "duplicate", files: []zipFile{{name: "w/a.py", body: "1"}, {name: "w/a.py", body: "2"}}, want: ErrUnsafeWheel, say: "appears twice"},
		{name: "file and directory", files: []zipFile{{name: "w/a", body: "1"}, {name: "w/a/b.py", body: "2"}}, want: ErrUnsafeWheel, say: "both a file and a directory"},
		{name: "zip bomb", files: []zipFile{{name: "w/zeros.bin", body: zeros}}, want: ErrUnsafeWheel, say: "ratio over 200:1"},
		{name: "compressible but small", files: []zipFile{{name: "w/zeros.bin", body: zeros[:1<<20]}}},
		{name: "too many entries", files: mod, limits: WheelLimits{MaxEntries: 3}, want: ErrTooLarge, say: "4 entries, over the 3-entry limit"},
		{name: "at the entry limit", files: mod, limits: WheelLimits{MaxEntries: 4}},
		{name: "too many bytes", files: []zipFile{{name: "w/big", body: strings.Repeat("x", 1000)}}, limits: WheelLimits{MaxBytes: 1000}, want: ErrTooLarge, say: "over 1000 bytes"},
		{name: "file too large", files: mod, limits: WheelLimits{MaxFileBytes: 100}, want: ErrTooLarge, say: "over the 100-byte limit"},
		{name: "RECORD mismatch", files: mod, edit: func(fs []zipFile) []zipFile {
			fs[0].body = "x = 2\n" // same size, other bytes
			return fs
		}, want: ErrUnsafeWheel, say: "its bytes hash to"},
		{name: "file missing from RECORD", files: mod, edit: func(fs []zipFile) []zipFile {
			return append(fs, zipFile{name: "w/extra.pth", body: "import evil"})
		}, want: ErrUnsafeWheel, say: `"w/extra.pth" is not listed in RECORD`},
		{name: "RECORD lists a missing file", files: mod, edit: func(fs []zipFile) []zipFile {
			return fs[1:]
		}, want: ErrUnsafeWheel, say: `RECORD lists "w/__init__.py", which the archive lacks`},
		{name: "RECORD without hash", files: mod, edit: func(fs []zipFile) []zipFile {
			rec := &fs[len(fs)-1]
			first, rest, _ := strings.Cut(rec.body, "\n")
			if !strings.HasPrefix(first, "w/__init__.py,") {
				t.Fatalf("RECORD starts %q", first)
			}
			rec.body = "w/__init__.py,,6\n" + rest
			return fs
		}, want: ErrUnsafeWheel, say: "no hash"},
		{name: "RECORD with md5", files: mod, edit: func(fs []zipFile) []zipFile {
			fs[len(fs)-1].body = strings.Replace(fs[len(fs)-1].body, "w/__init__.py,sha256=", "w/__init__.py,md5=", 1)
			return fs
		}, want: ErrUnsafeWheel, say: `"md5"`},
		{name: "RECORD wrong size", files: mod, edit: func(fs []zipFile) []zipFile {
			fs[len(fs)-1].body = strings.Replace(fs[len(fs)-1].body, ",6\n", ",7\n", 1)
			return fs
		}, want: ErrUnsafeWheel, say: "RECORD says 7 bytes"},
		{name: "no RECORD", files: mod, edit: func(fs []zipFile) []zipFile {
			return fs[:len(fs)-1]
		}, want: ErrUnsafeWheel, say: "has no RECORD"},
		{name: "two dist-info", files: append(mod, zipFile{name: "v-1.0.dist-info/METADATA", body: meta}), want: ErrUnsafeWheel, say: "2 top-level .dist-info"},
		{name: "dist-info of another package", edit: func(fs []zipFile) []zipFile {
			for i := range fs {
				fs[i].name = strings.Replace(fs[i].name, info, "other-1.0.dist-info", 1)
			}
			fs[len(fs)-1].body = record(fs[:len(fs)-1], fs[len(fs)-1].name)
			return fs
		}, want: ErrUnsafeWheel, say: "does not belong to w 1.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := wheelOf(t, tt.files, tt.edit)
			err := tt.limits.Check(p)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.say) {
				t.Fatalf("Check = %v, want %v saying %q", err, tt.want, tt.say)
			}
			if sandpit.ClassOf(err) == nil {
				t.Errorf("error %v has no class", err)
			}
			if strings.Contains(err.Error(), "\x1b") {
				t.Errorf("error %q echoes a control character", err)
			}
		})
	}
}

// Two central directory entries pointing at the same data: the
// overlapping-file zip bomb.
func TestCheckWheelOverlap(t *testing.T) {
	files := []zipFile{{name: "w/a.py", body: "same", store: true}, {name: "w/b.py", body: "same", store: true}}
	all := append(files, zipFile{name: info + "/METADATA", body: meta}, zipFile{name: info + "/WHEEL", body: whl})
	all = append(all, zipFile{name: info + "/RECORD", body: record(all, info+"/RECORD")})
	b := buildZip(t, all)
	// The second central directory header's local header offset (bytes
	// 42..45) is made to point at the first entry's.
	cd := bytes.Index(b, []byte("PK\x01\x02"))
	second := cd + 4 + bytes.Index(b[cd+4:], []byte("PK\x01\x02"))
	first := int(b[cd+42]) | int(b[cd+43])<<8 | int(b[cd+44])<<16 | int(b[cd+45])<<24
	if first != 0 {
		t.Fatalf("first entry at %d", first)
	}
	copy(b[second+42:second+46], []byte{0, 0, 0, 0})
	p := filepath.Join(t.TempDir(), "w-1.0-py3-none-any.whl")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckWheel(p); !errors.Is(err, ErrUnsafeWheel) || !strings.Contains(err.Error(), "overlap") {
		t.Fatalf("CheckWheel = %v, want an overlap refused", err)
	}
}

func TestCheckWheelNotAZip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "w-1.0-py3-none-any.whl")
	os.WriteFile(p, []byte("PK but not really"), 0o644)
	if err := CheckWheel(p); !errors.Is(err, ErrUnsafeWheel) {
		t.Fatalf("CheckWheel = %v", err)
	}
}

func TestReadWheelMetadata(t *testing.T) {
	_, data, md := buildWheel(t, pkg{name: "r", version: "2.0", requires: []string{`a>=1; python_version >= "3"`, `b; extra == "x"`}})
	p := filepath.Join(t.TempDir(), "r.whl")
	os.WriteFile(p, data, 0o644)
	b, err := ReadWheelMetadata(p, 1<<20)
	if err != nil || !bytes.Equal(b, md) {
		t.Fatalf("ReadWheelMetadata = %q, %v", b, err)
	}
	if _, err := ReadWheelMetadata(p, 10); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ReadWheelMetadata over its bound = %v", err)
	}
	m, err := ParseMetadata(b)
	if err != nil {
		t.Fatal(err)
	}
	deps, skipped, err := m.Dependencies(nil, target(t).Env)
	if err != nil || len(deps) != 1 || deps[0].Name != "a" || len(skipped) != 0 {
		t.Fatalf("Dependencies = %v, %v, %v", deps, skipped, err)
	}
	deps, _, _ = m.Dependencies([]string{"x"}, target(t).Env)
	if len(deps) != 2 {
		t.Fatalf("Dependencies with extra x = %v", deps)
	}
	if fmt.Sprint(m.RequiresDist) != `[a>=1; python_version >= "3" b; extra == "x"]` {
		t.Errorf("the description's lines were read as headers: %q", m.RequiresDist)
	}
}

func TestExtractWheel(t *testing.T) {
	files := []zipFile{
		{name: "w/", mode: fs.ModeDir | 0o755},
		{name: "w/__init__.py", body: "x = 1\n"},
		{name: "w.data/scripts/run", body: "#!python\n", mode: 0o755},
	}
	p := wheelOf(t, files, nil)
	dir := t.TempDir()
	if err := ExtractWheel(p, dir); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "w", "__init__.py")); err != nil || string(b) != "x = 1\n" {
		t.Errorf("w/__init__.py = %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "w.data", "scripts", "run")); err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Errorf("script mode: %v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, info, "RECORD")); err != nil {
		t.Errorf("RECORD not unpacked: %v", err)
	}
	if err := ExtractWheel(p, dir); !errors.Is(err, sandpit.ErrInvalidArgument) || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("Extract into a non-empty directory = %v", err)
	}

	refused := []struct {
		name  string
		files []zipFile
		edit  func([]zipFile) []zipFile
	}{
		{"traversal", []zipFile{{name: "../escape.py", body: "evil"}}, nil},
		{"RECORD mismatch", files, func(fs []zipFile) []zipFile {
			fs[1].body = "x = 2\n"
			return fs
		}},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "into")
			os.Mkdir(dir, 0o755)
			err := ExtractWheel(wheelOf(t, tt.files, tt.edit), dir)
			if !errors.Is(err, ErrUnsafeWheel) {
				t.Fatalf("Extract = %v, want ErrUnsafeWheel", err)
			}
			for _, d := range []string{dir, parent} {
				if ents, _ := os.ReadDir(d); len(ents) != 0 && (d == dir || len(ents) != 1) {
					t.Errorf("%s holds %v after a refused extract", d, ents)
				}
			}
		})
	}
}

// TestCheckNamed: a cached wheel (named by its hash) is checked as the
// wheel a lock names: its .dist-info must be that name and version.
func TestCheckNamed(t *testing.T) {
	fn, data, _ := buildWheel(t, pkg{name: "evil", version: "6.6.6"})
	path := filepath.Join(t.TempDir(), sha(data))
	if err := os.WriteFile(path, data, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := (WheelLimits{}).CheckNamed(path, fn); err != nil {
		t.Fatalf("its own name: %v", err)
	}
	for _, other := range []string{"requests-2.31.0-py3-none-any.whl", "evil-6.6.7-py3-none-any.whl"} {
		if err := (WheelLimits{}).CheckNamed(path, other); !errors.Is(err, ErrUnsafeWheel) {
			t.Errorf("checked as %s: %v, want ErrUnsafeWheel", other, err)
		}
	}
}
