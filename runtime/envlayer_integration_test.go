package runtime_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/runtime"
)

// layerDir makes a package layer as internal/packages does: a Python module
// under python/, an npm package under node_modules/, readable by the
// sandbox user.
func layerDir(t *testing.T, marker string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"python/sp_layer_mod.py":             "VALUE = " + `"` + marker + `"` + "\n",
		"node_modules/sp-layer/index.js":     "module.exports = " + `"` + marker + `"` + ";\n",
		"node_modules/sp-layer/package.json": `{"name": "sp-layer", "version": "1.0.0", "main": "index.js"}`,
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

const (
	importLayer = "import sp_layer_mod; print('value', sp_layer_mod.VALUE)"
	writeLayer  = `
import errno
for p in ("/opt/sandpit/env/python/evil.py", "/opt/sandpit/env/new.txt"):
    try:
        open(p, "w").write("x")
        print("WROTE", p)
    except OSError as e:
        print("refused", p, errno.errorcode[e.errno])
`
)

// TestPackageLayerIsImportableAndReadOnly: a run given a layer imports from
// it (Python and Node) and cannot write it, cold, pooled and in a session;
// a run without one sees none, even in a pooled sandbox or session that
// had one attached before.
func TestPackageLayerIsImportableAndReadOnly(t *testing.T) {
	layer := layerDir(t, "from-layer")
	runtimes := map[string]*runtime.Runtime{
		"cold":   newRuntime(t),
		"pooled": newRuntime(t, withPool(1, time.Minute)),
	}
	for name, r := range runtimes {
		t.Run(name, func(t *testing.T) {
			if name == "pooled" {
				waitReady(t, r, "python", 1)
			}
			res := run(t, r, sandpit.Request{Language: "python", Code: importLayer, Env: layer})
			if res.Status != sandpit.StatusSuccess || !strings.Contains(res.Stdout, "value from-layer") {
				t.Fatalf("import from the layer: %s %q %q", res.Status, res.Stdout, res.Stderr)
			}
			res = run(t, r, sandpit.Request{Language: "javascript", Code: "console.log('value', require('sp-layer'))", Env: layer})
			if res.Status != sandpit.StatusSuccess || !strings.Contains(res.Stdout, "value from-layer") {
				t.Fatalf("require from the layer: %s %q %q", res.Status, res.Stdout, res.Stderr)
			}
			res = run(t, r, sandpit.Request{Language: "python", Code: writeLayer, Env: layer})
			if strings.Contains(res.Stdout, "WROTE") || strings.Count(res.Stdout, "refused") != 2 {
				t.Fatalf("the layer must be read-only: %q %q", res.Stdout, res.Stderr)
			}
			if name == "pooled" {
				waitReady(t, r, "python", 1)
			}
			res = run(t, r, sandpit.Request{Language: "python", Code: importLayer})
			if res.Status != sandpit.StatusError || !strings.Contains(res.Stderr, "ModuleNotFoundError") {
				t.Fatalf("a run without a layer imported one: %s %q %q", res.Status, res.Stdout, res.Stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(layer, "python", "evil.py")); err == nil {
		t.Fatal("a sandbox wrote into the layer on the host")
	}

	t.Run("session", func(t *testing.T) {
		r := newRuntime(t, withSessions(runtime.SessionConfig{Grace: 20 * time.Second}))
		call := func(code, env string) *sandpit.Result {
			return run(t, r, sandpit.Request{Language: "python", Code: code, Session: "s", Env: env})
		}
		if res := call("import sys; n = 1; print('started')", ""); res.Status != sandpit.StatusSuccess {
			t.Fatalf("start: %s %q", res.Status, res.Stderr)
		}
		if res := call(importLayer, ""); !strings.Contains(res.Stderr, "ModuleNotFoundError") {
			t.Fatalf("no layer yet, yet: %s %q %q", res.Status, res.Stdout, res.Stderr)
		}
		// Installed mid-session: the next call that has the layer imports it.
		if res := call(importLayer, layer); res.Status != sandpit.StatusSuccess || !strings.Contains(res.Stdout, "value from-layer") {
			t.Fatalf("session import from the layer: %s %q %q", res.Status, res.Stdout, res.Stderr)
		}
		if res := call(writeLayer, layer); strings.Contains(res.Stdout, "WROTE") || strings.Count(res.Stdout, "refused") != 2 {
			t.Fatalf("the layer must be read-only in a session: %q %q", res.Stdout, res.Stderr)
		}
		if res := call("print(open('/opt/sandpit/env/python/sp_layer_mod.py').read())", ""); res.Status == sandpit.StatusSuccess {
			t.Fatalf("a call without the layer still sees it: %q", res.Stdout)
		}
	})
}

// TestInstallStepMounts: an install step reads its artifacts (read-only),
// writes the layer it builds, and has neither on its import path.
func TestInstallStepMounts(t *testing.T) {
	r := newRuntime(t, withPool(1, time.Minute))
	art, build := t.TempDir(), t.TempDir()
	for _, d := range []string{art, build} {
		os.Chmod(d, 0o777)
	}
	os.WriteFile(filepath.Join(art, "a.txt"), []byte("artifact"), 0o644)
	code := `
import errno, os, sys
print("path", [p for p in sys.path if p.startswith("/opt/sandpit")])
data = open("/opt/sandpit/artifacts/a.txt").read()
os.makedirs("/opt/sandpit/build/python")
open("/opt/sandpit/build/python/copied.txt", "w").write(data)
try:
    open("/opt/sandpit/artifacts/b.txt", "w")
    print("WROTE artifacts")
except OSError as e:
    print("artifacts", errno.errorcode[e.errno])
`
	res := run(t, r, sandpit.Request{Language: "python", Code: code, Install: &sandpit.InstallDirs{Artifacts: art, Layer: build}})
	if res.Status != sandpit.StatusSuccess || !strings.Contains(res.Stdout, "artifacts EROFS") {
		t.Fatalf("install step: %s %q %q", res.Status, res.Stdout, res.Stderr)
	}
	if strings.Contains(res.Stdout, "/opt/sandpit/build") || strings.Contains(res.Stdout, "/opt/sandpit/artifacts") {
		t.Fatalf("an install step's dirs are on its import path: %q", res.Stdout)
	}
	if b, err := os.ReadFile(filepath.Join(build, "python", "copied.txt")); err != nil || string(b) != "artifact" {
		t.Fatalf("layer on the host: %q %v", b, err)
	}
	for _, bad := range []sandpit.Request{
		{Language: "python", Code: "1", Install: &sandpit.InstallDirs{Artifacts: art, Layer: build}, Env: build},
		{Language: "python", Code: "1", Install: &sandpit.InstallDirs{Artifacts: art, Layer: build}, Session: "s"},
		{Language: "python", Code: "1", Env: filepath.Join(build, "missing")},
		{Language: "python", Code: "1", Install: &sandpit.InstallDirs{Artifacts: "relative", Layer: build}},
	} {
		if _, err := r.Run(t.Context(), bad); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}
