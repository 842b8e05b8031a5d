package packages

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// installEnv is install.py run on the host: its fixed sandbox paths
// (/opt/sandpit/artifacts, /opt/sandpit/build, /workspace/) replaced by
// temp dirs.
type installEnv struct {
	script, art, build, ws, outside string
}

func newInstallEnv(t *testing.T) *installEnv {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not on PATH: install.py is run by the host's python3 here")
	}
	root := t.TempDir()
	e := &installEnv{
		art:     filepath.Join(root, "artifacts"),
		build:   filepath.Join(root, "build"),
		ws:      filepath.Join(root, "workspace"),
		outside: root,
	}
	t.Cleanup(func() { removeLayer(e.build) })
	for _, d := range []string{e.art, e.build, filepath.Join(e.build, "python"), filepath.Join(e.build, "node_modules"), e.ws} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := string(installScript)
	for _, r := range [][2]string{
		{`"/opt/sandpit/artifacts"`, `"` + e.art + `"`},
		{`"/opt/sandpit/build"`, `"` + e.build + `"`},
		{`"/workspace/`, `"` + e.ws + `/`},
	} {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("install.py no longer has %s; update this test", r[0])
		}
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	// Every sandbox path in the script's code is one this test replaced.
	rest := string(installScript)
	for _, r := range []string{`"/opt/sandpit/artifacts"`, `"/opt/sandpit/build"`, `"/workspace/`} {
		rest = strings.ReplaceAll(rest, r, "")
	}
	for i, line := range strings.Split(rest, "\n") {
		code, _, _ := strings.Cut(line, "#")
		if strings.Contains(code, "/opt/sandpit/build") || strings.Contains(code, "/opt/sandpit/artifacts") || strings.Contains(code, "/workspace") {
			t.Fatalf("install.py line %d names a sandbox path this test did not replace: %s", i+1, line)
		}
	}
	e.script = filepath.Join(root, "install.py")
	if err := os.WriteFile(e.script, []byte(s), 0o444); err != nil {
		t.Fatal(err)
	}
	return e
}

// run runs the script with steps on stdin.
func (e *installEnv) run(t *testing.T, steps installSteps) (string, error) {
	t.Helper()
	stdin, err := json.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "python3", "-I", e.script)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Dir = e.ws
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tree lists the regular files and links under dir.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestInstallScriptUnpacksAsManifests(t *testing.T) {
	e := newInstallEnv(t)
	entry := PyEntry{Name: "demo", Version: "1.0", Filename: "demo-1.0-py3-none-any.whl"}
	writeZip(t, filepath.Join(e.art, "wheel"), demoWheel)
	writeTgz(t, filepath.Join(e.art, "tgz"), demoTarball)
	writeTgz(t, filepath.Join(e.art, "tgz2"), []archEntry{{name: "package/index.js", body: "nested\n"}})

	want := map[string]int64{}
	if _, err := wheelManifest(filepath.Join(e.art, "wheel"), entry, want); err != nil {
		t.Fatal(err)
	}
	if _, err := tarballManifest(filepath.Join(e.art, "tgz"), "node_modules/left-pad", want); err != nil {
		t.Fatal(err)
	}
	if _, err := tarballManifest(filepath.Join(e.art, "tgz2"), "node_modules/left-pad/node_modules/@scope/dep", want); err != nil {
		t.Fatal(err)
	}
	// The manifests themselves, independently of install.py.
	expect := maps.Clone(demoWheelWant)
	maps.Copy(expect, demoTarballWant("node_modules/left-pad"))
	expect["node_modules/left-pad/node_modules/@scope/dep/index.js"] = int64(len("nested\n"))
	if !maps.Equal(want, expect) {
		t.Fatalf("manifests:\n got %v\nwant %v", want, expect)
	}

	out, err := e.run(t, installSteps{
		Python: []pyStep{{Name: "demo", Version: "1.0", File: "wheel", DataDir: dataDir(entry.Filename)}},
		JavaScript: []jsStep{
			{Name: "left-pad", Version: "1.3.0", File: "tgz", Path: "node_modules/left-pad"},
			{Name: "@scope/dep", Version: "1.0.0", File: "tgz2", Path: "node_modules/left-pad/node_modules/@scope/dep"},
		},
	})
	if err != nil {
		t.Fatalf("install.py: %v\n%s", err, out)
	}
	if !strings.Contains(out, "3 packages unpacked") {
		t.Errorf("install.py output %q does not count 3 packages", out)
	}
	if got := tree(t, e.ws); len(got) != 0 {
		t.Errorf("install.py wrote %v in the workspace with no lock step", got)
	}
	// What the host checks before it uses a layer.
	if err := verifyLayer(e.build, want, 1<<20); err != nil {
		t.Fatalf("verifyLayer of what install.py wrote: %v\nlayer: %v", err, tree(t, e.build))
	}
	for p, body := range map[string]string{
		"python/demo_pure.py":                                    "pure = True\n",
		"python/demo/sub/mod.py":                                 "x = 1\n",
		"node_modules/left-pad/lib/pad.js":                       "exports.pad = 2;\n",
		"node_modules/left-pad/node_modules/@scope/dep/index.js": "nested\n",
	} {
		b, err := os.ReadFile(filepath.Join(e.build, p))
		if err != nil || string(b) != body {
			t.Errorf("%s = %q, %v; want %q", p, b, err, body)
		}
	}
	for _, p := range []string{"python/_demo_native.so", "node_modules/left-pad/bin/run"} {
		if info, err := os.Stat(filepath.Join(e.build, p)); err != nil || info.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s lost its executable bit: %v, %v", p, info.Mode(), err)
		}
	}
}

