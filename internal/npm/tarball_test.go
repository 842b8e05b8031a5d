package npm

import (
	"archive/tar"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const pj = `{"name":"t","version":"1.0.0"}`

func TestCheckTarball(t *testing.T) {
	ok := []tarEntry{{name: "package/package.json", body: pj}}
	with := func(es ...tarEntry) []tarEntry { return append(append([]tarEntry{}, ok...), es...) }
	zeros := strings.Repeat("\x00", 8<<20)
	tests := []struct {
		name    string
		entries []tarEntry
		raw     []byte // instead of entries
		limits  TarLimits
		want    error
		say     string
	}{
		{name: "as npm packs it", entries: with(tarEntry{name: "package/lib/", typ: tar.TypeDir, mode: 0o755}, tarEntry{name: "package/lib/a.js", body: "1"}, tarEntry{name: "package/bin/x", body: "#!", mode: 0o755})},
		{name: "another top directory", entries: []tarEntry{{name: "node-thing/package.json", body: pj}, {name: "node-thing/x.js", body: "1"}}},
		{name: "a leading top directory entry", entries: []tarEntry{{name: "package/", typ: tar.TypeDir, mode: 0o755}, {name: "package/package.json", body: pj}}},
		{name: "a git archive comment", entries: append([]tarEntry{{name: "pax_global_header", typ: tar.TypeXGlobalHeader, pax: map[string]string{"comment": "abc123"}}}, ok...)},
		{name: "compressible but small", entries: with(tarEntry{name: "package/zeros", body: zeros[:512<<10]})},

		{name: "two top directories", entries: with(tarEntry{name: "other/x.js", body: "1"}), want: ErrUnsafeTarball, say: `entry "other/x.js" is outside the top directory "package"`},
		{name: "a file at the top", entries: []tarEntry{{name: "package.json", body: pj}}, want: ErrUnsafeTarball, say: "a file where the top directory should be"},
		{name: "absolute", entries: with(tarEntry{name: "/etc/passwd", body: "x"}), want: ErrUnsafeTarball, say: "an absolute path"},
		{name: "dot-dot", entries: with(tarEntry{name: "package/../../x", body: "x"}), want: ErrUnsafeTarball, say: `".." path component`},
		{name: "dot-dot top", entries: []tarEntry{{name: "../package.json", body: pj}}, want: ErrUnsafeTarball, say: `".." path component`},
		{name: "dot", entries: with(tarEntry{name: "package/./x", body: "x"}), want: ErrUnsafeTarball, say: `"." path component`},
		{name: "empty component", entries: with(tarEntry{name: "package//x", body: "x"}), want: ErrUnsafeTarball, say: "empty path component"},
		{name: "backslash", entries: with(tarEntry{name: `package/..\..\x`, body: "x"}), want: ErrUnsafeTarball, say: "backslash"},
		{name: "control character", entries: with(tarEntry{name: "package/\x1b[31mx", body: "x"}), want: ErrUnsafeTarball, say: "control character"},
		{name: "C1 control character", entries: with(tarEntry{name: "package/\u009bx", body: "x"}), want: ErrUnsafeTarball, say: "control character"},
		{name: "symlink", entries: with(tarEntry{name: "package/l", typ: tar.TypeSymlink, linkname: "/etc/shadow"}), want: ErrUnsafeTarball, say: "symbolic link"},
		{name: "hard link", entries: with(tarEntry{name: "package/l", typ: tar.TypeLink, linkname: "package/package.json"}), want: ErrUnsafeTarball, say: "hard link"},
		{name: "character device", entries: with(tarEntry{name: "package/d", typ: tar.TypeChar}), want: ErrUnsafeTarball, say: "not a regular file or directory"},
		{name: "block device", entries: with(tarEntry{name: "package/d", typ: tar.TypeBlock}), want: ErrUnsafeTarball, say: "not a regular file or directory"},
		{name: "fifo", entries: with(tarEntry{name: "package/f", typ: tar.TypeFifo}), want: ErrUnsafeTarball, say: "not a regular file or directory"},
		{name: "duplicate file", entries: with(tarEntry{name: "package/a", body: "1"}, tarEntry{name: "package/a", body: "2"}), want: ErrUnsafeTarball, say: "appears twice"},
		{name: "duplicate directory", entries: with(tarEntry{name: "package/d/", typ: tar.TypeDir}, tarEntry{name: "package/d/", typ: tar.TypeDir}), want: ErrUnsafeTarball, say: "appears twice"},
		{name: "file then directory", entries: with(tarEntry{name: "package/a", body: "1"}, tarEntry{name: "package/a/b", body: "2"}), want: ErrUnsafeTarball, say: "both a file and a directory"},
		{name: "directory then file", entries: with(tarEntry{name: "package/a/b", body: "2"}, tarEntry{name: "package/a", body: "1"}), want: ErrUnsafeTarball, say: "both a file and a directory"},
		{name: "file and directory entry", entries: with(tarEntry{name: "package/a", body: "1"}, tarEntry{name: "package/a/", typ: tar.TypeDir}), want: ErrUnsafeTarball, say: "both a file and a directory"},
		{name: "PAX path outside", raw: paxRenamed(t, "package/../../etc/cron.d/x"), want: ErrUnsafeTarball, say: `entry "package/../../etc/cron.d/x": a ".." path component`},
		{name: "PAX path absolute", raw: paxRenamed(t, "/root/.ssh/authorized_keys"), want: ErrUnsafeTarball, say: "absolute path"},
		{name: "PAX path to another top", raw: paxRenamed(t, "other/x.js"), want: ErrUnsafeTarball, say: `entry "package/package.json" is outside the top directory "other"`},
		{name: "PAX path within", raw: paxRenamed(t, "package/renamed.js")},
		{name: "global PAX path", entries: append([]tarEntry{{name: "g", typ: tar.TypeXGlobalHeader, pax: map[string]string{"path": "../x"}}}, ok...), want: ErrUnsafeTarball, say: `a global PAX header sets "path"`},
		{name: "no package.json", entries: []tarEntry{{name: "package/index.js", body: "1"}}, want: ErrUnsafeTarball, say: "no package/package.json"},
		{name: "empty", entries: []tarEntry{}, want: ErrUnsafeTarball, say: "empty"},
		{name: "not gzip", raw: []byte("plain text, not a tarball"), want: ErrUnsafeTarball, say: "not a gzip stream"},
		{name: "gzip but not tar", raw: gzipped(t, []byte(strings.Repeat("garbage!", 200))), want: ErrUnsafeTarball, say: "not a readable tar archive"},
		{name: "truncated entry", entries: with(tarEntry{name: "package/big", body: "abc", size: 1 << 16}), want: ErrUnsafeTarball, say: "unexpected EOF"},
		{name: "gzip bomb", entries: with(tarEntry{name: "package/zeros", body: zeros}), want: ErrUnsafeTarball, say: "decompresses over 200:1"},
		{name: "a gzip'd stream of zeros", raw: gzipped(t, []byte(zeros)), want: ErrUnsafeTarball, say: "the archive is empty"},
		{name: "decompressed stream over the bound", entries: with(tarEntry{name: "package/zeros", body: zeros}), limits: TarLimits{MaxRatio: 1 << 30, MaxBytes: 1 << 20, MaxEntries: 10}, want: ErrTooLarge, say: "unpacks to over 1048576 bytes"},
		{name: "too many entries", entries: with(tarEntry{name: "package/a", body: "1"}, tarEntry{name: "package/b", body: "1"}), limits: TarLimits{MaxEntries: 2}, want: ErrTooLarge, say: "over 2 entries"},
		{name: "at the entry limit", entries: with(tarEntry{name: "package/a", body: "1"}), limits: TarLimits{MaxEntries: 2}},
		{name: "too many bytes", entries: with(tarEntry{name: "package/a", body: strings.Repeat("x", 1000)}), limits: TarLimits{MaxBytes: 1000}, want: ErrTooLarge, say: "unpacks to over 1000 bytes"},
		{name: "at the byte limit", entries: with(tarEntry{name: "package/a", body: strings.Repeat("x", 1000-len(pj))}), limits: TarLimits{MaxBytes: 1000}},
		{name: "file too large", entries: ok, limits: TarLimits{MaxFileBytes: 50}, want: ErrTooLarge, say: "over the 50-byte limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.raw
			if b == nil {
				b = buildTgz(t, tt.entries)
			}
			p := writeTemp(t, "t-1.0.0.tgz", b)
			err := CheckTarball(p, tt.limits)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("CheckTarball = %v, want nil", err)
				}
			} else if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.say) {
				t.Fatalf("CheckTarball = %v, want %v saying %q", err, tt.want, tt.say)
			}
			// Extract agrees, and leaves nothing when it refuses.
			dir := t.TempDir()
			xerr := ExtractTarball(p, dir, tt.limits)
			if (xerr == nil) != (err == nil) {
				t.Fatalf("ExtractTarball = %v, CheckTarball = %v", xerr, err)
			}
			if ents, _ := os.ReadDir(dir); xerr != nil && len(ents) > 0 {
				t.Errorf("a refused tarball left %d entries", len(ents))
			}
		})
	}
}

