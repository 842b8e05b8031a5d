package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

// writeTree creates files (path → content) under root; a content starting
// with "->" makes a symlink.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeDebootstrap is a tiny stand-in for a fresh debootstrap target.
var fakeDebootstrap = map[string]string{
	"etc/passwd":                                 "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
	"etc/group":                                  "root:x:0:\nnogroup:x:65534:",
	"etc/hostname":                               "buildhost\n",
	"etc/resolv.conf":                            "->/run/systemd/resolve/stub-resolv.conf",
	"usr/bin/python3":                            "#!fake\n",
	"usr/share/doc/python3/copyright":            "text",
	"usr/share/man/man1/python3.1.gz":            "man",
	"usr/share/locale/de/LC_MESSAGES/x.mo":       "mo",
	"usr/share/zoneinfo/UTC":                     "tz",
	"var/cache/apt/archives/gcc.deb":             "deb",
	"var/lib/apt/lists/deb.debian.org_InRelease": "list",
	"var/lib/dpkg/status":                        "status",
	"var/log/bootstrap.log":                      "log",
	"dev/null":                                   "not a device in this test",
}

func TestCustomise(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, fakeDebootstrap)
	// Twice: a rerun over a customised rootfs must change nothing.
	for i := range 2 {
		if err := customise(root); err != nil {
			t.Fatalf("customise run %d: %v", i+1, err)
		}
	}

	t.Run("removed", func(t *testing.T) {
		for _, p := range []string{"usr/share/doc/python3", "usr/share/man/man1", "usr/share/locale/de",
			"var/cache/apt/archives", "var/lib/apt/lists/deb.debian.org_InRelease", "var/log/bootstrap.log", "dev/null"} {
			if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s still present (err %v)", p, err)
			}
		}
	})
	t.Run("kept", func(t *testing.T) {
		for _, p := range []string{"usr/bin/python3", "usr/share/zoneinfo/UTC", "var/lib/dpkg/status", "usr/share/doc", "var/cache/apt"} {
			if _, err := os.Lstat(filepath.Join(root, p)); err != nil {
				t.Errorf("%s removed: %v", p, err)
			}
		}
	})
	t.Run("mountpoints", func(t *testing.T) {
		want := map[string]fs.FileMode{
			"workspace":             fs.ModeDir | 0o755,
			"sandpit/src":           fs.ModeDir | 0o755,
			"sandpit/out":           fs.ModeDir | 0o755,
			"opt/sandpit/env":       fs.ModeDir | 0o755,
			"opt/sandpit/artifacts": fs.ModeDir | 0o755,
			"opt/sandpit/build":     fs.ModeDir | 0o755,
			"tmp":                   fs.ModeDir | fs.ModeSticky | 0o777,
			"dev/shm":               fs.ModeDir | fs.ModeSticky | 0o777,
			"proc":                  fs.ModeDir | 0o555,
			"sys":                   fs.ModeDir | 0o555,
		}
		for _, m := range sandpit.Mountpoints {
			if _, ok := want[strings.TrimPrefix(m, "/")]; !ok {
				t.Errorf("mountpoint %s is not checked here", m)
			}
		}
		for p, mode := range want {
			st, err := os.Lstat(filepath.Join(root, p))
			if err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			if got := st.Mode(); got != mode {
				t.Errorf("%s mode = %v, want %v", p, got, mode)
			}
		}
	})
	t.Run("host identity dropped", func(t *testing.T) {
		for name, want := range map[string]string{"etc/hostname": "sandpit\n", "etc/resolv.conf": ""} {
			st, err := os.Lstat(filepath.Join(root, name))
			if err != nil || !st.Mode().IsRegular() {
				t.Errorf("%s: not a regular file (%v, %v)", name, st, err)
				continue
			}
			got, _ := os.ReadFile(filepath.Join(root, name))
			if string(got) != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
		}
	})
	t.Run("sandbox user", func(t *testing.T) {
		for file, want := range map[string]string{
			"etc/passwd": fmt.Sprintf("sandbox:x:%d:%d:", sandpit.SandboxUID, sandpit.SandboxGID),
			"etc/group":  fmt.Sprintf("sandbox:x:%d:", sandpit.SandboxGID),
		} {
			b, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(b), "\nsandbox:"); n != 1 {
				t.Errorf("%s has %d sandbox entries, want 1:\n%s", file, n, b)
			}
			if !strings.Contains(string(b), want) {
				t.Errorf("%s lacks %q:\n%s", file, want, b)
			}
			if !strings.HasPrefix(string(b), "root:x:0:") {
				t.Errorf("%s lost its root entry:\n%s", file, b)
			}
		}
	})
}