func TestInstallScriptRefuses(t *testing.T) {
	tests := []struct {
		name  string
		steps func(e *installEnv) installSteps
		write func(t *testing.T, e *installEnv)
		out   string // install.py says this
	}{
		{
			name: "zip entry with ..",
			out:  "unsafe entry name",
			write: func(t *testing.T, e *installEnv) {
				writeZip(t, filepath.Join(e.art, "wheel"), []archEntry{{name: "demo/__init__.py", body: "ok"}, {name: "../escaped.py", body: "evil"}})
			},
		},
		{
			name: "zip entry deep with ..",
			out:  "unsafe entry name",
			write: func(t *testing.T, e *installEnv) {
				writeZip(t, filepath.Join(e.art, "wheel"), []archEntry{{name: "demo/../../../escaped.py", body: "evil"}})
			},
		},
		{
			name: "zip entry absolute",
			out:  "unsafe entry name",
			write: func(t *testing.T, e *installEnv) {
				// An absolute name inside the test's own temp dir, so a
				// regression writes there and not over the host.
				writeZip(t, filepath.Join(e.art, "wheel"), []archEntry{{name: filepath.Join(e.outside, "escaped.py"), body: "evil"}})
			},
		},
		{
			name: "zip entry .. under the data dir",
			out:  "unsafe entry name",
			write: func(t *testing.T, e *installEnv) {
				writeZip(t, filepath.Join(e.art, "wheel"), []archEntry{{name: "demo-1.0.data/purelib/../../escaped.py", body: "evil"}})
			},
		},
		{
			name: "zip entry with a backslash",
			out:  "unsafe entry name",
			write: func(t *testing.T, e *installEnv) {
				writeZip(t, filepath.Join(e.art, "wheel"), []archEntry{{name: `..\escaped.py`, body: "evil"}})
			},
		},
		{
			name: "zip entry twice",
			out:  "FileExistsError",
			write: func(t *testing.T, e *installEnv) {
				writeZip(t, filepath.Join(e.art, "wheel"), []archEntry{{name: "demo/a.py", body: "1"}, {name: "demo/a.py", body: "2"}})
			},
		},
		{
			name: "tar entry with ..",
			out:  "unsafe entry name",
			write: func(t *testing.T, e *installEnv) {
				writeTgz(t, filepath.Join(e.art, "tgz"), []archEntry{{name: "package/../../../escaped.py", body: "evil"}})
			},
		},
		{
			name: "tar symlink",
			out:  "is not a file",
			write: func(t *testing.T, e *installEnv) {
				writeTgz(t, filepath.Join(e.art, "tgz"), []archEntry{{name: "package/link", typ: '2', link: "/etc/passwd"}})
			},
		},
		{
			name: "js path with ..",
			out:  "unsafe entry name",
			steps: func(e *installEnv) installSteps {
				return installSteps{JavaScript: []jsStep{{Name: "x", Version: "1.0.0", File: "tgz", Path: "../escaped"}}}
			},
			write: func(t *testing.T, e *installEnv) {
				writeTgz(t, filepath.Join(e.art, "tgz"), []archEntry{{name: "package/escaped.py", body: "evil"}})
			},
		},
		{
			name: "js path absolute",
			out:  "unsafe entry name",
			steps: func(e *installEnv) installSteps {
				return installSteps{JavaScript: []jsStep{{Name: "x", Version: "1.0.0", File: "tgz", Path: filepath.Join(e.outside, "abs")}}}
			},
			write: func(t *testing.T, e *installEnv) {
				writeTgz(t, filepath.Join(e.art, "tgz"), []archEntry{{name: "package/escaped.py", body: "evil"}})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newInstallEnv(t)
			tt.write(t, e)
			steps := installSteps{}
			if tt.steps != nil {
				steps = tt.steps(e)
			} else if _, err := os.Stat(filepath.Join(e.art, "wheel")); err == nil {
				steps.Python = []pyStep{{Name: "demo", Version: "1.0", File: "wheel", DataDir: "demo-1.0.data/"}}
			} else {
				steps.JavaScript = []jsStep{{Name: "x", Version: "1.0.0", File: "tgz", Path: "node_modules/x"}}
			}
			lock := "must not be written"
			steps.Lock = &lock
			out, err := e.run(t, steps)
			if err == nil {
				t.Fatalf("install.py succeeded:\n%s", out)
			}
			if _, ok := err.(*exec.ExitError); !ok {
				t.Fatalf("install.py did not run: %v", err)
			}
			if !strings.Contains(out, tt.out) {
				t.Errorf("install.py output does not say %q:\n%s", tt.out, out)
			}
			// Nothing outside the build dir: the root holds only what the
			// test made.
			for _, p := range tree(t, e.outside) {
				if !strings.HasPrefix(p, "build/") && !strings.HasPrefix(p, "artifacts/") && p != "install.py" {
					t.Errorf("install.py wrote %s outside the build dir", p)
				}
			}
			for _, p := range tree(t, e.build) {
				if strings.Contains(p, "escaped") {
					t.Errorf("install.py wrote %s", p)
				}
			}
			if _, err := os.Lstat(filepath.Join(e.ws, LockFile)); err == nil {
				t.Error("install.py wrote the lock after a refused artifact")
			}
		})
	}
}