func TestExtractTarball(t *testing.T) {
	p := writeTemp(t, "t.tgz", buildTgz(t, []tarEntry{
		{name: "package/package.json", body: pj},
		{name: "package/lib/", typ: tar.TypeDir, mode: 0o700},
		{name: "package/lib/a.js", body: "module.exports = 1\n", mode: 0o4777},
		{name: "package/bin/run", body: "#!/usr/bin/env node\n", mode: 0o755},
	}))
	dir := t.TempDir()
	if err := ExtractTarball(p, dir, TarLimits{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{"package.json": 0o644, "lib": os.ModeDir | 0o755, "lib/a.js": 0o755, "bin": os.ModeDir | 0o755, "bin/run": 0o755}
	got := map[string]os.FileMode{}
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if path == dir {
			return nil
		}
		info, _ := d.Info()
		rel, _ := filepath.Rel(dir, path)
		got[rel] = info.Mode() &^ 0o022 // whatever the umask took
		return nil
	})
	for k, v := range want {
		if got[k] != v&^0o022 {
			t.Errorf("%s: mode %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("unpacked %v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "lib/a.js")); string(b) != "module.exports = 1\n" {
		t.Errorf("lib/a.js holds %q", b)
	}
	// Not into a directory that holds something.
	if err := ExtractTarball(p, dir, TarLimits{}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("into a full directory: %v", err)
	}
}