func TestAddUserClash(t *testing.T) {
	tests := []struct {
		name   string
		passwd string
		ok     bool
	}{
		{"empty", "", true},
		{"already there", "sandbox:x:1000:1000:x:/tmp:/bin/bash\n", true},
		{"uid taken", "debian:x:1000:1000::/home/debian:/bin/bash\n", false},
		{"name taken with another uid", "sandbox:x:1001:1001::/tmp:/bin/sh\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, map[string]string{"etc/passwd": tt.passwd, "etc/group": ""})
			err := addUser(root)
			if (err == nil) != tt.ok {
				t.Fatalf("addUser() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidRecipe) {
				t.Errorf("addUser() = %v, want ErrInvalidRecipe", err)
			}
		})
	}
}

func TestProbeVersions(t *testing.T) {
	r := DefaultRecipe()
	outputs := map[string]string{
		"python3": "Python 3.11.2\n",
		"gcc":     "gcc (Debian 12.2.0-14) 12.2.0\nCopyright\n",
		"g++":     "g++ (Debian 12.2.0-14) 12.2.0\n",
		"bash":    "GNU bash, version 5.2.15(1)-release (x86_64-pc-linux-gnu)\n",
		"node":    "v18.19.0\n",
	}
	probe := func(out map[string]string) probeFunc {
		return func(_ context.Context, _ string, argv []string) (string, error) {
			o, ok := out[argv[0]]
			if !ok {
				return "", fmt.Errorf("%s: not found", argv[0])
			}
			return o, nil
		}
	}
	t.Run("all found", func(t *testing.T) {
		got, err := probeVersions(t.Context(), r, "/unused", probe(outputs))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			LabelVersionPrefix + "python":     "3.11.2",
			LabelVersionPrefix + "c":          "gcc 12.2.0",
			LabelVersionPrefix + "cpp":        "g++ 12.2.0",
			LabelVersionPrefix + "bash":       "5.2.15",
			LabelVersionPrefix + "javascript": "18.19.0",
		}
		if len(got) != len(want) {
			t.Errorf("got %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("label %s = %q, want %q", k, got[k], v)
			}
		}
	})
	for _, broken := range []struct{ name, cmd, output string }{
		{"missing compiler", "g++", ""},
		{"garbled output", "python3", "Python\n"},
	} {
		t.Run(broken.name, func(t *testing.T) {
			out := map[string]string{}
			for k, v := range outputs {
				out[k] = v
			}
			if broken.output == "" {
				delete(out, broken.cmd)
			} else {
				out[broken.cmd] = broken.output
			}
			_, err := probeVersions(t.Context(), r, "/unused", probe(out))
			if !errors.Is(err, ErrBuild) {
				t.Errorf("probeVersions() = %v, want ErrBuild", err)
			}
		})
	}
}

func TestTail(t *testing.T) {
	tl := &tail{max: 3}
	for _, chunk := range []string{"one\ntw", "o\nthree\nfo", "ur\nfive"} {
		tl.Write([]byte(chunk))
	}
	if got, want := tl.String(), "three\nfour\nfive"; got != want {
		t.Errorf("tail = %q, want %q", got, want)
	}
}