func TestInstallScriptLock(t *testing.T) {
	e := newInstallEnv(t)
	target := filepath.Join(e.ws, LockFile)
	text := string(validLock().Marshal())

	if out, err := e.run(t, installSteps{Lock: &text}); err != nil {
		t.Fatalf("install.py: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != text {
		t.Fatalf("%s = %q, %v; want the lock text", LockFile, b, err)
	}
	if got := tree(t, e.ws); len(got) != 1 {
		t.Errorf("workspace holds %v, want only %s (no temp file left)", got, LockFile)
	}

	// No lock step (a rebuild): the lock stays as it is.
	if out, err := e.run(t, installSteps{}); err != nil {
		t.Fatalf("install.py: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != text {
		t.Fatalf("a rebuild changed %s: %q, %v", LockFile, b, err)
	}

	// A new lock replaces the old.
	other := "{\"version\": 1}\n"
	if out, err := e.run(t, installSteps{Lock: &other}); err != nil {
		t.Fatalf("install.py: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != other {
		t.Fatalf("%s = %q, %v; want %q", LockFile, b, err, other)
	}

	// "" removes it, and removing what is not there is no error.
	empty := ""
	for range 2 {
		if out, err := e.run(t, installSteps{Lock: &empty}); err != nil {
			t.Fatalf("install.py: %v\n%s", err, out)
		}
		if _, err := os.Lstat(target); !os.IsNotExist(err) {
			t.Fatalf("lock \"\" left %s: %v", LockFile, err)
		}
	}

	// A symlink the agent left at the lock's name is replaced, not
	// followed.
	victim := filepath.Join(e.outside, "victim")
	writeFile(t, victim, "keep")
	if err := os.Symlink(victim, target); err != nil {
		t.Fatal(err)
	}
	if out, err := e.run(t, installSteps{Lock: &text}); err != nil {
		t.Fatalf("install.py: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("writing the lock followed a symlink: victim = %q", b)
	}
	if info, err := os.Lstat(target); err != nil || !info.Mode().IsRegular() {
		t.Errorf("%s is not a regular file after the write: %v", LockFile, err)
	}
}
